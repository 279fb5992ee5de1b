"""Forward dispatch: picks the kernel path for a batch and runs it."""

from __future__ import annotations

from typing import Optional

import torch

from tbe.config import KernelConfig
from tbe.forward import forward_generic
from tbe.modes import Pooling


def pooled_forward(
    weights: torch.Tensor,
    layout_tensors: dict[str, torch.Tensor],
    dims: list[int],
    rows: list[int],
    indices: torch.Tensor,
    offsets: torch.Tensor,
    per_sample_weights: Optional[torch.Tensor],
    batch_size: int,
    pooling: Pooling,
    output_dtype: torch.dtype,
    config: KernelConfig,
) -> torch.Tensor:
    """The pooled [B, sum D] output of one batch."""
    return forward_generic(
        weights, layout_tensors, dims, indices, offsets, per_sample_weights,
        batch_size, pooling, output_dtype, config,
    )
