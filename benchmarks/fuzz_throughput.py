"""Fuzz throughput after warm-up: cases/s on small cases, lookups/s checked on large ones,
seconds per planted fault in the self-test. Writes JSON and prints a short table.

    python -m benchmarks.fuzz_throughput --out benchmarks/results/fuzz_throughput_h200.json --pack 1,16

Each campaign part runs once per ``--pack`` value (sub-cases one example may hold, ``strategies.pack``),
so one file compares packed and unpacked checking on one warm machine; each record keeps its time split.
``--workers 1,4`` runs each part again as that many campaigns at once (``tbe-fuzz run --workers`` on one GPU).
Small cases: the campaign's general cases (its config draws included) of at most 10,000 lookups,
``--pack`` of them to an example; large: the campaign's own mix at the backend's full budget (``fuzz.profiles.MAX_LOOKUPS``), so the segment-length spread is
the campaign's. Each part first warms the kernels it can reach (reported apart, not timed
into the rates); the compile count during each search is recorded (it should be 0). The first campaign of a
run also starts the worker and loads its kernels from the disk cache (on the H200, 4-6 s of a 20 s part):
for a steady rate give a part twice (``--pack 16,16``) and read the second.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import time
from pathlib import Path

from tbe.backend import INTERPRETED  # first: it picks the interpreter before triton is imported

import torch  # noqa: E402
import triton  # noqa: E402

from fuzz.budgets import Budget
from fuzz.campaign import CampaignOptions, CampaignRunner
from fuzz.profiles import MAX_LOOKUPS
from fuzz.compile import warm_campaigns
from tbe import KernelConfig


def campaign_part(name: str, seconds: float, max_lookups: int, seed: int, pack: int = 1) -> dict:
    """The campaign's own mix at ``max_lookups`` per example (``large``), or (``small``) general cases of at most
    ``max_lookups`` each, ``pack`` of them to an example: one case's cost, packed or not."""
    budget = Budget(name, seconds=seconds, shrink_seconds=0.0, max_examples=10**7, max_lookups=max_lookups, pack=pack)
    strategy = None
    if name == "small":
        from strategies.config_space import drawn_cases
        from strategies.pack import packs
        from strategies.space import general_cases

        strategy = drawn_cases(KernelConfig(), lambda c: packs(general_cases(c, max_lookups), pack, max_lookups * pack))
    res = CampaignRunner(KernelConfig(), budget, seed, CampaignOptions(
        artifacts_dir=None, shrink=False, strategy=strategy)).run()
    return {"part": name, "pack": pack, "max_lookups": max_lookups, "seconds": round(res.seconds, 2),
            "examples": res.examples, "sub_cases": res.sub_cases, "tour_examples": res.tour_examples,
            "sub_cases_per_s": round(res.sub_cases / res.seconds, 2), "time_split": res.time.to_json(res.seconds),
            "lookups": res.lookups, "examples_per_s": round(res.examples / res.seconds, 2),
            "lookups_per_s": round(res.lookups / res.seconds), "ok": res.ok, "compiles": res.compiles.to_dict(),
            "fbgemm": dict(res.fbgemm), "tiers": dict(res.tiers), "stopped_by": res.stopped_by,
            "failure": None if res.ok else res.failure.text()[:2000]}


def _part_process(part: tuple, barrier, results) -> None:
    if not INTERPRETED:
        torch.cuda.init()  # the CUDA context before the barrier: the campaigns start together
    barrier.wait()
    results.put(campaign_part(*part))


def parallel_part(name: str, seconds: float, max_lookups: int, seed: int, pack: int, workers: int) -> dict:
    """``campaign_part`` in ``workers`` processes at once (seeds seed, seed + 1, ...), all on the same GPU(s)
    as ``tbe-fuzz run --workers`` places them; the rates are the processes' sums over the longest one."""
    if workers == 1:
        return {**campaign_part(name, seconds, max_lookups, seed, pack), "workers": 1}
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(workers), ctx.Queue()
    procs = [ctx.Process(target=_part_process, args=((name, seconds, max_lookups, seed + i, pack), barrier, results))
             for i in range(workers)]
    for p in procs:
        p.start()
    each = [results.get() for _ in procs]
    for p in procs:
        p.join()
    wall = max(r["seconds"] for r in each)
    total = {k: sum(r[k] for r in each) for k in ("examples", "sub_cases", "lookups", "tour_examples")}
    return {"part": name, "pack": pack, "workers": workers, "max_lookups": max_lookups, "seconds": wall, **total,
            "sub_cases_per_s": round(total["sub_cases"] / wall, 2), "examples_per_s": round(total["examples"] / wall, 2),
            "lookups_per_s": round(total["lookups"] / wall), "ok": all(r["ok"] for r in each),
            "compiles": {"interpreted": each[0]["compiles"].get("interpreted", INTERPRETED),
                         "compiled": sum(r["compiles"].get("compiled", 0) for r in each)},
            "per_worker": each}


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


def _write(out: Path, res: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--parts", default="small,large,selftest")
    p.add_argument("--small-seconds", type=float, default=30.0)
    p.add_argument("--large-seconds", type=float, default=30.0)
    p.add_argument("--selftest-seconds", type=float, default=10.0, help="search budget per fault")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pack", default="1", help="comma-separated sub-cases per example to run each part with")
    p.add_argument("--workers", default="1", help="comma-separated campaign processes to run each part with "
                   "(at once, sharing the GPU(s) as `tbe-fuzz run --workers` does)")
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
    sizes = {"small": (args.small_seconds, min(MAX_LOOKUPS, 10_000)), "large": (args.large_seconds, MAX_LOOKUPS)}
    res["campaigns"] = []
    for part in (x for x in ("small", "large") if x in parts):
        for k in args.pack.split(","):
            for w in args.workers.split(","):
                res["campaigns"].append(parallel_part(part, *sizes[part], args.seed, int(k), int(w)))
                _write(args.out, res)  # each part as it ends: a run cut short keeps what it measured
    if "selftest" in parts:
        res["selftest"] = selftest_part(args.selftest_seconds, args.seed, args.processes)
    res["total_seconds"] = round(time.perf_counter() - t0, 1)
    _write(args.out, res)
    print(f"device {res['device']}, torch {res['torch']}, triton {res['triton']}")
    if "warmup" in res:
        w = res["warmup"]
        done = "{seconds:.1f}s, {compiled} compiled, {loaded} loaded".format(**w) if not w.get("skipped") else ""
        print(f"warm-up: {w.get('skipped') or done}")
    for r in res["campaigns"]:
        c = r["compiles"]
        print(f"{r['part']:<6} pack {r['pack']:>3} x{r.get('workers', 1)} <= {r['max_lookups']:>10,} lookups: "
              f"{r['sub_cases_per_s']:8.2f} cases/s ({r['examples_per_s']:.2f} examples/s), "
              f"{r['lookups_per_s']:>12,} lookups/s, {r['sub_cases']} cases in {r['examples']} examples, "
              f"{r['seconds']}s, compiled {'n/a (interpreter)' if c['interpreted'] else c['compiled']}")
    if "selftest" in res:
        for fault, r in res["selftest"]["per_fault"].items():
            s = r["seconds_to_catch"]
            print(f"selftest {fault:<28} {r['status']:<8} {'' if s is None else f'{s:.1f}s'}")
    print(f"written {args.out} ({res['total_seconds']}s)")


if __name__ == "__main__":
    main()
