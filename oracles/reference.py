"""FP64 reference forward, computed on touched rows only.

Each table's distinct ids are gathered once and upcast to float64, so checking a batch
costs memory in the batch's size, never the table's: a 2^31-row table costs nothing
beyond the rows the batch reads. Inputs must already be bounds-checked (valid ids and
offsets); ``oracles.reference_bounds`` gives the repaired inputs.
"""

from __future__ import annotations

from typing import Optional

import torch

from tbe.layout import TableLayout
from tbe.modes import Pooling

_CHUNK = 1 << 20  # lookups per pass, bounds the float64 scratch memory


def bag_lengths(offsets: torch.Tensor) -> torch.Tensor:
    """L(t, b) for every bag, int64, in feature-major order."""
    off = offsets.to(torch.int64)
    return off[1:] - off[:-1]


def lookup_bags(offsets: torch.Tensor, num_indices: int) -> torch.Tensor:
    """The bag (t*B + b) of every lookup, int64."""
    lengths = bag_lengths(offsets)
    bags = torch.arange(lengths.numel(), device=offsets.device)
    return torch.repeat_interleave(bags, lengths, output_size=num_indices)


def table_rows(layout: TableLayout, weights: torch.Tensor, t: int) -> torch.Tensor:
    """Table t of the packed weights as an [E_t, D_t] view."""
    off = layout.weights_offsets[t]
    s = layout.specs[t]
    return weights[off: off + s.rows * s.dim].view(s.rows, s.dim)


def check_valid(layout: TableLayout, indices: torch.Tensor, offsets: torch.Tensor, batch_size: int) -> None:
    """Raise ValueError if the batch is not already valid (the reference never repairs)."""
    off = offsets.to(torch.int64)
    n = indices.numel()
    if off.numel() != layout.num_tables * batch_size + 1:
        raise ValueError(f"offsets has {off.numel()} entries, expected {layout.num_tables * batch_size + 1}")
    if int(off[0]) != 0 or int(off[-1]) != n or bool((off[1:] < off[:-1]).any()):
        raise ValueError("reference needs valid offsets (start 0, non-decreasing, end len(indices))")
    for t in range(layout.num_tables):
        ids = indices[int(off[t * batch_size]): int(off[(t + 1) * batch_size])].to(torch.int64)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= layout.specs[t].rows):
            raise ValueError(f"reference needs in-range ids; table {t} has ids outside [0, {layout.specs[t].rows})")


def reference_forward(
    layout: TableLayout,
    weights: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    per_sample_weights: Optional[torch.Tensor],
    batch_size: int,
    pooling: Pooling,
) -> torch.Tensor:
    """Pooled output [B, sum D] in float64."""
    args = (layout, weights, indices, offsets, per_sample_weights, batch_size, pooling)
    return reference_forward_and_magnitude(*args, magnitude=False)[0]


def reference_forward_and_magnitude(
    layout: TableLayout,
    weights: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    per_sample_weights: Optional[torch.Tensor],
    batch_size: int,
    pooling: Pooling,
    magnitude: bool = True,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(pooled output, sum of |w * row| per entry), both [B, sum D] float64 and divided by L under
    MEAN: the output and the magnitude term the error bound needs, from one gather (the magnitude
    is None without ``magnitude``)."""
    check_valid(layout, indices, offsets, batch_size)
    B = batch_size
    device = weights.device
    out = torch.zeros((B, layout.total_dim), dtype=torch.float64, device=device)
    mag = torch.zeros_like(out) if magnitude else None
    off = offsets.to(torch.int64)
    lengths = bag_lengths(off).to(torch.float64)
    for t, (col, spec) in enumerate(zip(layout.col_offsets, layout.specs)):
        lo, hi = int(off[t * B]), int(off[(t + 1) * B])
        if hi == lo:
            continue
        table = table_rows(layout, weights, t)
        acc = torch.zeros((B, spec.dim), dtype=torch.float64, device=device)
        acc_abs = torch.zeros_like(acc) if magnitude else None
        bags = lookup_bags(off[t * B: (t + 1) * B + 1] - lo, hi - lo)
        for c0 in range(lo, hi, _CHUNK):
            c1 = min(hi, c0 + _CHUNK)
            ids = indices[c0:c1].to(torch.int64)
            uniq, inverse = torch.unique(ids, return_inverse=True)
            rows = table[uniq].to(torch.float64)[inverse]
            if per_sample_weights is not None:
                rows = rows * per_sample_weights[c0:c1].to(torch.float64)[:, None]
            acc.index_add_(0, bags[c0 - lo: c1 - lo], rows)
            if magnitude:
                acc_abs.index_add_(0, bags[c0 - lo: c1 - lo], rows.abs())
        L = lengths[t * B: (t + 1) * B].clamp(min=1)[:, None] if pooling == Pooling.MEAN else None
        out[:, col: col + spec.dim] = acc if L is None else acc / L
        if magnitude:
            mag[:, col: col + spec.dim] = acc_abs if L is None else acc_abs / L
    return out, mag
