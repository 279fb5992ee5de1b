"""The baselines the benchmarks print beside the Triton TBE: FBGEMM's CUDA TBE, TorchRec's Triton TBE, PyTorch.

FBGEMM's CUDA TBE (``fbgemm_gpu`` with its CUDA build, e.g. fbgemm-gpu 1.6.0 for torch 2.11) is
the speed anchor; where it does not import, ``fbgemm_cuda`` returns None and the column is empty.
PyTorch's iteration is ``F.embedding_bag`` + sparse gradient + coalesce + row-wise Adagrad by
``index_add_`` (exact SGD: ``index_add_`` of -lr * g), table by table over the batch's table-major bags.
"""

from __future__ import annotations

import functools
from typing import Optional, Sequence

import torch
import torch.nn.functional as F


@functools.lru_cache(maxsize=1)
def fbgemm_cuda_error() -> Optional[str]:
    """None when FBGEMM's CUDA TBE can run here, else why not."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    from fuzz.sut.fbgemm_cuda import unavailable_reason  # a one-step training run on the device decides

    return unavailable_reason()


def torchrec_target(source: Optional[str]) -> tuple[Optional[str], str]:
    """(SUT address of TorchRec's Triton TBE at ``source``, default the newest snapshot, or None; what was loaded,
    or why not)."""
    from fuzz.sut.protocol import address, get
    from fuzz.sut.torchrec_triton.loader import snapshots

    found = snapshots()
    if source is None and not found:
        return None, "no TorchRec source (--torchrec-source, TBE_FUZZ_TORCHREC_SNAPSHOTS)"
    target = address("torchrec-triton", source or str(found[-1]))
    why = get(target).available()
    return (None, f"not run: {why}") if why else (target, get(target).description)


def fbgemm_cuda(specs: Sequence[tuple[int, int]], weights_dtype: torch.dtype, optimizer: str = "exact_rowwise_adagrad",
                lr: float = 0.01, eps: float = 1e-8, pooling: str = "sum", output_dtype: torch.dtype = torch.float32,
                bounds_check: str = "none"):
    """FBGEMM's CUDA TBE over ``specs`` ((rows, D) each; device-resident weights), or None."""
    if fbgemm_cuda_error() is not None:
        return None
    from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import (
        BoundsCheckMode, EmbeddingLocation, PoolingMode,
    )
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice, SplitTableBatchedEmbeddingBagsCodegen,
    )

    opt = {"exact_sgd": EmbOptimType.EXACT_SGD, "exact_rowwise_adagrad": EmbOptimType.EXACT_ROWWISE_ADAGRAD}[optimizer]
    sparse = {torch.float32: SparseType.FP32, torch.float16: SparseType.FP16, torch.bfloat16: SparseType.BF16}
    return SplitTableBatchedEmbeddingBagsCodegen(
        [(rows, dim, EmbeddingLocation.DEVICE, ComputeDevice.CUDA) for rows, dim in specs],
        optimizer=opt, learning_rate=lr, eps=eps, weights_precision=sparse[weights_dtype],
        output_dtype=sparse[output_dtype],
        pooling_mode={"sum": PoolingMode.SUM, "mean": PoolingMode.MEAN}[pooling],
        bounds_check_mode=BoundsCheckMode[bounds_check.upper()], stochastic_rounding=False,
    )


def _table_batches(tables: Sequence[torch.Tensor], ids, offsets, psw):
    """(table t, its ids, its bags' offsets from 0, its per-sample weights) for each table of a table-major batch."""
    bags = (offsets.numel() - 1) // len(tables)
    for t, table in enumerate(tables):
        o = offsets[t * bags: (t + 1) * bags + 1]
        lo, hi = int(o[0]), int(o[-1])
        yield table, ids[lo:hi], o - lo, None if psw is None else psw[lo:hi]


def torch_forward(tables: Sequence[torch.Tensor], ids: torch.Tensor, offsets: torch.Tensor,
                  psw: Optional[torch.Tensor] = None) -> torch.Tensor:
    """[B, sum D]: each table's pooled bags, side by side."""
    return torch.cat([F.embedding_bag(i, table, o[:-1], mode="sum", per_sample_weights=w)
                      for table, i, o, w in _table_batches(tables, ids, offsets, psw)], dim=1)


def torch_iteration(weights: Sequence[torch.Tensor], momenta: Optional[Sequence[torch.Tensor]], ids, offsets, grad,
                    psw: Optional[torch.Tensor] = None, lr: float = 0.01, eps: float = 1e-8) -> None:
    """Per table: forward, sparse gradient, coalesce, then the exact optimizer on the distinct rows."""
    col = 0
    for t, (weight, i, o, w_psw) in enumerate(_table_batches(weights, ids, offsets, psw)):
        dim = weight.shape[1]
        w = weight.detach().requires_grad_(True)
        out = F.embedding_bag(i, w, o[:-1], mode="sum", sparse=True, per_sample_weights=w_psw)
        out.backward(grad[:, col: col + dim])
        col += dim
        sg = w.grad.coalesce()
        rows, vals = sg.indices()[0], sg.values().float()
        if momenta is None:  # exact SGD
            weight.index_add_(0, rows, (-lr * vals).to(weight.dtype))
            continue
        momenta[t].index_add_(0, rows, vals.pow(2).mean(1))
        step = lr * vals / (momenta[t][rows].sqrt() + eps)[:, None]
        weight.index_add_(0, rows, (-step).to(weight.dtype))
