"""Hypothesis strategies for batches at every edge of the small-table path's eligibility.

Each drawn parameter sits on one side of an edge: E in {64, 65} (plus small tables), D in
{63, 64, 128, 129}, mean bag length L in {63, 64, 256, 257} (bags past a
counting step of 256 ids, or many steps of the default's 16), fp16/fp32 weights, fp32/fp16 output, weighted or
not, one table or two, and the config switch. ``expected_small_table`` restates the rule
independently of tbe.forward_small_table so a test can check the dispatcher against it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Optional

import torch
from hypothesis import strategies as st

from tbe.layout import TableLayout, TableSpec
from tbe.modes import FloatDtype, IndexDtype, Pooling, float_dtype, index_dtype, parse_enum

ROWS_EDGE = (64, 65)
DIM_EDGE = (63, 64, 128, 129)
LENGTH_EDGE = (63, 64, 256, 257)


@dataclasses.dataclass(frozen=True)
class SmallTableSpec:
    rows: int
    dim: int
    bag_length: int  # every bag has this length unless ``ragged``
    batch_size: int
    ragged: bool = False  # lengths spread over [0, 2L] with the same total (mean L)
    extra_table: Optional[tuple[int, int]] = None  # a second feature disqualifies the path
    pooling: Pooling = Pooling.SUM
    weights_dtype: FloatDtype = FloatDtype.FP16
    output_dtype: FloatDtype = FloatDtype.FP32
    weighted: bool = False
    index_dtype: IndexDtype = IndexDtype.INT64
    duplicates: bool = False  # all ids from two rows (counts up to a whole bag)
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "pooling", parse_enum(Pooling, "SmallTableSpec.pooling", self.pooling))
        for name in ("weights_dtype", "output_dtype"):
            object.__setattr__(self, name, float_dtype(f"SmallTableSpec.{name}", getattr(self, name)))
        object.__setattr__(self, "index_dtype", index_dtype("SmallTableSpec.index_dtype", self.index_dtype))

    @property
    def layout(self) -> TableLayout:
        specs = [TableSpec(self.rows, self.dim)]
        if self.extra_table is not None:
            specs.append(TableSpec(*self.extra_table))
        return TableLayout(tuple(specs))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


def expected_small_table(spec: SmallTableSpec, num_indices: int) -> bool:
    """The seeds' rule with the default thresholds (E<=64, 64<=D<=128, mean L>=64, fp16 in, fp32 out)."""
    return (
        spec.extra_table is None and spec.rows <= 64 and 64 <= spec.dim <= 128
        and spec.weights_dtype == "fp16" and spec.output_dtype == "fp32" and not spec.weighted
        and spec.batch_size >= 1 and num_indices >= 64 * spec.batch_size
    )


@dataclasses.dataclass
class SmallTableBatch:
    spec: SmallTableSpec
    weights: torch.Tensor  # packed, in the spec's weights dtype
    indices: torch.Tensor
    offsets: torch.Tensor
    per_sample_weights: Optional[torch.Tensor]


def materialize_small(spec: SmallTableSpec) -> SmallTableBatch:
    """Tensors for ``spec`` (CPU), deterministic in the spec."""
    g = torch.Generator().manual_seed(spec.seed)
    layout = spec.layout
    B = spec.batch_size
    lengths = []
    for t, s in enumerate(layout.specs):
        if spec.ragged and B > 1:
            cut = torch.sort(torch.randint(0, B * spec.bag_length + 1, (B - 1,), generator=g)).values
            edges = torch.cat([torch.zeros(1, dtype=torch.int64), cut, torch.tensor([B * spec.bag_length])])
            lengths.append(edges[1:] - edges[:-1])
        else:
            lengths.append(torch.full((B,), spec.bag_length, dtype=torch.int64))
    lengths = torch.stack(lengths)  # [T, B]
    ids = []
    for t, s in enumerate(layout.specs):
        n_t = int(lengths[t].sum())
        if spec.duplicates:
            pool = torch.randint(0, s.rows, (2,), generator=g)
            ids.append(pool[torch.randint(0, 2, (n_t,), generator=g)])
        else:
            ids.append(torch.randint(0, s.rows, (n_t,), generator=g))
    idx_dtype = spec.index_dtype.torch
    indices = torch.cat(ids).to(idx_dtype)
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths.reshape(-1), 0)
    wdtype = spec.weights_dtype.torch
    weights = (torch.rand(layout.total_elements, generator=g, dtype=torch.float64) * 2 - 1).to(wdtype)
    psw = None
    if spec.weighted:
        psw = torch.rand(indices.numel(), generator=g) * 1.5 + 0.25
    return SmallTableBatch(spec, weights, indices, offsets.to(idx_dtype), psw)


EDGES = ("rows", "dim", "length", "dtype", "weighted", "tables")


def small_table_specs(max_batch: int = 18, edges_only: bool = True) -> st.SearchStrategy[SmallTableSpec]:
    """Specs on both sides of every eligibility edge.

    A draw is either an eligible spec whose parameters sit on the eligible side of each
    edge (64 rows, D 64/128, L 64/256/257), or one with exactly one edge crossed (65 rows,
    D 63/129, L 63, other dtypes, per-sample weights, a second table), so each edge is
    exercised from both sides and about a third of the draws really take the path.
    ``max_batch`` above 16 gives a second, partial program.
    """
    def build(crossed: Optional[str]) -> st.SearchStrategy[SmallTableSpec]:
        small_rows = st.sampled_from((64,)) if edges_only else st.one_of(st.just(64), st.integers(1, 64))
        dtypes = (st.sampled_from((("fp32", "fp32"), ("fp16", "fp16"), ("bf16", "fp32")))
                  if crossed == "dtype" else st.just(("fp16", "fp32")))
        return st.builds(
            lambda r, d, L, B, ragged, extra, pooling, dts, idx, dup, seed: SmallTableSpec(
                r, d, L, B, ragged, extra, pooling, dts[0], dts[1], crossed == "weighted", idx, dup, seed,
            ),
            st.just(65) if crossed == "rows" else small_rows,
            st.sampled_from((63, 129) if crossed == "dim" else (64, 128)),
            st.just(63) if crossed == "length" else st.sampled_from((64, 256, 257)),
            st.integers(1, max_batch),
            st.booleans(),
            st.tuples(st.integers(1, 8), st.integers(1, 8)) if crossed == "tables" else st.none(),
            st.sampled_from(Pooling),
            dtypes,
            st.sampled_from(IndexDtype), st.booleans(), st.integers(0, 2**31 - 1),
        )

    return st.sampled_from((None, None, None) + EDGES).flatmap(build)
