"""The two baselines every benchmark prints beside the Triton TBE: FBGEMM's CUDA TBE and PyTorch's ops.

FBGEMM's CUDA TBE (``fbgemm_gpu`` with its CUDA build, e.g. fbgemm-gpu 1.6.0 for torch 2.11) is
the speed anchor; where it does not import, ``fbgemm_cuda`` returns None and the column is empty.
PyTorch's iteration is ``F.embedding_bag`` + sparse gradient + coalesce + row-wise Adagrad by
``index_add_`` (exact SGD: ``index_add_`` of -lr * g).
"""

from __future__ import annotations

import functools
from typing import Optional

import torch
import torch.nn.functional as F


@functools.lru_cache(maxsize=1)
def fbgemm_cuda_error() -> Optional[str]:
    """None when FBGEMM's CUDA TBE can run here, else why not."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    from fuzz.sut.fbgemm_cuda import unavailable_reason  # a one-step training run on the device decides

    return unavailable_reason()


def fbgemm_cuda(rows: int, dim: int, weights_dtype: torch.dtype, optimizer: str = "exact_rowwise_adagrad",
                lr: float = 0.01, eps: float = 1e-8, pooling: str = "sum"):
    """One-table FBGEMM CUDA TBE (device-resident weights, no bounds check), or None."""
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
    precision = {torch.float32: SparseType.FP32, torch.float16: SparseType.FP16}[weights_dtype]
    return SplitTableBatchedEmbeddingBagsCodegen(
        [(rows, dim, EmbeddingLocation.DEVICE, ComputeDevice.CUDA)],
        optimizer=opt, learning_rate=lr, eps=eps, weights_precision=precision, output_dtype=SparseType.FP32,
        pooling_mode={"sum": PoolingMode.SUM, "mean": PoolingMode.MEAN}[pooling],
        bounds_check_mode=BoundsCheckMode.NONE, stochastic_rounding=False,
    )


def torch_forward(table: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor,
                  psw: Optional[torch.Tensor] = None) -> torch.Tensor:
    return F.embedding_bag(ids, table, offsets[:-1], mode="sum", per_sample_weights=psw)


def torch_iteration(weight: torch.Tensor, momentum: Optional[torch.Tensor], ids, offsets, grad,
                    psw: Optional[torch.Tensor] = None, lr: float = 0.01, eps: float = 1e-8) -> None:
    """Forward, sparse gradient, coalesce, then the exact optimizer on the distinct rows."""
    w = weight.detach().requires_grad_(True)
    out = F.embedding_bag(ids, w, offsets[:-1], mode="sum", sparse=True, per_sample_weights=psw)
    out.backward(grad)
    sg = w.grad.coalesce()
    rows, vals = sg.indices()[0], sg.values().float()
    if momentum is None:  # exact SGD
        weight.index_add_(0, rows, (-lr * vals).to(weight.dtype))
        return
    momentum.index_add_(0, rows, vals.pow(2).mean(1))
    step = lr * vals / (momentum[rows].sqrt() + eps)[:, None]
    weight.index_add_(0, rows, (-step).to(weight.dtype))
