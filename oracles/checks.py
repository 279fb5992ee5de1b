"""One-call differential checks: kernel output vs the FP64 reference under the derived bound."""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from oracles.bounds import pooled_bound
from oracles.compare import Report, compare
from oracles.error_model import ErrorModel
from oracles.reference import column_lengths, forward_reference
from tbe.layout import TableLayout
from tbe.modes import Pooling


def forward_expectation(
    layout: TableLayout,
    weights: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    per_sample_weights: Optional[torch.Tensor],
    batch_size: int,
    pooling: Pooling,
    output_dtype: torch.dtype,
    model: Optional[ErrorModel] = None,
    batch_size_per_feature: Optional[Sequence[int]] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(expected float64 [B, sum D] or flat VBE, elementwise error bound) for a valid batch; entries whose
    fp32 sum is exact (``oracles.exactness``) get no accumulation term."""
    vbe = batch_size_per_feature
    ref = forward_reference(layout, weights, indices, offsets, per_sample_weights, batch_size, pooling,
                            batch_size_per_feature=vbe)
    lengths = column_lengths(layout, offsets.to(ref.out.device), batch_size, vbe)
    # a flat VBE output as one row of entries: pooled_bound reads 1-D lengths as one per row
    rows = [x if x is None or x.dim() == 2 else x.view(1, -1) for x in (ref.out, ref.magnitude, lengths, ref.exact)]
    bound = pooled_bound(rows[0], rows[1], rows[2], pooling == Pooling.MEAN, output_dtype, exact=rows[3],
                         model=model, entries=ref.out.numel())
    return ref.out, bound.view_as(ref.out)


def check_forward(
    layout: TableLayout,
    weights: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    per_sample_weights: Optional[torch.Tensor],
    batch_size: int,
    pooling: Pooling,
    got: torch.Tensor,
    what: str = "forward vs fp64",
    bound_scale: float = 1.0,
    model: Optional[ErrorModel] = None,
    batch_size_per_feature: Optional[Sequence[int]] = None,
) -> Report:
    """Compare a pooled output with the FP64 reference.

    ``bound_scale`` = 2 when comparing two fp32 computations with each other (each is within
    the bound of the exact value, so they are within twice of each other); 1 otherwise.
    """
    expected, bound = forward_expectation(
        layout, weights, indices, offsets, per_sample_weights, batch_size, pooling, got.dtype, model,
        batch_size_per_feature,
    )
    return compare(what, expected, got, bound * bound_scale, layout)
