"""False alarms of the probabilistic bound: clean campaigns judged under it.

``python -m benchmarks.false_alarms --campaigns 50 --examples 25 --out FILE`` runs
campaigns with seeds 0..N-1 under the shipped KernelConfig (no fault planted) with
``--bound probabilistic``; every failure is a false alarm of the bound (or a real kernel
bug, which the same case under the worst-case bound tells apart: it is re-judged there).
Prints one JSON line per campaign and a summary; ``--out`` keeps all of it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from fuzz.budgets import get
from fuzz.campaign import CampaignOptions, CampaignRunner
from fuzz.judge import run_case
from oracles.error_model import WORST, ErrorModel
from tbe import KernelConfig


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--campaigns", type=int, default=50)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--examples", type=int, default=25, help="examples per campaign")
    p.add_argument("--time", type=float, default=120.0, help="search seconds per campaign (cap)")
    p.add_argument("--budget", default="quick", help="size budget of the examples (fuzz.budgets)")
    p.add_argument("--false-alarm", type=float, default=1e-6, help="probability per check")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    model = ErrorModel("probabilistic", args.false_alarm)
    budget = get(args.budget).with_overrides(seconds=args.time, max_examples=args.examples)
    rows, t0 = [], time.perf_counter()
    for seed in range(args.first_seed, args.first_seed + args.campaigns):
        res = CampaignRunner(KernelConfig(), budget, seed, CampaignOptions(
            artifacts_dir=None, shrink=False, model=model)).run()
        row = {"seed": seed, "ok": res.ok, "examples": res.examples, "lookups": res.lookups,
               "seconds": round(res.seconds, 1), "max_ratio": res.max_ratio,
               "longest_band": max((k for k, b in res.teeth.to_json().items()), default=None,
                                   key=lambda k: list(res.teeth.bands).index(k))}
        if not res.ok:
            worst = run_case(res.failure.case, KernelConfig(), model=WORST)
            row["failure"] = res.failure.text().splitlines()[:6]
            row["passes_worst_case"] = worst.ok  # True: a false alarm of the probabilistic bound
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    alarms = [r for r in rows if not r["ok"] and r.get("passes_worst_case")]
    summary = {
        "campaigns": len(rows), "examples": sum(r["examples"] for r in rows),
        "lookups": sum(r["lookups"] for r in rows), "false_alarms": len(alarms),
        "real_failures": sum(1 for r in rows if not r["ok"] and not r.get("passes_worst_case")),
        "max_ratio": max((max(r["max_ratio"].values(), default=0.0) for r in rows if r["ok"]), default=0.0),
        "false_alarm_per_check": args.false_alarm, "budget": args.budget, "seconds": round(time.perf_counter() - t0),
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
    }
    print(json.dumps(summary, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": summary, "campaigns": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
