"""Forward dispatch: picks the kernel path for a batch and runs it.

Paths: ``Path.FWD_SMALL_TABLE`` (tbe/forward_small_table.py, when ``eligible``) and ``Path.FWD_GENERIC``
(tbe/forward.py); ``choose_path`` names the one a batch takes without running it. ``checked_forward``
adds the bounds check around the forward, standalone or fused per ``KernelConfig.fused_bounds_check``.
"""

from __future__ import annotations

from typing import Optional

import torch

from tbe.bounds_check import ForwardCheck, begin_fused, bounds_check, finish_fused
from tbe.config import KernelConfig
from tbe.forward import forward_generic
from tbe.forward_small_table import eligible, forward_small_table
from tbe.modes import BoundsCheckMode, Pooling
from tbe.routing import Path
from tbe.vbe import VbeTensors

def choose_path(
    dims: list[int], rows: list[int], num_indices: int, batch_size: int, weights_dtype: torch.dtype,
    output_dtype: torch.dtype, weighted: bool, config: KernelConfig, vbe: bool = False,
) -> Path:
    """The path a forward with these host-known parameters takes (never reads tensor data); ``vbe``: batch
    sizes vary per feature (generic only)."""
    args = (dims, rows, num_indices, batch_size, weights_dtype, output_dtype, weighted, config, vbe)
    return Path.FWD_SMALL_TABLE if eligible(*args) else Path.FWD_GENERIC


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
    check: Optional[ForwardCheck] = None,
    vbe: Optional[VbeTensors] = None,
) -> torch.Tensor:
    """The pooled [B, sum D] output of one batch, or with ``vbe`` the flat VBE output (offsets already
    repaired; ids too unless fused)."""
    path = choose_path(
        dims, rows, indices.numel(), batch_size, weights.dtype, output_dtype,
        per_sample_weights is not None, config, vbe is not None,
    )
    if path is Path.FWD_SMALL_TABLE:
        out = forward_small_table(weights, dims, rows, indices, offsets, batch_size, pooling, config, check)
    else:
        out = forward_generic(
            weights, layout_tensors, dims, indices, offsets, per_sample_weights,
            batch_size, pooling, output_dtype, config, check=check, vbe=vbe,
        )
    return out


def prepare_bounds(
    indices: torch.Tensor,
    offsets: torch.Tensor,
    rows_per_table: torch.Tensor,
    batch_size: int,
    mode: BoundsCheckMode,
    warning_count: Optional[torch.Tensor],
    config: KernelConfig,
    vbe: Optional[VbeTensors] = None,
    max_rows: Optional[int] = None,
) -> tuple[torch.Tensor, torch.Tensor, ForwardCheck]:
    """(indices, offsets) for the forward and the ForwardCheck it takes.

    Standalone: both are repaired here (FATAL raises here), into int32 copies where ``max_rows`` (the largest
    table's rows) lets them (``tbe.bounds_check.copy_dtype``). Fused: only offsets are; the
    forward repairs ids as it loads them and ``finish_bounds`` raises afterwards.
    """
    if config.fused_bounds_check and mode != BoundsCheckMode.NONE:
        fixed_offsets, check = begin_fused(indices, offsets, rows_per_table, mode, warning_count, config)
        return indices, fixed_offsets, check
    fixed_indices, fixed_offsets = bounds_check(
        indices, offsets, rows_per_table, batch_size, mode, warning_count, config, vbe, max_rows,
    )
    return fixed_indices, fixed_offsets, ForwardCheck(raw_offsets=offsets)


def finish_bounds(
    check: ForwardCheck, indices: torch.Tensor, fixed_offsets: torch.Tensor, batch_size: int,
    vbe: Optional[VbeTensors] = None,
) -> torch.Tensor:
    """After the forward: raise under fused FATAL; return the ids the backward must see."""
    if not check.fused:
        return indices
    return finish_fused(check, indices, check.raw_offsets, fixed_offsets, batch_size, vbe)


def checked_forward(
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
    mode: BoundsCheckMode,
    warning_count: Optional[torch.Tensor] = None,
    vbe: Optional[VbeTensors] = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Bounds check plus forward without autograd: (output, repaired indices, repaired offsets)."""
    fwd_indices, fixed_offsets, check = prepare_bounds(
        indices, offsets, layout_tensors["rows"], batch_size, mode, warning_count, config, vbe,
    )
    out = pooled_forward(
        weights, layout_tensors, dims, rows, fwd_indices, fixed_offsets, per_sample_weights,
        batch_size, pooling, output_dtype, config, check, vbe,
    )
    fixed_indices = finish_bounds(check, fwd_indices, fixed_offsets, batch_size, vbe)
    return out, fixed_indices, fixed_offsets
