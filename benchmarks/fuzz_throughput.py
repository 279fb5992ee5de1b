"""Fuzz throughput after warm-up: examples/s on small cases, lookups/s checked on large ones,
seconds per planted fault in the self-test. Writes JSON and prints a short table.

    python -m benchmarks.fuzz_throughput --out benchmarks/results/fuzz_throughput_h200.json

Small cases: the campaign's own search space capped at 10,000 lookups per example; large:
the backend's full budget (``fuzz.profiles.MAX_LOOKUPS``), so the segment-length spread is
the campaign's. Each part first warms the kernels it can reach (reported apart, not timed
into the rates); the compile count during each search is recorded (it should be 0).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from tbe.backend import INTERPRETED  # first: it picks the interpreter before triton is imported

import torch  # noqa: E402
import triton  # noqa: E402

from fuzz.budgets import Budget
from fuzz.campaign import run_campaign
from fuzz.profiles import MAX_LOOKUPS
from fuzz.compile import warm_campaigns
from tbe import KernelConfig


def campaign_part(name: str, seconds: float, max_lookups: int, seed: int) -> dict:
    budget = Budget(name, seconds=seconds, shrink_seconds=0.0, max_examples=10**7, max_lookups=max_lookups)
    res = run_campaign(KernelConfig(), budget, seed=seed, artifacts_dir=None, shrink=False)
    return {"max_lookups_per_example": max_lookups, "seconds": round(res.seconds, 2), "examples": res.examples,
            "lookups": res.lookups, "examples_per_s": round(res.examples / res.seconds, 2),
            "lookups_per_s": round(res.lookups / res.seconds), "ok": res.ok, "compiles": res.compiles.to_dict(),
            "fbgemm": dict(res.fbgemm), "tiers": dict(res.tiers), "stopped_by": res.stopped_by,
            "failure": None if res.ok else res.failure.text()[:2000]}


def selftest_part(seconds: float, seed: int, processes: int | None) -> dict:
    from fuzz.selftest import run_selftest
    from tbe import faults

    names = sorted(faults.KNOWN)
    with faults.allow():  # a hanging fault's warm-up would never return: its campaign compiles its kernels
        warm = warm_campaigns([KernelConfig(faults=(f,)) for f in names if f not in faults.HANGS], processes)
    budget = Budget("selftest", seconds=seconds, shrink_seconds=5.0, max_examples=10**6,
                    max_lookups=min(MAX_LOOKUPS, 1_000_000))
    out = {"warmup": warm.to_dict(), "per_fault": {}}
    for r in run_selftest(budget, seed=seed):
        c = r.first_catch
        out["per_fault"][r.fault] = {"status": r.status, "seconds_to_catch": None if c is None else c.seconds,
                                     "examples_to_catch": None if c is None else c.examples,
                                     "detections": [d.to_dict() for d in r.detections]}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--parts", default="small,large,selftest")
    p.add_argument("--small-seconds", type=float, default=30.0)
    p.add_argument("--large-seconds", type=float, default=30.0)
    p.add_argument("--selftest-seconds", type=float, default=10.0, help="search budget per fault")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--processes", type=int, default=None, help="warm-up processes (default: cores, <= 16)")
    args = p.parse_args()
    parts = [x for x in args.parts.split(",") if x]
    res = {"device": torch.cuda.get_device_name(0) if not INTERPRETED else f"CPU interpreter ({platform.processor()})",
           "torch": torch.__version__, "triton": triton.__version__, "seed": args.seed,
           "command": "python -m benchmarks.fuzz_throughput " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in
                                                                       vars(args).items() if v is not None)}
    t0 = time.perf_counter()
    if {"small", "large"} & set(parts):
        res["warmup"] = warm_campaigns([KernelConfig()], args.processes).to_dict()  # what `tbe-fuzz run` warms
    if "small" in parts:
        res["small"] = campaign_part("small", args.small_seconds, min(MAX_LOOKUPS, 10_000), args.seed)
    if "large" in parts:
        res["large"] = campaign_part("large", args.large_seconds, MAX_LOOKUPS, args.seed)
    if "selftest" in parts:
        res["selftest"] = selftest_part(args.selftest_seconds, args.seed, args.processes)
    res["total_seconds"] = round(time.perf_counter() - t0, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
    print(f"device {res['device']}, torch {res['torch']}, triton {res['triton']}")
    if "warmup" in res:
        w = res["warmup"]
        done = "{seconds:.1f}s, {compiled} compiled, {loaded} loaded".format(**w) if not w.get("skipped") else ""
        print(f"warm-up: {w.get('skipped') or done}")
    for part in ("small", "large"):
        if part in res:
            r = res[part]
            c = r["compiles"]
            print(f"{part:<6} <= {r['max_lookups_per_example']:>10,} lookups: {r['examples_per_s']:8.2f} examples/s, "
                  f"{r['lookups_per_s']:>12,} lookups/s, {r['examples']} examples in {r['seconds']}s, compiled "
                  f"{'n/a (interpreter)' if c['interpreted'] else c['compiled']}")
    if "selftest" in res:
        for fault, r in res["selftest"]["per_fault"].items():
            s = r["seconds_to_catch"]
            print(f"selftest {fault:<28} {r['status']:<8} {'' if s is None else f'{s:.1f}s'}")
    print(f"written {args.out} ({res['total_seconds']}s)")


if __name__ == "__main__":
    main()
