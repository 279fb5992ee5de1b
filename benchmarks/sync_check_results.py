"""Record the static sync check under the installed Triton, for the committed results.

``python -m benchmarks.sync_check_results --out benchmarks/results/sync_check_triton<ver>.json``
(no GPU needed) checks the fused long tier clean, with ``no_fence`` and with ``no_barrier`` at
level ``ci`` (every bucket and WIDE form, every other setting flipped at the edges), plus the
exact launch of every race-stress variant with ``no_barrier``, and writes per specialization
the PTX lines relied on (partial, barriers, release) or the problems found.
"""

from __future__ import annotations

import argparse
import json

from tbe.env import ALLOW_FAULTS  # noqa: E402

ALLOW_FAULTS.setdefault("1")

from fuzz.memcheck.race_stress import VARIANTS, barrier_gap  # noqa: E402
from fuzz.memcheck.sync_check import check_config  # noqa: E402
from tbe import KernelConfig  # noqa: E402


def summary(report) -> dict:
    specs = []
    for c in report.checked:
        lc = c.compiled.launch
        pair = c.sync.pairs[0] if c.sync and c.sync.pairs else None
        specs.append({
            "constexprs": {k: json.loads(v) for k, v in lc.constexprs}, "num_warps": lc.num_warps,
            "tensor_dtypes": sorted({json.loads(a)["dtype"] for a in lc.args if '"dtype"' in a}),
            "status": "error" if c.error else ("ok" if not c.problems else "problem"),
            "registers": c.compiled.registers, "local_bytes": c.compiled.local_bytes,
            "partial": pair.partial if pair else None, "countdown": pair.countdown if pair else None,
            "barriers": pair.barriers if pair else [], "release": pair.release if pair else [],
            "problems": list(dict.fromkeys(c.problems)), "error": c.error,
        })
    return {"ok": report.ok, "specializations": len(report.checked),
            "with_problems": sum(s["status"] == "problem" for s in specs), "seconds": round(report.seconds, 1),
            "compiler_barriers": report.compiler_barriers()[:3], "details": specs}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    import triton

    base = KernelConfig(fused_long_tier=True)
    out = {"triton": triton.__version__, "target": "sm_90", "level": "ci", "configs": {}, "stress_no_barrier": []}
    for name, faults in (("clean", ()), ("no_fence", ("no_fence",)), ("no_barrier", ("no_barrier",))):
        s = summary(check_config(base.replace(faults=faults)))
        out["configs"][name] = s
        print(f"triton {triton.__version__} {name}: ok={s['ok']}, {s['with_problems']} of {s['specializations']} "
              f"specializations with problems", flush=True)
    for v in VARIANTS:
        gap, _ = barrier_gap(v, rows=64)  # rows 64: the same specialization classes as the GPU's 65,536
        out["stress_no_barrier"].append({"variant": v.label, "ptx_without_barrier": gap})
        print(f"  stress {v.label}: {'no barrier before the countdown' if gap else 'barrier present'}", flush=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
