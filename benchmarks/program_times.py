"""How long one interpreter program of a drawn campaign case runs, against the limit the program watch allows it.

    python -m benchmarks.program_times --cases 150 --seed 2 --out benchmarks/results/program_times_cpu.json

Draws ``--cases`` cases as a quick CPU campaign does (its caps included), checks each in this process as a worker
would, with ``fuzz.execution.stall``'s watch hooked into the interpreter, and records per case its wall time,
its longest program, and the program limit (``stall_for``) and timeout (``timeout_for``) the supervisor gives it.
The summary's ``smallest_margin`` is the least limit / longest program over the cases: the watch cries wolf
only where it falls below one.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tbe.backend import INTERPRETED  # noqa: F401  (first: it picks the interpreter before triton is imported)

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from fuzz.budgets import BUDGETS  # noqa: E402
from fuzz.execution import stall  # noqa: E402
from fuzz.execution.envelope import expected_seconds, stall_for, timeout_for  # noqa: E402
from fuzz.judge import run_case  # noqa: E402
from fuzz.profiles import MAX_CHUNKS, MAX_COLUMN_BLOCKS, MAX_WORK  # noqa: E402
from cases import split_draw, tensors  # noqa: E402
from strategies.space import campaign_cases  # noqa: E402
from tbe import KernelConfig  # noqa: E402


def draws(n: int, at: int, budget: str) -> list:
    """``n`` (case, config) pairs drawn as ``tbe-fuzz run --budget budget`` draws them, seeded by ``at``."""
    base, b = KernelConfig(), BUDGETS[budget]
    strategy = campaign_cases(base, b.max_lookups, max_column_blocks=MAX_COLUMN_BLOCKS, pack=b.pack,
                              max_chunks=MAX_CHUNKS, max_work=MAX_WORK)
    out: list = []

    @settings(max_examples=n, phases=[Phase.generate], deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @seed(at)
    @given(strategy)
    def collect(drawn):
        out.append(split_draw(drawn, base)[:2])

    collect()
    return out[:n]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=150)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", default="quick")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    watch = stall.install()
    if watch is None:
        raise SystemExit("program_times: needs Triton's interpreter (TRITON_INTERPRET=1, or no GPU)")
    rows = []
    for case, cfg in draws(args.cases, args.seed, args.budget):
        t = tensors(case, weights=False)
        watch.arm(float("inf"), lambda stalled: None)
        t0 = time.perf_counter()
        run_case(case, cfg, t)
        seconds = time.perf_counter() - t0
        watch.disarm()
        tables, bags, lookups = case.size()
        rows.append({"lookups": lookups, "bags": bags, "tables": tables, "seconds": round(seconds, 3),
                     "longest_program": round(watch.longest, 3), "expected": round(expected_seconds(case), 2),
                     "stall_for": round(stall_for(case), 1), "timeout_for": round(timeout_for(case), 1)})
        print(json.dumps(rows[-1]), flush=True)
    summary = {"cases": len(rows), "longest_program": max(r["longest_program"] for r in rows),
               "longest_case": max(r["seconds"] for r in rows),
               "smallest_margin": round(min(r["stall_for"] / max(r["longest_program"], 1e-3) for r in rows), 1),
               "command": f"python -m benchmarks.program_times --cases {args.cases} --seed {args.seed} "
                          f"--budget {args.budget}"}
    print(json.dumps(summary))
    if args.out is not None:
        args.out.write_text(json.dumps({"summary": summary, "cases": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
