"""A batch's lookups as (lookup, column) elements, every table at once.

The references work on flat element tensors instead of one pass per table, so checking a
batch of many tables (a pack of sub-cases) costs a fixed number of tensor operations and
host syncs, not a number per table. Element e of lookup i is column j < D_t of its row;
passes are cut at ``ELEMENTS`` elements to bound the float64 scratch memory.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from typing import Iterator, Optional

import torch

from tbe.layout import TableLayout

ELEMENTS = 1 << 24  # elements per pass: 128 MiB per float64 scratch tensor


@dataclasses.dataclass(frozen=True)
class LayoutTensors:
    """The layout's arrays (int64, on one device) indexed by feature (``TableLayout.device_tensors``: each
    feature's table's D, rows, weights offset and linear-id base, and its output column), the table of each
    feature, the D, linear-id base and weights offset of each table (what the backward reference merges rows
    by, independently of the kernels' per-feature arrays), and the feature of each pooled column."""

    dims: torch.Tensor
    rows: torch.Tensor
    weights_offsets: torch.Tensor
    col_offsets: torch.Tensor
    hash_size_cumsum: torch.Tensor  # F + 1 entries
    column_feature: torch.Tensor    # [sum D]
    feature_table: torch.Tensor     # [F]
    table_dims: torch.Tensor        # [T]
    table_hash_size_cumsum: torch.Tensor  # [T + 1] the storage's linear-id bases, per table
    table_weights_offsets: torch.Tensor   # [T]


@functools.lru_cache(maxsize=64)
def _layout_tensors(layout: TableLayout, device: str) -> LayoutTensors:
    t = layout.device_tensors(torch.device(device))
    col_feature = torch.repeat_interleave(torch.arange(layout.num_features),
                                          torch.tensor(layout.feature_dims)).to(device)
    return LayoutTensors(t["dims"], t["rows"], t["weights_offsets"], t["col_offsets"], t["hash_size_cumsum"],
                         col_feature, torch.tensor(layout.feature_tables, dtype=torch.int64, device=device),
                         torch.tensor(layout.dims, dtype=torch.int64, device=device),
                         torch.tensor(layout.hash_size_cumsum, dtype=torch.int64, device=device),
                         torch.tensor(layout.weights_offsets, dtype=torch.int64, device=device))


def layout_tensors(layout: TableLayout, device: torch.device | str) -> LayoutTensors:
    return _layout_tensors(layout, str(torch.device(device)))


def bag_lengths(offsets: torch.Tensor) -> torch.Tensor:
    """L(t, b) for every bag, int64, in feature-major order."""
    off = offsets.to(torch.int64)
    return off[1:] - off[:-1]


@dataclasses.dataclass(frozen=True)
class Lookups:
    """Where each lookup of a valid batch sits: its bag's feature and sample, and its bag's length."""

    table: torch.Tensor    # [n] int64 the feature (the table, without a feature_table_map)
    sample: torch.Tensor   # [n] int64
    bag_len: torch.Tensor  # [n] int64


def lookups(offsets: torch.Tensor, num_features: int, batch_size: int, num_indices: int) -> Lookups:
    lengths = bag_lengths(offsets)
    bag = torch.repeat_interleave(torch.arange(num_features * batch_size, device=offsets.device), lengths,
                                  output_size=num_indices)
    table = bag // max(batch_size, 1)
    return Lookups(table, bag - table * batch_size, lengths[bag])


def expand(counts: torch.Tensor, total: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(item, position): ``counts[i]`` elements for item i, numbered 0.. within the item; ``total`` = sum."""
    starts = torch.cumsum(counts, 0) - counts
    item = torch.repeat_interleave(torch.arange(counts.numel(), device=counts.device), counts, output_size=total)
    return item, torch.arange(total, device=counts.device) - starts[item]


def passes(counts: torch.Tensor, limit: int = ELEMENTS) -> Iterator[tuple[int, int, int]]:
    """(first item, end item, elements) ranges of items holding about ``limit`` elements each."""
    n = counts.numel()
    if n == 0:
        return
    ends = torch.cumsum(counts, 0)
    total = int(ends[-1])
    if total <= limit:
        yield 0, n, total
        return
    cuts = torch.searchsorted(ends, torch.arange(limit, total, limit, device=ends.device), right=True)
    bounds = sorted({0, n, *(c for c in cuts.tolist() if 0 < c < n)})
    done = [0] + ends[torch.tensor(bounds[1:], device=ends.device) - 1].tolist()
    for k in range(len(bounds) - 1):
        yield bounds[k], bounds[k + 1], int(done[k + 1] - done[k])


class Pass(abc.ABC):
    """Lookups [a, b) of a batch as their (lookup, column) elements, whichever way they are laid out
    (``element_passes``): as ``[m, width]`` tensors, one row per lookup and its D columns where every
    lookup has one D (``width`` = D), one row per element otherwise (``width`` = 1). A flat tensor of
    rows of D values (the weights, the upstream gradient, a reference's output or row gradients) is
    read and added to through the rows' first positions, ``base`` per lookup."""

    width = 1

    def __init__(self, a: int, b: int, count: int) -> None:
        self.lookups, self.count = slice(a, b), count

    @abc.abstractmethod
    def per_row(self, x: torch.Tensor) -> torch.Tensor:
        """A value per lookup of the pass ([b - a]) as one per row of the pass ([m])."""

    def spread(self, x: torch.Tensor) -> torch.Tensor:
        """A value per lookup as one per element, broadcastable to [m, width]."""
        return self.per_row(x)[:, None]

    @abc.abstractmethod
    def take(self, flat: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        """[m, width]: each element's value of ``flat``, at its lookup's ``base`` plus its column."""

    @abc.abstractmethod
    def rows(self, base: torch.Tensor) -> torch.Tensor:
        """[m]: the row of ``flat.view(-1, width)`` each row of the pass adds into, from the lookups' ``base``
        (a multiple of D where ``width`` is D: the flat tensor holds rows of D values only)."""

    @abc.abstractmethod
    def reduce(self, values: torch.Tensor) -> torch.Tensor:
        """[m, width] values summed per lookup: [b - a]."""


class _Listed(Pass):
    """Lookups of different D: each element listed with its lookup and column, one per row."""

    def __init__(self, a: int, b: int, count: int, dims: torch.Tensor) -> None:
        super().__init__(a, b, count)
        self.item, self.col = expand(dims, count)

    def per_row(self, x: torch.Tensor) -> torch.Tensor:
        return x[self.item]

    def take(self, flat: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        return flat[self.rows(base)][:, None]

    def rows(self, base: torch.Tensor) -> torch.Tensor:
        return base[self.item] + self.col

    def reduce(self, values: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(self.lookups.stop - self.lookups.start, dtype=values.dtype, device=values.device)
        return out.index_add_(0, self.item, values[:, 0])


class _Uniform(Pass):
    """Lookups of one D: the elements form a [b - a, D] block, read and added to row by row."""

    def __init__(self, a: int, b: int, dim: int) -> None:
        super().__init__(a, b, (b - a) * dim)
        self.width = dim

    def per_row(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def take(self, flat: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        return flat.unfold(0, self.width, 1)[base]  # the D values from each base, one gather of rows

    def rows(self, base: torch.Tensor) -> torch.Tensor:
        return torch.div(base, self.width, rounding_mode="floor")

    def reduce(self, values: torch.Tensor) -> torch.Tensor:
        return values.sum(1)


def element_passes(dims: torch.Tensor, uniform: Optional[int] = None, limit: int = ELEMENTS) -> Iterator[Pass]:
    """The lookups whose tables have ``dims`` [n] columns, in ``Pass`` es of about ``limit`` elements.
    ``uniform``: the one D every lookup has, where the caller knows it (the layout's tables all have it):
    the passes then work on [lookups, D] blocks, with no per-element lists and no host reads."""
    n = dims.numel()
    if uniform is None:
        for a, b, count in passes(dims, limit):
            yield _Listed(a, b, count, dims[a:b])
        return
    step = max(1, limit // max(uniform, 1))
    for a in range(0, n, step):
        yield _Uniform(a, min(n, a + step), uniform)


def pass_width(uniform: Optional[int]) -> int:
    """The ``Pass.width`` of ``element_passes(dims, uniform)``."""
    return uniform or 1


def uniform_dim(layout: TableLayout) -> Optional[int]:
    """The D of every table of ``layout``, or None when they differ."""
    return layout.dims[0] if layout.num_tables and len(set(layout.dims)) == 1 else None
