"""Hypothesis strategies for bad input: out-of-range ids and broken offsets.

Hypothesis draws a small ``BadBatchSpec`` (tables, bag lengths, which bad ids go where,
which offsets are broken, dtype, weights, duplicates, a seed); ``materialize_bad`` builds
the tensors with a seeded torch.Generator, so a spec replays exactly.

Bad ids: negative, -1, exactly E, E + 1, the index dtype's maximum and minimum, placed as
the first or last element of the first, a middle or the last bag of the first or last table. Bad
offsets: first entry not 0 (positive or negative), an entry below its predecessor, an
entry past len(indices), last entry not len(indices) (short or long); alone or together.
``fbgemm_comparable=True`` leaves out the two inputs on which our semantics and FBGEMM's
differ by design (id -1 and a positive first offset; see oracles/reference_bounds.py).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

import torch
from hypothesis import strategies as st

from tbe.layout import TableLayout, TableSpec
from tbe.modes import INDEX_BY_NAME

ID_KINDS = ("negative", "minus_one", "rows", "rows_plus_one", "dtype_max", "dtype_min")
OFFSET_KINDS = ("first_positive", "first_negative", "decreasing", "past_end", "last_short", "last_long")
DIVERGENT_ID_KINDS = ("minus_one",)
DIVERGENT_OFFSET_KINDS = ("first_positive",)
INDEX_DTYPES = INDEX_BY_NAME
BAG_POSITIONS = ("first", "middle", "last")  # where in a table's bags a bad id goes


def bag_index(position: str, batch_size: int) -> int:
    """The bag (sample) a bad id placed at ``position`` of BAG_POSITIONS goes to."""
    return {"first": 0, "middle": batch_size // 2, "last": batch_size - 1}[position]


@dataclasses.dataclass(frozen=True)
class BadId:
    """A bad id of ``kind`` at the first/last element of the first/middle/last bag of the first/last table."""

    kind: str
    table: str = "first"  # "first" or "last"
    bag: str = "first"    # one of BAG_POSITIONS
    element: str = "first"


@dataclasses.dataclass(frozen=True)
class BadBatchSpec:
    tables: tuple[tuple[int, int], ...]  # (E, D) per table
    batch_size: int
    max_length: int = 4
    index_dtype: str = "int64"
    weighted: bool = False
    duplicates: bool = False  # ids drawn from at most two rows per table
    bad_ids: tuple[BadId, ...] = ()
    bad_offsets: tuple[str, ...] = ()
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "tables", tuple(tuple(int(x) for x in t) for t in self.tables))
        object.__setattr__(self, "bad_ids", tuple(b if isinstance(b, BadId) else BadId(**b) for b in self.bad_ids))
        object.__setattr__(self, "bad_offsets", tuple(self.bad_offsets))
        for b in self.bad_ids:
            if b.kind not in ID_KINDS:
                raise ValueError(f"BadBatchSpec.bad_ids: unknown kind {b.kind!r} (known: {ID_KINDS})")
            if b.bag not in BAG_POSITIONS:
                raise ValueError(f"BadBatchSpec.bad_ids: unknown bag {b.bag!r} (known: {BAG_POSITIONS})")
        for k in self.bad_offsets:
            if k not in OFFSET_KINDS:
                raise ValueError(f"BadBatchSpec.bad_offsets: unknown kind {k!r} (known: {OFFSET_KINDS})")
        if self.index_dtype not in INDEX_DTYPES:
            raise ValueError(f"BadBatchSpec.index_dtype must be int32 or int64, got {self.index_dtype!r}")

    @property
    def layout(self) -> TableLayout:
        return TableLayout(tuple(TableSpec(e, d) for e, d in self.tables))

    @property
    def fbgemm_comparable(self) -> bool:
        return not any(b.kind in DIVERGENT_ID_KINDS for b in self.bad_ids) and not any(
            k in DIVERGENT_OFFSET_KINDS for k in self.bad_offsets
        )

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        d["tables"] = [list(t) for t in self.tables]
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "BadBatchSpec":
        d: dict[str, Any] = json.loads(text)
        d["tables"] = tuple(tuple(t) for t in d["tables"])
        d["bad_ids"] = tuple(BadId(**b) for b in d["bad_ids"])
        return cls(**d)


@dataclasses.dataclass
class BadBatch:
    spec: BadBatchSpec
    indices: torch.Tensor
    offsets: torch.Tensor
    per_sample_weights: Optional[torch.Tensor]

    @property
    def layout(self) -> TableLayout:
        return self.spec.layout

    @property
    def batch_size(self) -> int:
        return self.spec.batch_size

    @property
    def rows(self) -> list[int]:
        return [e for e, _ in self.spec.tables]


def _bad_value(kind: str, rows: int, dtype: torch.dtype, g: torch.Generator) -> int:
    info = torch.iinfo(dtype)
    if kind == "negative":
        return -int(torch.randint(2, 1000, (1,), generator=g))
    return {"minus_one": -1, "rows": rows, "rows_plus_one": rows + 1,
            "dtype_max": info.max, "dtype_min": info.min}[kind]


def materialize_bad(spec: BadBatchSpec) -> BadBatch:
    """Tensors for ``spec`` (CPU), deterministic in the spec."""
    g = torch.Generator().manual_seed(spec.seed)
    T, B = len(spec.tables), spec.batch_size
    dtype = INDEX_DTYPES[spec.index_dtype]
    lengths = torch.randint(0, spec.max_length + 1, (T, B), generator=g)
    targets = {}
    for bad in spec.bad_ids:  # the bag a bad id goes to must have room for it
        t = 0 if bad.table == "first" else T - 1
        b = bag_index(bad.bag, B)
        lengths[t, b] = max(int(lengths[t, b]), 1)
        targets.setdefault((t, b), []).append(bad)
    parts = []
    for t, (rows, _) in enumerate(spec.tables):
        n_t = int(lengths[t].sum())
        if spec.duplicates:
            pool = torch.randint(0, rows, (2,), generator=g)
            ids = pool[torch.randint(0, 2, (n_t,), generator=g)]
        else:
            ids = torch.randint(0, rows, (n_t,), generator=g)
        parts.append(ids)
    indices = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)
    offsets = torch.zeros(T * B + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths.reshape(-1), 0)
    n = indices.numel()
    for (t, b), bads in targets.items():
        start, end = int(offsets[t * B + b]), int(offsets[t * B + b + 1])
        for bad in bads:
            pos = start if bad.element == "first" else end - 1
            indices[pos] = _bad_value(bad.kind, spec.tables[t][0], dtype, g)
    indices = indices.to(dtype)
    # broken offsets, applied in a fixed order so that each kind survives the next
    for kind in OFFSET_KINDS:
        if kind not in spec.bad_offsets:
            continue
        delta = int(torch.randint(1, 4, (1,), generator=g))
        if kind == "first_positive":
            offsets[0] = max(1, min(n, int(offsets[0]) + delta)) if n > 0 else delta
        elif kind == "first_negative":
            offsets[0] = -delta
        elif kind == "decreasing" and offsets.numel() >= 2:
            i = int(torch.randint(1, offsets.numel(), (1,), generator=g))
            offsets[i] = offsets[i - 1] - delta
        elif kind == "past_end" and offsets.numel() >= 2:
            i = int(torch.randint(1, offsets.numel(), (1,), generator=g))
            offsets[i] = n + delta
        elif kind == "last_short":
            offsets[-1] = n - delta
        elif kind == "last_long":
            offsets[-1] = n + delta
    psw = None
    if spec.weighted:
        psw = (torch.rand(n, generator=g) * 1.5 + 0.25) * torch.where(torch.rand(n, generator=g) < 0.2, -1.0, 1.0)
    return BadBatch(spec, indices.contiguous(), offsets.to(dtype).contiguous(), psw)


def bad_ids(fbgemm_comparable: bool = False, max_size: int = 3) -> st.SearchStrategy[tuple[BadId, ...]]:
    kinds = [k for k in ID_KINDS if not (fbgemm_comparable and k in DIVERGENT_ID_KINDS)]
    one = st.builds(
        BadId, st.sampled_from(kinds), st.sampled_from(("first", "last")),
        st.sampled_from(BAG_POSITIONS), st.sampled_from(("first", "last")),
    )
    return st.lists(one, max_size=max_size).map(tuple)


def spread_bad_ids(fbgemm_comparable: bool = False) -> st.SearchStrategy[tuple[BadId, ...]]:
    """Every bad-id kind once, in a drawn order, at places that cycle through the bag positions and the
    first and last element: one batch holds each kind, and the kinds share the places evenly (lists of
    independent draws repeat some kinds and places far more than others)."""
    kinds = [k for k in ID_KINDS if not (fbgemm_comparable and k in DIVERGENT_ID_KINDS)]
    places = [(bag, element) for element in ("first", "last") for bag in BAG_POSITIONS]

    @st.composite
    def draw(d: st.DrawFn) -> tuple[BadId, ...]:
        order = d(st.permutations(kinds))
        shift = d(st.integers(0, len(places) - 1))
        tables = d(st.lists(st.sampled_from(("first", "last")), min_size=len(order), max_size=len(order)))
        return tuple(BadId(k, table, *places[(i + shift) % len(places)])
                     for i, (k, table) in enumerate(zip(order, tables)))

    return draw()


def bad_offsets(fbgemm_comparable: bool = False) -> st.SearchStrategy[tuple[str, ...]]:
    """No broken offsets, each kind alone, or several together."""
    kinds = [k for k in OFFSET_KINDS if not (fbgemm_comparable and k in DIVERGENT_OFFSET_KINDS)]
    return st.one_of(
        st.just(()),
        st.sampled_from(kinds).map(lambda k: (k,)),
        st.lists(st.sampled_from(kinds), min_size=2, max_size=len(kinds), unique=True).map(tuple),
    )


def bad_batch_specs(
    max_tables: int = 3,
    max_batch: int = 4,
    max_length: int = 4,
    max_rows: int = 12,
    max_dim: int = 20,
    fbgemm_comparable: bool = False,
    index_dtypes: tuple[str, ...] = ("int32", "int64"),
    allow_empty_batch: bool = True,
    max_bad_ids: int = 3,
) -> st.SearchStrategy[BadBatchSpec]:
    """Specs of small batches carrying bad ids (up to ``max_bad_ids``) and/or broken offsets."""
    table = st.tuples(st.integers(1, max_rows), st.integers(1, max_dim))
    return st.builds(
        BadBatchSpec,
        tables=st.lists(table, min_size=1, max_size=max_tables).map(tuple),
        batch_size=st.integers(0 if allow_empty_batch else 1, max_batch),
        max_length=st.integers(0, max_length),
        index_dtype=st.sampled_from(index_dtypes),
        weighted=st.booleans(),
        duplicates=st.booleans(),
        bad_ids=bad_ids(fbgemm_comparable, max_bad_ids),
        bad_offsets=bad_offsets(fbgemm_comparable),
        seed=st.integers(0, 2**31 - 1),
    ).filter(lambda s: s.batch_size > 0 or not s.bad_ids)


def bad_batches(**kwargs: Any) -> st.SearchStrategy[BadBatch]:
    """Materialized bad batches (arguments as ``bad_batch_specs``)."""
    return bad_batch_specs(**kwargs).map(materialize_bad)
