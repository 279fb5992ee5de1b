"""Child process of ``tests/fuzz/compile/test_kernel_cache.py``: compile one tiny kernel for sm_90 (no GPU needed) under
whatever Triton cache manager the environment names, after a start signal, and print what Triton's
compilation listener saw as JSON: ``{"compiled": n, "loaded": m}``.

Run as ``python -m tests.kernel_cache_probe GO_FILE [SCALE]`` with ``TRITON_INTERPRET=0``; it starts
compiling once ``GO_FILE`` exists, so two children miss the cache together.
"""

from __future__ import annotations

import json
import os
import sys
import time

import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * SCALE, mask=mask)


def main() -> int:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    go, scale = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    seen = {"compiled": 0, "loaded": 0}

    def listener(*args, cache_hit=False, **kwargs):
        seen["loaded" if cache_hit else "compiled"] += 1

    triton.knobs.compilation.listener = listener
    print("ready", file=sys.stderr, flush=True)
    while not os.path.exists(go):
        time.sleep(0.005)
    src = ASTSource(_scale_kernel, {"x_ptr": "*fp32", "n": "i32", "SCALE": "constexpr", "BLOCK": "constexpr"},
                    {"SCALE": scale, "BLOCK": 128})
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32))
    seen["cubin_bytes"] = len(kernel.asm["cubin"])
    print(json.dumps(seen), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
