"""Bad-input batches: out-of-range ids and broken offsets, as records that materialize exactly.

A ``BadBatchSpec`` names tables, bag lengths, which bad ids go where, which offsets are broken, the
index dtype, weights, duplicates and a seed; ``materialize_bad`` builds its tensors with a seeded
torch.Generator, so a spec replays exactly.

Bad ids: negative, -1, exactly E, E + 1, the index dtype's maximum and minimum, placed as
the first or last element of the first, a middle or the last bag of the first or last table. Bad
offsets: first entry not 0 (positive or negative), an entry below its predecessor, an
entry past len(indices), last entry not len(indices) (short or long); alone or together.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

import torch

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
