"""Compare the sm_90 code of the kernels of another checkout with this one's, without a GPU.

    python -m benchmarks.ptx_compare --old /path/to/other/checkout

Both checkouts record the launches of the same probes (a forward and a step each) and compile
them for sm_90 with the installed Triton (``fuzz.compile.cuda_target``). The table compares instruction
streams with line info, debug sections, parameter declarations and register numbers set
aside, so a change that only reorders a signature or renames reads as "same": evidence that
a refactor leaves the timed code alone (the H200 is still where speed is measured).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBES = [  # (label, Probe keyword arguments, KernelConfig overrides)
    ("D128 fp32 int64 sum adagrad", dict(tables=((64, 128),), optimizer="exact_rowwise_adagrad", lookups_per_bag=6), {}),
    ("D256 fp16 int64 sum adagrad", dict(tables=((64, 256),), weights_dtype="fp16", optimizer="exact_rowwise_adagrad",
                                         lookups_per_bag=6), {}),
    ("D128 fp32 int32 mean weighted", dict(tables=((64, 128),), index_dtype="int32", pooling="mean", weighted=True,
                                           lookups_per_bag=6), {}),
    # rows wider than the widest bucket: the column loops (WIDE) of the short tier and the apply kernel
    ("D384 fp32 int64 sum adagrad wide", dict(tables=((64, 384),), optimizer="exact_rowwise_adagrad",
                                              lookups_per_bag=6), {}),
    ("D384 fp16 int64 mean sgd wide", dict(tables=((64, 384),), weights_dtype="fp16", pooling="mean",
                                           lookups_per_bag=6), {}),
    ("D384 fp32 adagrad wide, fused long", dict(tables=((64, 384),), optimizer="exact_rowwise_adagrad",
                                                lookups_per_bag=6), {"fused_long_tier": True}),
]


def dump(out: str) -> None:
    """In the checkout on sys.path: compile every probe's launches, write {kernel: [(probe, ptx, regs)]}."""
    from fuzz.compile import compile_launches
    from fuzz.compile import Probe, run_probe
    from tbe import KernelConfig

    base = KernelConfig(long_run_threshold=4, chunk_size=2)  # long runs, so every backward kernel launches
    res: dict[str, list] = {}
    for label, kw, overrides in PROBES:
        config = base.replace(**overrides) if overrides else base
        for c in compile_launches(run_probe(Probe(**kw), config, execute=True), use_cache=False):
            res.setdefault(c.launch.name, []).append([label, c.ptx, c.registers, c.error])
    Path(out).write_text(json.dumps(res))


def code(ptx: str) -> list[str]:
    """The instructions alone, registers and labels renamed by kind."""
    out = []
    for line in ptx.split(".section")[0].splitlines():
        s = line.split("//")[0].strip()
        if not s or s.startswith((".loc", ".file", ".param", "ld.param", ".reg", "$L__")):
            continue
        out.append(re.sub(r"\$L__\w+", "L", re.sub(r"%(r|rd|p|f|rs|fd)\d+", r"%\1", s)))
    return out


def _run(checkout: Path, out: str) -> None:
    # run as a script, this file's folder leads sys.path, then the checkout: its own tbe and fuzz
    env = dict(os.environ, PYTHONPATH=str(checkout))
    subprocess.run([sys.executable, __file__, "--dump", out], cwd=str(checkout), env=env, check=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", type=Path, help="the other checkout (a git worktree, say)")
    p.add_argument("--dump", help=argparse.SUPPRESS)  # internal: one checkout's side, run by _run
    args = p.parse_args()
    if args.dump:
        dump(args.dump)
        return 0
    if args.old is None:
        p.error("--old is required")
    with tempfile.TemporaryDirectory() as tmp:
        _run(args.old.resolve(), f"{tmp}/old.json")
        _run(ROOT, f"{tmp}/new.json")
        old, new = (json.loads(Path(f"{tmp}/{n}.json").read_text()) for n in ("old", "new"))
    print(f"{'kernel':<22} {'probe':<32} {'registers':>10} {'instructions':>14}  code")
    for name in sorted(set(old) | set(new)):
        for a, b in zip(old.get(name, []), new.get(name, [])):
            ca, cb = code(a[1]), code(b[1])
            print(f"{name:<22} {a[0]:<32} {a[2]:>4} -> {b[2]:<4} {len(ca):>6} -> {len(cb):<6} "
                  f"{'same' if ca == cb else 'DIFFERENT'}{' ' + (a[3] or b[3]) if a[3] or b[3] else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
