"""Batch shapes at the extremes, sized by the backend budget.

Bug class: index arithmetic and launch sizing that assume friendly shapes: grids computed
from T*B, column offsets after odd D, rows wider than the largest dimension bucket
(column loops), MEAN over an empty bag (0/0), zero-size launches for all-empty batches,
a single bag, many tables of different widths in one output row.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from cases import LENGTH_PROFILES
from strategies.specs import dims


@dataclasses.dataclass(frozen=True)
class Shape:
    tables: tuple[tuple[int, int], ...]  # (E, D) per table
    batch_size: int
    length_profile: str  # "empty" = every bag empty
    max_length: int


@st.composite
def batch_shapes(
    draw: st.DrawFn,
    max_lookups: int,
    max_bags: int,
    max_tables: int = 64,
    max_batch: int = 65536,
    max_dim: int = 1024,
    max_rows: int = 1000,
    min_rows: int = 1,
    max_total_dim: int | None = None,
) -> Shape:
    """T in 1..max_tables, B in 0..max_batch with T*B <= max_bags, D in 1..max_dim (odd sizes and
    powers of two +-1 favoured), bag lengths so that T*B*max_length <= max_lookups.

    ``max_total_dim`` caps sum D (the output row width; CPU cost grows with it). Shrinks
    toward one small table, one bag.
    """
    T = draw(st.one_of(st.integers(1, min(3, max_tables)), st.just(max_tables), st.integers(1, max_tables)))
    b_cap = max(1, min(max_batch, max_bags // T))
    B = draw(st.one_of(st.integers(1, min(8, b_cap)), st.sampled_from([1, b_cap, 0]), st.integers(1, b_cap)))
    row_edges = [r for r in (1, 2, 3, 63, 64, 65) if min_rows <= r <= max_rows]
    rows = st.one_of(st.sampled_from(row_edges), st.integers(min_rows, max_rows)) if row_edges else \
        st.integers(min_rows, max_rows)
    tables = []
    width_left = max_total_dim if max_total_dim is not None else T * max_dim
    for t in range(T):
        cap = max(1, min(max_dim, width_left - (T - 1 - t)))  # leave D >= 1 for the tables after
        tables.append((draw(rows), draw(dims(cap))))
        width_left -= tables[-1][1]
    tables = tuple(tables)
    profile = draw(st.sampled_from(LENGTH_PROFILES))
    per_bag = max_lookups // max(1, T * max(1, B))
    max_length = draw(st.integers(0, max(0, min(64, per_bag))))
    return Shape(tables, B, profile, max_length)
