"""Iteration time and per-stage device time of several KernelConfigs on a shape set (``--shape-set``, default
``bench_tbe``'s six), one process.

``python -m benchmarks.config_sweep --shapes D128-fp32-zipf1.1 --configs '[{}, {"long_run_threshold": 64}]'
--out F`` prints (and appends to F) one JSON line per shape and config: the forward (wall, and device time by
the profiler in three rounds of 20, steadier than the wall time), the iteration timed three times, the stages
of ``profile_backward``, and a digest of the weights after one step from a fixed start (equal digests across
two checkouts, run through ``benchmarks.other_tree``, mean equal updates). Configs are overrides
of the defaults; kernels a config shares with an earlier one are not rebuilt, so a sweep of run-time fields is
cheap. This is how the defaults' backward fields were chosen (``results/sweep_long_tier_h200.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from benchmarks.profile_backward import kernel_times, summarise
from benchmarks.timing import time_ms
from benchmarks.shape_args import add_shape_args, chosen_shapes
from fuzz.gate.shapes import PerfShape, make_workload
from fuzz.gate.timing import build_module
from tbe import KernelConfig


def weights_digest(weights: torch.Tensor, chunk: int = 1 << 26) -> list[int]:
    """Two integer sums over the weights' bit patterns: equal for bit-equal weights, on the device, a chunk at a
    time (an int64 copy of a 20M x 128 table would not fit beside it)."""
    flat = weights.detach().reshape(-1)
    with torch.no_grad():
        x = (flat.view(torch.int32) if flat.numel() * flat.element_size() % 4 == 0 else flat.view(torch.int16))
        a = b = 0
        for lo in range(0, x.numel(), chunk):
            part = x[lo: lo + chunk].to(torch.int64)
            a += int(part.sum())
            b += int((part % 1000003 * (part % 7919)).sum())
        return [a, b]


def one_step(shape: PerfShape, overrides: dict, wl, device: torch.device, bounds_check: str = "none"):
    """``shape``'s module under the defaults with ``overrides``, after one step of ``wl`` from the fixed start
    (seed 1): the state the digest here and ``benchmarks.step_diff`` compare across configs and checkouts."""
    m = build_module(shape, KernelConfig.from_dict({**KernelConfig().to_dict(), **overrides}), device, bounds_check)
    torch.manual_seed(1)
    m.reset_weights()
    m(wl.indices, wl.offsets, wl.per_sample_weights).backward(wl.grad)
    return m


def sweep_shape(shape: PerfShape, overrides: list[dict], label: str, device: torch.device,
                bounds_check: str = "none"):
    """One JSON-ready dict per config of ``overrides`` on ``shape``, its modules checking bounds in ``bounds_check``'s
    mode."""
    wl = make_workload(shape, device)
    ids, offsets, psw, grad = wl.indices, wl.offsets, wl.per_sample_weights, wl.grad
    for ov in overrides:
        t0 = time.perf_counter()
        m = one_step(shape, ov, wl, device, bounds_check)
        digest = weights_digest(m.weights)
        with torch.no_grad():
            fwd = time_ms(lambda: m(ids, offsets, psw))
            fwd_device = [round(sum(kernel_times(lambda: m(ids, offsets, psw), 20).values()), 4) for _ in range(3)]
        its = [time_ms(lambda: m(ids, offsets, psw).backward(grad), warmup=2, repeat=10) for _ in range(3)]
        stages = summarise(kernel_times(lambda: m(ids, offsets, psw).backward(grad), 3))["stages_ms"]
        yield {"tree": label, "shape": shape.name, "cfg": ov, "bounds_check": bounds_check, "digest": digest,
               "fwd": round(fwd, 4),
               "fwd_device": fwd_device, "iter": [round(x, 4) for x in its],
               "stages": {k: round(v, 3) for k, v in stages.items()}, "s": round(time.perf_counter() - t0, 1)}
        del m
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--configs", required=True, help="JSON list of KernelConfig overrides ({} is the defaults)")
    add_shape_args(p, "bench")
    p.add_argument("--label", default="main", help="a name for this checkout in each line")
    p.add_argument("--bounds-check", default="none", choices=("none", "warning"),
                   help="the modules' bounds-check mode (default none; warning is TorchRec's and FBGEMM's default)")
    p.add_argument("--out", default=None, help="append the JSON lines here")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks need a CUDA device", file=sys.stderr)
        return 2
    overrides = json.loads(args.configs)
    for shape in chosen_shapes(args):
        for line in sweep_shape(shape, overrides, args.label, torch.device("cuda"), args.bounds_check):
            print(json.dumps(line), flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
