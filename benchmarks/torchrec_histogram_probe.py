"""TorchRec's saved-histogram backward against its sort-based one and FP64, as the upstream gradient shrinks.

With ``bag_size_hints`` (and one fp16 table of at most 64 rows as feature 0, row-wise Adagrad, bags of at most
256 ids) TorchRec's Triton TBE computes the table's gradient as the forward's id counts times the upstream
gradient, that gradient split into two fp16 halves. This runs one training step of such a table with and
without hints, at upstream-gradient scales 1 down to 1e-8, and prints per step the largest error of the
weights against the FP64 step and the largest update, one JSON line each:

    python -m benchmarks.torchrec_histogram_probe --sut-source DIR [--out FILE.jsonl]

On the CPU it runs TorchRec's kernels in Triton's interpreter with this project's stand-ins for the ops the
CPU lacks (``fuzz.sut.torchrec_triton``); on a GPU, its compiled kernels. The case model draws upstream
gradients from N(0, 1) only, so campaigns do not reach the small scales; this probe is how the finding
``torchrec-histogram-small-gradients`` (``docs/findings/torchrec-triton.md``) was measured.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

SCALES = (1.0, 1e-4, 1e-6, 1e-8)
ROWS, DIM, BAGS, LENGTH = 16, 64, 32, 64
LR, EPS = 0.01, 1e-8


def adagrad_step_fp64(weights: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor, dout: torch.Tensor,
                      lr: float, eps: float) -> torch.Tensor:
    """The [rows, D] table after one exact row-wise Adagrad step from zero momentum (SUM pooling), in FP64:
    ``oracles.reference_backward``'s new rows written over the old weights, so the rows no lookup reads stay."""
    from oracles.reference_backward import reference_backward
    from tbe.layout import TableLayout, TableSpec
    from tbe.modes import Optimizer, Pooling

    rows, dim = weights.shape
    ref = reference_backward(TableLayout((TableSpec(rows, dim),)), weights.reshape(-1), torch.zeros(rows), ids,
                             offsets, None, offsets.numel() - 1, Pooling.SUM, Optimizer.EXACT_ROWWISE_ADAGRAD, lr,
                             eps, dout)
    out = weights.double().reshape(-1).clone()
    out[ref.rows.weight_index] = ref.rows.w_new
    return out.view(rows, dim)


def step(module_class, hints, w0, ids, offsets, dout, device) -> torch.Tensor:
    """The weights after one step of TorchRec's module (SUM pooling, fp16 weights, fp32 output)."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType

    m = module_class([tuple(w0.shape)], weights_precision=torch.float16, output_dtype=torch.float32,
                     stochastic_rounding=False, learning_rate=LR, eps=EPS,
                     optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, device=device, bag_size_hints=hints)
    if device.type == "cpu":
        m.record_forward_event = lambda: None  # a CUDA event
    with torch.no_grad():
        m.split_embedding_weights()[0].copy_(w0.to(device))
    m(ids.to(device), offsets.to(device)).backward(dout.to(device))
    return m.split_embedding_weights()[0].double().cpu()


def main(argv=None) -> int:
    from fuzz.sut.torchrec_triton import device, install_cpu_stand_ins, load

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sut-source", required=True)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    dev = device()
    install_cpu_stand_ins()
    loaded = load(args.sut_source)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, ROWS, (BAGS * LENGTH,), generator=g)
    offsets = torch.arange(0, BAGS * LENGTH + 1, LENGTH)
    w0 = (0.1 * torch.randn(ROWS, DIM, generator=g)).half()
    base = torch.randn(BAGS, DIM, generator=g)
    lines = []
    for scale in SCALES:
        dout = base * scale
        want = adagrad_step_fp64(w0, ids, offsets, dout, LR, EPS)
        line = {"version": loaded.version, "device": str(dev), "dout_scale": scale,
                "largest_update": (want - w0.double()).abs().max().item()}
        for label, hints in (("histogram", [LENGTH]), ("sorted", None)):
            got = step(loaded.module.TritonTableBatchedEmbeddingBags, hints, w0, ids, offsets, dout, dev)
            line[f"{label}_max_error"] = (got - want).abs().max().item()
        print(json.dumps(line), flush=True)
        lines.append(line)
    if args.out:
        with args.out.open("a") as f:
            f.writelines(json.dumps(line) + "\n" for line in lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
