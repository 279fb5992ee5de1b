"""int32 edges of the linearization: layouts whose cumulative row count sits just below, at
or past 2^31 - 1, and ids at the ends of every table (E - 1 of the last table above all).

Bug class: linear index hash_size_cumsum[t] + id computed or sorted in int32 when the rows
in all exceed int32 (wrap-around merges rows of different tables or reorders runs), and the
int32/int64 switch off by one at its limit. Such layouts cannot be allocated on a CPU, so
the spec only names rows and ids; the check runs the transpose, which never touches the
weights, against ``oracles.reference_transpose``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Optional

import torch
from hypothesis import strategies as st

from tbe.layout import INT32_MAX, TableLayout, TableSpec
from tbe.modes import parse_index_dtype

# total rows minus 2^31: below the switch (fits int32), at it, past it, far past it
TOTAL_OFFSETS = (-2, -1, 0, 1, 2, 2**31)
ID_KINDS = ("zero", "one", "last", "second_last", "random")


@dataclasses.dataclass(frozen=True)
class Int32EdgeSpec:
    rows: tuple[int, ...]  # E per table (D is 1: never allocated)
    batch_size: int
    bag_ids: tuple[tuple[tuple[int, str], ...], ...]  # per bag (T*B of them): (repeat, id kind) each
    weighted: bool = True
    index_dtype: str = "int64"
    seed: int = 0

    @property
    def layout(self) -> TableLayout:
        return TableLayout(tuple(TableSpec(int(e), 1) for e in self.rows))

    @property
    def crosses_limit(self) -> bool:
        """Whether the linear indices can exceed int32 (rows in all > 2^31)."""
        return sum(self.rows) - 1 > INT32_MAX

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


@dataclasses.dataclass
class Int32Batch:
    spec: Int32EdgeSpec
    indices: torch.Tensor
    offsets: torch.Tensor
    per_sample_weights: Optional[torch.Tensor]


def _id(kind: str, rows: int, g: torch.Generator) -> int:
    if kind == "random":
        return int(torch.randint(0, rows, (1,), generator=g, dtype=torch.int64))
    return {"zero": 0, "one": min(1, rows - 1), "last": rows - 1, "second_last": max(0, rows - 2)}[kind]


def materialize_int32(spec: Int32EdgeSpec) -> Int32Batch:
    g = torch.Generator().manual_seed(spec.seed)
    B = spec.batch_size
    ids, lengths = [], []
    for k, bag in enumerate(spec.bag_ids):
        rows = spec.rows[k // B]
        n = 0
        for repeat, kind in bag:
            ids += [_id(kind, rows, g)] * repeat
            n += repeat
        lengths.append(n)
    dtype = parse_index_dtype("index_dtype", spec.index_dtype)
    indices = torch.tensor(ids, dtype=torch.int64)
    offsets = torch.zeros(len(lengths) + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.int64), 0)
    psw = None
    if spec.weighted:
        psw = torch.rand(indices.numel(), generator=g) * 1.5 + 0.25
    return Int32Batch(spec, indices.to(dtype), offsets.to(dtype), psw)


@st.composite
def int32_edge_specs(draw: st.DrawFn, max_tables: int = 3, max_batch: int = 4, max_per_bag: int = 6) -> Int32EdgeSpec:
    """Tables whose rows in all are 2^31 + one of TOTAL_OFFSETS; every id an edge of its table."""
    # the first tables (a list, so shrinking deletes them): small, or big enough that the last
    # one starts past 2^31 - 1
    head = draw(st.lists(st.one_of(st.integers(1, 5), st.integers(2**30, 2**31 + 4)), max_size=max_tables - 1))
    T = len(head) + 1
    total = 2**31 + draw(st.sampled_from(TOTAL_OFFSETS))
    last = total - sum(head)
    if last < 1:  # the head already passed the total: keep it and give the last table a few rows
        last = draw(st.integers(1, 5))
    rows = tuple(head + [last])
    B = draw(st.integers(1, max_batch))
    spec_index_int32 = draw(st.booleans())
    if spec_index_int32 and max(rows) - 1 > INT32_MAX:
        spec_index_int32 = False  # an id past int32 needs int64 indices
    entry = st.tuples(st.integers(1, 3), st.sampled_from(ID_KINDS))
    bags = tuple(tuple(draw(st.lists(entry, max_size=max_per_bag))) for _ in range(T * B))
    return Int32EdgeSpec(rows, B, bags, weighted=draw(st.booleans()),
                         index_dtype="int32" if spec_index_int32 else "int64",
                         seed=draw(st.integers(0, 2**31 - 1)))
