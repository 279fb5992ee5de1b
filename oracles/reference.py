"""FP64 reference forward, computed on touched rows only.

Each lookup's row is gathered and upcast to float64, every table in one pass
(``oracles.elements``), so checking a batch costs memory in the batch's size, never the
table's: a 2^31-row table costs nothing beyond the rows the batch reads. Inputs must already
be bounds-checked (valid ids and offsets); ``oracles.reference_bounds`` gives the repaired inputs.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Optional, Sequence

import torch

from oracles.exactness import ExactSums
from oracles.elements import Pass, bag_lengths, element_passes, layout_tensors, lookups, pass_width, uniform_dim
from oracles.vbe import padded_offsets, to_flat, variable_batch
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
    if off.numel() != layout.num_features * batch_size + 1:
        raise ValueError(f"offsets has {off.numel()} entries, expected {layout.num_features * batch_size + 1}")
    if int(off[0]) != 0 or int(off[-1]) != n or bool((off[1:] < off[:-1]).any()):
        raise ValueError("reference needs valid offsets (start 0, non-decreasing, end len(indices))")
    if n == 0:
        return
    feature = lookups(off, layout.num_features, batch_size, n).table
    ids = indices.to(off.device, torch.int64)
    bad = (ids < 0) | (ids >= layout_tensors(layout, off.device).rows[feature])
    if bool(bad.any()):
        f = int(feature[int(torch.nonzero(bad)[0])])
        raise ValueError(f"reference needs in-range ids; feature {f} has ids outside "
                         f"[0, {layout.feature_rows[f]})")


def reference_forward(
    layout: TableLayout,
    weights: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    per_sample_weights: Optional[torch.Tensor],
    batch_size: int,
    pooling: Pooling,
    batch_size_per_feature: Optional[Sequence[int]] = None,
) -> torch.Tensor:
    """Pooled output [B, sum D] in float64 (with ``batch_size_per_feature``: the flat VBE output)."""
    args = (layout, weights, indices, offsets, per_sample_weights, batch_size, pooling)
    return forward_reference(*args, bounds=False, batch_size_per_feature=batch_size_per_feature).out


def column_lengths(layout: TableLayout, offsets: torch.Tensor, batch_size: int,
                   batch_size_per_feature: Optional[Sequence[int]] = None) -> torch.Tensor:
    """[B, sum D] int64: the length of the bag each pooled entry sums (VBE: flat, per output entry)."""
    vb = variable_batch(layout, batch_size_per_feature)
    if vb is not None:
        return to_flat(layout, vb, column_lengths(layout, padded_offsets(vb, offsets), vb.max_batch))
    lt = layout_tensors(layout, offsets.device)
    return bag_lengths(offsets).view(layout.num_features, batch_size).t()[:, lt.column_feature]


def pooled_terms(layout: TableLayout, weights: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                 batch_size: int) -> Iterator[tuple[Pass, torch.Tensor, torch.Tensor]]:
    """Per pass, every table at once: (the pass over the lookups it covers, the row of the pooled [B, sum D]
    output viewed as [-1, width] that each of its rows adds into, the rows' weights as float64 [m, width]).
    Valid inputs."""
    dev = weights.device
    lt = layout_tensors(layout, dev)
    off = offsets.to(dev, torch.int64)
    n = indices.numel()
    at = lookups(off, layout.num_features, batch_size, n)
    dims = lt.dims[at.table]
    row_base = lt.weights_offsets[at.table] + indices.to(dev, torch.int64) * dims  # each lookup's row, flat
    entry_base = at.sample * layout.total_dim + lt.col_offsets[at.table]          # its bag's first entry
    for p in element_passes(dims, uniform_dim(layout)):
        lk = p.lookups
        yield p, p.rows(entry_base[lk]), p.take(weights, row_base[lk]).to(torch.float64)


@dataclasses.dataclass
class ForwardReference:
    """The exact pooled output and what its error bound needs, each [B, sum D] (divided by L under MEAN)."""

    out: torch.Tensor                  # float64
    magnitude: Optional[torch.Tensor]  # float64: sum |w * row| per entry
    exact: Optional[torch.Tensor]      # bool: the kernel's fp32 pooled sum (before MEAN's division) is exact


_FP32_HOLDS = (torch.float32, torch.float16, torch.bfloat16)


def forward_reference(
    layout: TableLayout,
    weights: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    per_sample_weights: Optional[torch.Tensor],
    batch_size: int,
    pooling: Pooling,
    bounds: bool = True,
    batch_size_per_feature: Optional[Sequence[int]] = None,
) -> ForwardReference:
    """The pooled output and, with ``bounds``, its magnitude and exactness (``oracles.exactness``), all from one
    gather of the rows. The exactness test takes the terms as the kernel forms them: the row, converted exactly
    from the weights' dtype, times the per-sample weight in fp32 (the same terms where fp32 holds the weights
    given; then their sum of |terms| is the magnitude). With ``batch_size_per_feature`` (VBE) each is flat, in
    the VBE output's layout (``oracles.vbe``)."""
    vb = variable_batch(layout, batch_size_per_feature)
    if vb is not None:
        dense = forward_reference(layout, weights, indices, padded_offsets(vb, offsets), per_sample_weights,
                                  vb.max_batch, pooling, bounds)
        return ForwardReference(*(None if x is None else to_flat(layout, vb, x)
                                  for x in (dense.out, dense.magnitude, dense.exact)))
    check_valid(layout, indices, offsets, batch_size)
    B, dev = batch_size, weights.device
    width = pass_width(uniform_dim(layout))
    out = torch.zeros(B * layout.total_dim, dtype=torch.float64, device=dev)
    sums = ExactSums(B * layout.total_dim // width, width, dev) if bounds else None
    psw = kernel_psw = None
    if per_sample_weights is not None:
        psw = per_sample_weights.to(dev, torch.float64)
        kernel_psw = psw if per_sample_weights.dtype in _FP32_HOLDS else \
            per_sample_weights.to(dev, torch.float32).to(torch.float64)
    mag = torch.zeros_like(out) if bounds and kernel_psw is not psw else None
    for p, entry, terms in pooled_terms(layout, weights, indices, offsets, B):
        rows = kernel_terms = terms
        if psw is not None:
            rows = terms * p.spread(psw[p.lookups])
            kernel_terms = rows if kernel_psw is psw else terms * p.spread(kernel_psw[p.lookups])
        out.view(-1, width).index_add_(0, entry, rows)
        if sums is not None:
            sums.add(kernel_terms, entry, fp32=psw is None and weights.dtype in _FP32_HOLDS)
        if mag is not None:
            mag.view(-1, width).index_add_(0, entry, rows.abs())
    out = out.view(B, layout.total_dim)
    if sums is None:
        magnitude = exact = None
    else:
        magnitude = (sums.abs_sum if mag is None else mag).view(B, layout.total_dim)
        exact = sums.exact().view(B, layout.total_dim)
    if pooling == Pooling.MEAN:
        L = column_lengths(layout, offsets.to(dev), B).clamp(min=1)
        out, magnitude = out / L, None if magnitude is None else magnitude / L
    return ForwardReference(out, magnitude, exact)
