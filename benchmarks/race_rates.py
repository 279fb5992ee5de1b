"""Race rates of the fused long tier with and without its fence and CTA barrier.

``python -m benchmarks.race_rates --trials 100 --out benchmarks/results/race_rates_h200.json``:
counts rows that lost a partial sum over ``trials`` backward steps of 4096 runs x 64
chunks (D=128, one program per chunk), for each synchronisation variant and each
(gather width, warps) stress variant of tests/test_races.py.
"""

from __future__ import annotations

import argparse
import json
import os

import torch

os.environ.setdefault("TBE_FUZZ_ALLOW_FAULTS", "1")

from tests.test_races import GRID_MULTIPLIER, ROWS, STRESS_VARIANTS, fused_config, wrong_rows  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    rows = []
    variants = [(f, g, w) for f in [(), ("no_barrier",), ("no_fence",)] for g, w in STRESS_VARIANTS]
    for faults, gather, warps in variants:
        cfg = fused_config(*faults, num_warps=warps, gather=gather)
        wrong, trials = wrong_rows(cfg, args.trials, stop_at_first=False)
        r = {"faults": list(faults), "gather": gather, "num_warps": warps, "grid_multiplier": GRID_MULTIPLIER,
             "wrong_runs": wrong, "runs": trials * ROWS, "rate": wrong / (trials * ROWS)}
        rows.append(r)
        print(json.dumps(r), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
