"""How far two KernelConfigs' weights and optimizer state part after one step from the same start, per shape.

``config_sweep``'s digest says whether they differ; this says by how much, which tells a sum taken in another order
(last-place differences) from a changed update: ``python -m benchmarks.step_diff --baseline '{}' --candidate
'{"bwd_short_bucket_runs": [[64, 4]]}' --shape-set production --shapes D64-fp32-uniform --out F``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import torch

from benchmarks.config_sweep import one_step
from benchmarks.shape_args import add_shape_args, chosen_shapes
from fuzz.gate.shapes import make_workload


def state_diff(name: str, a: torch.Tensor, b: torch.Tensor) -> dict:
    """Entries of ``a`` and ``b`` that differ (NaN equals NaN; NaN against a number is infinitely far), the
    largest absolute difference, and the largest relative one over the differing entries."""
    a, b = a.detach().reshape(-1), b.detach().reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"{name}: {a.numel()} entries against {b.numel()}")
    differ = (a != b) & ~(a.isnan() & b.isnan())
    x, y = a[differ].double(), b[differ].double()  # only the differing entries: a 20M-row table has billions
    d = torch.where(x.isnan() | y.isnan(), math.inf, (x - y).abs())  # NaN against a number: no finite distance
    rel = torch.where(d.isinf(), math.inf, d / x.abs().clamp_min(torch.finfo(torch.float64).tiny))
    return {f"{name}_differ": int(differ.sum()), f"{name}_total": a.numel(),
            f"{name}_max_abs": float(d.max()) if d.numel() else 0.0,
            f"{name}_max_rel": float(rel.max()) if rel.numel() else 0.0}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--baseline", default="{}", help="JSON KernelConfig overrides ({} is the defaults)")
    p.add_argument("--candidate", required=True, help="JSON KernelConfig overrides")
    add_shape_args(p, "production")
    p.add_argument("--bounds-check", default="warning", choices=("none", "warning"))
    p.add_argument("--out", default=None, help="write a JSON object of the shapes' lines here")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks need a CUDA device", file=sys.stderr)
        return 2
    dev, out = torch.device("cuda"), {}
    for shape in chosen_shapes(args):
        wl = make_workload(shape, dev)
        states = []
        for ov in (args.baseline, args.candidate):
            module = one_step(shape, json.loads(ov), wl, dev, args.bounds_check)
            states.append((module.weights.detach(), module.momentum.detach()))  # the state outlives its module
            del module
        (w0, m0), (w1, m1) = states
        out[shape.name] = {**state_diff("weights", w0, w1), **state_diff("momentum", m0, m1)}
        print(shape.name, json.dumps(out[shape.name]), flush=True)
        del wl, states, w0, m0, w1, m1
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"baseline": json.loads(args.baseline), "candidate": json.loads(args.candidate),
                       "bounds_check": args.bounds_check, "shapes": out}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
