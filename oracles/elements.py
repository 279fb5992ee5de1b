"""A batch's lookups as (lookup, column) elements, every table at once.

The references work on flat element tensors instead of one pass per table, so checking a
batch of many tables (a pack of sub-cases) costs a fixed number of tensor operations and
host syncs, not a number per table. Element e of lookup i is column j < D_t of its row;
passes are cut at ``ELEMENTS`` elements to bound the float64 scratch memory.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Iterator, Optional

import torch

from tbe.layout import TableLayout

ELEMENTS = 1 << 24  # elements per pass: 128 MiB per float64 scratch tensor


@dataclasses.dataclass(frozen=True)
class LayoutTensors:
    """The layout's per-table arrays (int64, on one device), and the table of each pooled column."""

    dims: torch.Tensor
    rows: torch.Tensor
    weights_offsets: torch.Tensor
    col_offsets: torch.Tensor
    hash_size_cumsum: torch.Tensor  # T + 1 entries
    column_table: torch.Tensor      # [sum D]


@functools.lru_cache(maxsize=64)
def _layout_tensors(layout: TableLayout, device: str) -> LayoutTensors:
    t = layout.device_tensors(torch.device(device))
    col_table = torch.repeat_interleave(torch.arange(layout.num_tables), torch.tensor(layout.dims)).to(device)
    return LayoutTensors(t["dims"], t["rows"], t["weights_offsets"], t["col_offsets"], t["hash_size_cumsum"],
                         col_table)


def layout_tensors(layout: TableLayout, device: torch.device | str) -> LayoutTensors:
    return _layout_tensors(layout, str(torch.device(device)))


def bag_lengths(offsets: torch.Tensor) -> torch.Tensor:
    """L(t, b) for every bag, int64, in feature-major order."""
    off = offsets.to(torch.int64)
    return off[1:] - off[:-1]


@dataclasses.dataclass(frozen=True)
class Lookups:
    """Where each lookup of a valid batch sits: its bag's table and sample, and its bag's length."""

    table: torch.Tensor    # [n] int64
    sample: torch.Tensor   # [n] int64
    bag_len: torch.Tensor  # [n] int64


def lookups(offsets: torch.Tensor, num_tables: int, batch_size: int, num_indices: int) -> Lookups:
    lengths = bag_lengths(offsets)
    bag = torch.repeat_interleave(torch.arange(num_tables * batch_size, device=offsets.device), lengths,
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


class Pass:
    """Lookups [a, b) of a batch as their (lookup, column) elements, lookup by lookup: what the references
    need of them, whichever way the elements are laid out (``element_passes``)."""

    def __init__(self, a: int, b: int, count: int) -> None:
        self.lookups, self.count = slice(a, b), count

    def spread(self, x: torch.Tensor) -> torch.Tensor:
        """A value per lookup of the pass ([b - a]) as one per element ([count])."""
        raise NotImplementedError

    def at(self, base: torch.Tensor) -> torch.Tensor:
        """Each element's flat position from its lookup's first position ``base`` [b - a]: base + column."""
        raise NotImplementedError

    def reduce(self, values: torch.Tensor) -> torch.Tensor:
        """[count] values summed per lookup: [b - a]."""
        raise NotImplementedError


class _Listed(Pass):
    """Lookups of different D: each element's lookup and column listed."""

    def __init__(self, a: int, b: int, count: int, dims: torch.Tensor) -> None:
        super().__init__(a, b, count)
        self.item, self.col = expand(dims, count)

    def spread(self, x: torch.Tensor) -> torch.Tensor:
        return x[self.item]

    def at(self, base: torch.Tensor) -> torch.Tensor:
        return base[self.item] + self.col

    def reduce(self, values: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(self.lookups.stop - self.lookups.start, dtype=values.dtype, device=values.device)
        return out.index_add_(0, self.item, values)


class _Uniform(Pass):
    """Lookups of one D: the elements form a [b - a, D] block, so each per-lookup value broadcasts."""

    def __init__(self, a: int, b: int, dim: int, device: torch.device) -> None:
        super().__init__(a, b, (b - a) * dim)
        self.dim, self.cols = dim, torch.arange(dim, device=device)

    def spread(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, None].expand(-1, self.dim).reshape(-1)

    def at(self, base: torch.Tensor) -> torch.Tensor:
        return (base[:, None] + self.cols).reshape(-1)

    def reduce(self, values: torch.Tensor) -> torch.Tensor:
        return values.view(-1, self.dim).sum(1)


def element_passes(dims: torch.Tensor, uniform: Optional[int] = None, limit: int = ELEMENTS) -> Iterator[Pass]:
    """The lookups whose tables have ``dims`` [n] columns, in ``Pass`` es of about ``limit`` elements.
    ``uniform``: the one D every lookup has, where the caller knows it (the layout's tables all have it):
    the passes then need no per-element lists and no host reads."""
    n = dims.numel()
    if uniform is None:
        for a, b, count in passes(dims, limit):
            yield _Listed(a, b, count, dims[a:b])
        return
    step = max(1, limit // max(uniform, 1))
    for a in range(0, n, step):
        yield _Uniform(a, min(n, a + step), uniform, dims.device)


def uniform_dim(layout: TableLayout) -> Optional[int]:
    """The D of every table of ``layout``, or None when they differ."""
    return layout.dims[0] if layout.num_tables and len(set(layout.dims)) == 1 else None
