"""Compile recorded launches for a CUDA target (sm_90 by default) on any machine, GPU or not.

Each batch of launches goes to a child process (``fuzz.compile.cuda_target_worker``, ``TRITON_INTERPRET=0``,
so kernels are real JITFunctions while this process may run the interpreter); batches run in
parallel, one child per core. Results (PTX, registers, local/stack bytes, shared memory) are
cached on disk under ``$TBE_FUZZ_CACHE`` (default ``~/.cache/tbe-fuzz``), keyed by the Triton
version, the target, the launch and a hash of the kernel package's sources, so a repeated check
compiles nothing. The static sync check, the config gate's compile level, mutation testing and
compile warm-up all build on ``compile_launches``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional, Sequence

from fuzz.compile.launches import Launch
from tbe.env import Kind, register

CACHE = register(
    "TBE_FUZZ_CACHE", Kind.PATH, "~/.cache/tbe-fuzz",
    "cache of the sm_90 compiles the static checks read (under compiled/)")

SM90 = ("cuda", 90, 32)
ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class Compiled:
    """One launch compiled for one target (``error`` set when it did not compile)."""

    launch: Launch
    target: tuple
    ptx: str = ""
    registers: int = 0
    local_bytes: int = 0    # per-thread local memory: register spills and local arrays
    stack_bytes: int = 0
    shared_static: int = 0  # from the cubin
    shared_dynamic: int = 0  # what Triton asks for at launch
    seconds: float = 0.0
    cached: bool = False
    error: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.error is None


def triton_version() -> str:
    import triton

    return triton.__version__


def source_hash(module: str) -> str:
    """Hash of every .py file in the kernel module's package (its @triton.jit helpers live there)."""
    pkg = ROOT / module.split(".")[0]
    h = hashlib.sha256()
    for path in sorted(pkg.rglob("*.py")):
        h.update(path.relative_to(ROOT).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cache_dir() -> Path:
    return CACHE.path() / "compiled"


def _cache_path(launch: Launch, target: tuple, sources: dict[str, str]) -> Path:
    key = json.dumps([triton_version(), list(target), sources[launch.module], launch.key()])
    return cache_dir() / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def _from_result(launch: Launch, target: tuple, res: dict, cached: bool) -> Compiled:
    if "error" in res:
        return Compiled(launch, target, error=res["error"], cached=cached)
    return Compiled(launch, target, ptx=res["ptx"], registers=res.get("reg", 0), local_bytes=res.get("local", 0),
                    stack_bytes=res.get("stack", 0), shared_static=res.get("shared", 0),
                    shared_dynamic=res.get("shared_dynamic", 0), seconds=res.get("seconds", 0.0), cached=cached)


def _run_child(launches: Sequence[Launch], target: tuple, python: str) -> list[dict]:
    env = dict(os.environ, TRITON_INTERPRET="0")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    with tempfile.TemporaryDirectory(prefix="tbe-fuzz-compile-") as tmp:
        job = {"target": list(target), "tmpdir": tmp, "launches": [lc.to_dict() for lc in launches]}
        proc = subprocess.run([python, "-m", "fuzz.compile.cuda_target_worker"], input=json.dumps(job), capture_output=True,
                              text=True, env=env, cwd=str(ROOT))
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode != 0 or len(lines) != len(launches):
        tail = proc.stderr.strip().splitlines()[-5:]
        err = f"compile worker exited {proc.returncode} after {len(lines)} of {len(launches)}: " + " | ".join(tail)
        return [json.loads(ln) for ln in lines] + [{"error": err}] * (len(launches) - len(lines))
    return [json.loads(ln) for ln in lines]


def compile_launches(
    launches: Sequence[Launch], target: tuple = SM90, jobs: Optional[int] = None, use_cache: bool = True,
    python: Optional[str] = None,
) -> list[Compiled]:
    """Compile every launch for ``target`` (results in input order; duplicates compiled once)."""
    sources = {m: source_hash(m) for m in {lc.module for lc in launches}}
    results: dict[str, Compiled] = {}
    todo: list[Launch] = []
    for lc in launches:
        if lc.key() in results or any(t.key() == lc.key() for t in todo):
            continue
        path = _cache_path(lc, target, sources)
        if use_cache and path.is_file():
            results[lc.key()] = _from_result(lc, target, json.loads(path.read_text()), cached=True)
        else:
            todo.append(lc)
    if todo:
        n = max(1, min(jobs or os.cpu_count() or 1, len(todo)))
        batches = [todo[i::n] for i in range(n)]
        with ThreadPoolExecutor(n) as pool:
            outs = list(pool.map(lambda b: _run_child(b, target, python or sys.executable), batches))
        for batch, out in zip(batches, outs):
            for lc, res in zip(batch, out):
                results[lc.key()] = _from_result(lc, target, res, cached=False)
                if use_cache and "error" not in res:
                    path = _cache_path(lc, target, sources)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    tmp = path.with_suffix(f".{os.getpid()}.tmp")
                    tmp.write_text(json.dumps(res))
                    tmp.replace(path)
    return [results[lc.key()] for lc in launches]


def timed_compile(launches: Sequence[Launch], **kw) -> tuple[list[Compiled], float]:
    t0 = time.perf_counter()
    out = compile_launches(launches, **kw)
    return out, time.perf_counter() - t0
