"""FP64 reference forward, computed on touched rows only.

Each lookup's row is gathered and upcast to float64, every table in one pass
(``oracles.elements``), so checking a batch costs memory in the batch's size, never the
table's: a 2^31-row table costs nothing beyond the rows the batch reads. Inputs must already
be bounds-checked (valid ids and offsets); ``oracles.reference_bounds`` gives the repaired inputs.
"""

from __future__ import annotations

from typing import Iterator, Optional

import torch

from oracles.elements import bag_lengths, expand, layout_tensors, lookups, passes
from tbe.layout import TableLayout
from tbe.modes import Pooling

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
    if n == 0:
        return
    table = lookups(off, layout.num_tables, batch_size, n).table
    ids = indices.to(off.device, torch.int64)
    bad = (ids < 0) | (ids >= layout_tensors(layout, off.device).rows[table])
    if bool(bad.any()):
        t = int(table[int(torch.nonzero(bad)[0])])
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


def column_lengths(layout: TableLayout, offsets: torch.Tensor, batch_size: int) -> torch.Tensor:
    """[B, sum D] int64: the length of the bag each pooled entry sums."""
    lt = layout_tensors(layout, offsets.device)
    return bag_lengths(offsets).view(layout.num_tables, batch_size).t()[:, lt.column_table]


def pooled_terms(layout: TableLayout, weights: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                 batch_size: int) -> Iterator[tuple[slice, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per pass, every table at once: (the lookups it covers, each element's flat entry of the pooled
    [B, sum D] output, the element's weight as float64, its lookup within the pass). Valid inputs."""
    dev = weights.device
    lt = layout_tensors(layout, dev)
    off = offsets.to(dev, torch.int64)
    n = indices.numel()
    at = lookups(off, layout.num_tables, batch_size, n)
    dims = lt.dims[at.table]
    row_base = lt.weights_offsets[at.table] + indices.to(dev, torch.int64) * dims  # each lookup's row, flat
    entry_base = at.sample * layout.total_dim + lt.col_offsets[at.table]          # its bag's first entry
    for a, b, count in passes(dims):
        item, col = expand(dims[a:b], count)
        terms = weights[row_base[a:b][item] + col].to(torch.float64)
        yield slice(a, b), entry_base[a:b][item] + col, terms, item


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
    B, dev = batch_size, weights.device
    out = torch.zeros(B * layout.total_dim, dtype=torch.float64, device=dev)
    mag = torch.zeros_like(out) if magnitude else None
    for lk, entry, rows, item in pooled_terms(layout, weights, indices, offsets, B):
        if per_sample_weights is not None:
            rows = rows * per_sample_weights[lk].to(dev, torch.float64)[item]
        out.index_add_(0, entry, rows)
        if magnitude:
            mag.index_add_(0, entry, rows.abs())
    out, mag = out.view(B, layout.total_dim), None if mag is None else mag.view(B, layout.total_dim)
    if pooling == Pooling.MEAN:
        L = column_lengths(layout, offsets.to(dev), B).clamp(min=1)
        out, mag = out / L, None if mag is None else mag / L
    return out, mag
