"""Race rates of the fused long tier: clean, without its fence, without its CTA barrier.

``python -m benchmarks.race_rates --out benchmarks/results/race_rates_h200.json`` runs, on a GPU,
every stress variant of ``fuzz.memcheck.race_stress`` (chunks of 1-4 lookups, 64-256 chunks per run,
one program per chunk, exact integer sums) for ``--trials`` trials of about 4.2M lookups each,
clean and with each fault, and records per line: runs, runs that lost a partial sum, and the
seconds and trials to the first loss. The first variant's clean line runs until at least
``--clean-runs`` runs (10M by default). For ``no_barrier`` each line also records whether the
static check finds the variant's compiled kernel without a barrier before the countdown.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from tbe.env import ALLOW_FAULTS  # noqa: E402

ALLOW_FAULTS.setdefault("1")

from fuzz.memcheck.race_stress import VARIANTS, barrier_gap, run_stress  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=10, help="trials per line (default 10)")
    p.add_argument("--clean-runs", type=int, default=10_000_000, help="runs of the first variant's clean line")
    p.add_argument("--seconds", type=float, default=60.0, help="cap per line in seconds (default 60)")
    p.add_argument("--faults", default="clean,no_fence,no_barrier", help="comma-separated: clean, no_fence, no_barrier")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA device: the interpreter runs programs in order and never loses a sum")
    import triton

    rows = []
    t_all = time.perf_counter()
    for name in args.faults.split(","):
        faults = () if name == "clean" else (name,)
        for i, v in enumerate(VARIANTS):
            trials = args.trials
            if name == "clean" and i == 0:
                trials = max(trials, -(-args.clean_runs // v.rows()))
            cap = args.seconds * (4 if name == "clean" and i == 0 else 1)
            r = run_stress(v, faults, trials=trials, seconds=cap)
            line = {"fault": name, **r.to_dict(), "seconds_per_trial": round(r.seconds / max(r.trials, 1), 4)}
            if name == "no_barrier":
                line["ptx_without_barrier"] = barrier_gap(v)[0]
            rows.append(line)
            print(json.dumps({k: line[k] for k in ("fault", "label", "runs", "lost_runs", "seconds_to_catch",
                                                   "trials_to_catch", "seconds", "seconds_per_trial")
                              + (("ptx_without_barrier",) if name == "no_barrier" else ())}), flush=True)
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "python": platform.python_version(), "seconds": round(time.perf_counter() - t_all, 1),
           "args": vars(args), "results": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=2)
    clean = [r for r in rows if r["fault"] == "clean"]
    print(f"clean: {sum(r['lost_runs'] for r in clean)} lost sums in {sum(r['runs'] for r in clean)} runs; "
          f"total {out['seconds']}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
