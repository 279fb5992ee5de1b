"""Forward bandwidth and full-iteration time of the Triton TBE against PyTorch's own ops.

Run on a GPU: ``python -m benchmarks.bench_tbe --out benchmarks/results/h200.json``.
Shapes follow DESIGN.md's measured PyTorch baselines (5.2M lookups, one packed table),
plus a Zipf-skewed batch whose hot rows take the long-run tiers.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys

import torch
import torch.nn.functional as F

from benchmarks.timing import time_ms
from tbe import KernelConfig, TritonTBE

SHAPES = [
    # name, rows, dim, weights dtype, bags, pooling factor, id skew (0 = uniform)
    ("D128-fp32-uniform", 20_000_000, 128, torch.float32, 262_144, 20, 0.0),
    ("D64-fp32-uniform", 20_000_000, 64, torch.float32, 262_144, 20, 0.0),
    ("D256-fp16-uniform", 20_000_000, 256, torch.float16, 262_144, 20, 0.0),
    ("D128-fp32-zipf1.1", 20_000_000, 128, torch.float32, 262_144, 20, 1.1),
]


def make_batch(rows: int, bags: int, pooling: int, skew: float, device: torch.device):
    g = torch.Generator(device="cpu").manual_seed(0)
    n = bags * pooling
    if skew > 0:
        ranks = torch.empty(n, dtype=torch.int64)
        # inverse-CDF Zipf sample over ranks (continuous approximation), scattered over the table
        u = torch.rand(n, generator=g, dtype=torch.float64)
        ranks = torch.floor((1 - u) ** (-1 / (skew - 1))).to(torch.int64) - 1
        ids = (ranks * 2_654_435_761) % rows
    else:
        ids = torch.randint(0, rows, (n,), generator=g)
    offsets = torch.arange(0, n + 1, pooling, dtype=torch.int64)
    return ids.to(device), offsets.to(device)


def torch_iteration(weight: torch.Tensor, momentum: torch.Tensor, ids, offsets, grad, lr=0.01, eps=1e-8):
    """Forward with F.embedding_bag, sparse gradient, coalesce, row-wise Adagrad by index_add_."""
    w = weight.detach().requires_grad_(True)
    out = F.embedding_bag(ids, w, offsets[:-1], mode="sum", sparse=True)
    out.backward(grad)
    sg = w.grad.coalesce()
    rows, vals = sg.indices()[0], sg.values().float()
    momentum.index_add_(0, rows, vals.pow(2).mean(1))
    step = lr * vals / (momentum[rows].sqrt() + eps)[:, None]
    weight.index_add_(0, rows, (-step).to(weight.dtype))


def bench_shape(name, rows, dim, wdtype, bags, pooling, skew, device, config):
    ids, offsets = make_batch(rows, bags, pooling, skew, device)
    n = ids.numel()
    m = TritonTBE([(rows, dim)], optimizer="exact_rowwise_adagrad", weights_dtype=wdtype, bounds_check="none",
                  config=config, device=device)
    table = m.split_embedding_weights()[0]
    esize = table.element_size()
    fwd_bytes = n * dim * esize + n * 8 + bags * dim * 4
    res = {"shape": name, "lookups": n, "rows": rows, "dim": dim, "weights": str(wdtype), "bags": bags}
    distinct = torch.unique(ids)
    res["distinct_rows"] = int(distinct.numel())
    res["max_segment_length"] = int(torch.unique(ids, return_counts=True)[1].max())

    with torch.no_grad():
        ms = time_ms(lambda: m(ids, offsets))
        res["triton_forward_ms"] = ms
        res["triton_forward_GBps"] = fwd_bytes / ms / 1e6
        ref_table = table.detach().clone().float() if wdtype != torch.float32 else table.detach()
        if wdtype == torch.float32:
            ms_t = time_ms(lambda: F.embedding_bag(ids, ref_table, offsets[:-1], mode="sum"))
            res["torch_forward_ms"] = ms_t
            res["torch_forward_GBps"] = fwd_bytes / ms_t / 1e6
        got = m(ids, offsets)
        ref = F.embedding_bag(ids, table.detach().float(), offsets[:-1], mode="sum")
        res["forward_max_abs_diff_vs_torch"] = float((got.float() - ref).abs().max())

    grad = torch.randn(bags, dim, device=device)

    def triton_iter():
        m(ids, offsets).backward(grad)

    res["triton_iteration_ms"] = time_ms(triton_iter, warmup=2, repeat=10)
    if wdtype == torch.float32:
        w = torch.empty(rows, dim, device=device).uniform_(-0.01, 0.01)
        mom = torch.zeros(rows, device=device)
        res["torch_iteration_ms"] = time_ms(lambda: torch_iteration(w, mom, ids, offsets, grad), warmup=2, repeat=10)
        del w, mom
    del m
    torch.cuda.empty_cache()
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=None, help="write results JSON here")
    p.add_argument("--config", default=None, help="KernelConfig JSON (default: defaults)")
    p.add_argument("--shapes", default=None, help="comma-separated shape names (default: all)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks need a CUDA device", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    config = KernelConfig.load(args.config) if args.config else KernelConfig()
    wanted = set(args.shapes.split(",")) if args.shapes else None
    results = []
    for shape in SHAPES:
        if wanted and shape[0] not in wanted:
            continue
        r = bench_shape(*shape, device=device, config=config)
        results.append(r)
        print(json.dumps(r), flush=True)
    import triton

    doc = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
        "python": platform.python_version(), "config": config.to_dict(), "results": results,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
