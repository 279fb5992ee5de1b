"""Child process of ``fuzz.compile.cuda_target``: compiles recorded launches for a CUDA target, no GPU needed.

Run as ``python -m fuzz.compile.cuda_target_worker`` with ``TRITON_INTERPRET=0`` (so the kernels are real
JITFunctions); reads ``{"target": [backend, arch, warp_size], "launches": [...]}`` as JSON on
stdin and writes one JSON result per launch on stdout. Each launch goes through Triton's own
binder and ``_pack_args``, so the signature, constexprs and divisibility attributes are those
a launch on the device would get.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import time
import warnings
from typing import Any


class _Arg:
    """Stands in for a tensor argument: Triton's specialization reads only dtype and alignment."""

    def __init__(self, dtype, aligned: bool) -> None:
        self.dtype = dtype
        self._ptr = 0 if aligned else 8

    def data_ptr(self) -> int:
        return self._ptr


def _value(spec: dict[str, Any]):
    import torch

    kind = spec["kind"]
    if kind == "tensor":
        return _Arg(getattr(torch, spec["dtype"]), spec["aligned"])
    if kind in ("int", "bool"):
        return spec["value"]
    if kind == "float":
        return 1.5
    return None


def _constexpr(value: Any):
    import triton.language as tl

    if isinstance(value, dict) and "tl_dtype" in value:
        return tl.dtype(value["tl_dtype"])
    return value


def resource_usage(cubin: bytes, tmpdir: str) -> dict[str, int]:
    """REG, STACK, SHARED and LOCAL (spilled or local-array bytes per thread) from ``cuobjdump -res-usage``."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    path = os.path.join(tmpdir, f"k{os.getpid()}.cubin")
    with open(path, "wb") as f:
        f.write(cubin)
    out = subprocess.run([tool, "-res-usage", path], capture_output=True, text=True, check=True).stdout
    found = dict(re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", out))
    return {k.lower(): int(v) for k, v in found.items()}


def compile_one(launch: dict[str, Any], target, tmpdir: str) -> dict[str, Any]:
    import triton
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    t0 = time.perf_counter()
    fn = getattr(importlib.import_module(launch["module"]), launch["name"])
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    names = [p.name for p in fn.params if not p.is_constexpr]
    if len(names) != len(launch["args"]):
        raise ValueError(f"{launch['name']}: {len(launch['args'])} recorded arguments, kernel takes {len(names)}")
    kwargs = {n: _value(s) for n, s in zip(names, launch["args"])}
    kwargs.update({k: _constexpr(v) for k, v in launch["constexprs"].items()})
    kwargs["num_warps"] = launch["num_warps"]
    bound, spec, opts = binder(**kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, {"num_warps": launch["num_warps"]}, bound,
                                                          spec, opts)
    kernel = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)
    usage = resource_usage(kernel.asm["cubin"], tmpdir)
    return {"ptx": kernel.asm["ptx"], "shared_dynamic": int(kernel.metadata.shared), **usage,
            "seconds": round(time.perf_counter() - t0, 3)}


def main() -> int:
    if os.environ.get("TRITON_INTERPRET") not in (None, "0"):
        print("fuzz.compile.cuda_target_worker needs TRITON_INTERPRET=0", file=sys.stderr)
        return 2
    os.environ["TRITON_INTERPRET"] = "0"
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # the default either way; silences 3.9's notice
    from triton.backends.compiler import GPUTarget

    job = json.load(sys.stdin)
    target = GPUTarget(*job["target"])
    tmpdir = job["tmpdir"]
    out = sys.stdout
    sys.stdout = sys.stderr  # anything Triton prints must not corrupt the results
    for launch in job["launches"]:
        try:
            res = compile_one(launch, target, tmpdir)
        except Exception as e:  # a launch that does not compile is a result, not a crash
            res = {"error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(res) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
