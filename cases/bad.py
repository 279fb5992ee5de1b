"""Bad-input batches: out-of-range ids and broken offsets, as records that materialize exactly.

A ``BadBatchSpec`` names tables, bag lengths, which bad ids go where, which offsets are broken, the
index dtype, weights, duplicates and a seed; ``materialize_bad`` builds its tensors with a seeded
torch.Generator, so a spec replays exactly.

Bad ids: negative, -1, exactly E, E + 1, the index dtype's maximum and minimum, placed as
the first or last element of the first, a middle or the last bag of the first or last feature (the first or
last table when every table has one feature; a ``feature_table_map`` may give several features one table, and
``batch_size_per_feature`` each feature its own number of bags, VBE). Bad
offsets: first entry not 0 (positive or negative), an entry below its predecessor, an
entry past len(indices), last entry not len(indices) (short or long); alone or together.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

import torch

from cases.features import FeatureBatches, bag_base, checked_map, checked_sizes
from tbe.layout import TableLayout, TableSpec
from tbe.modes import IndexDtype, index_dtype

ID_KINDS = ("negative", "minus_one", "rows", "rows_plus_one", "dtype_max", "dtype_min")
OFFSET_KINDS = ("first_positive", "first_negative", "decreasing", "past_end", "last_short", "last_long")
DIVERGENT_ID_KINDS = ("minus_one",)
DIVERGENT_OFFSET_KINDS = ("first_positive",)
BAG_POSITIONS = ("first", "middle", "last")  # where in a table's bags a bad id goes


def bag_index(position: str, batch_size: int) -> int:
    """The bag (sample) a bad id placed at ``position`` of BAG_POSITIONS goes to."""
    return {"first": 0, "middle": batch_size // 2, "last": batch_size - 1}[position]


@dataclasses.dataclass(frozen=True)
class BadId:
    """A bad id of ``kind`` at the first/last element of the first/middle/last bag of the first/last feature."""

    kind: str
    table: str = "first"  # "first" or "last" feature (with one feature per table, the first or last table)
    bag: str = "first"    # one of BAG_POSITIONS
    element: str = "first"


@dataclasses.dataclass(frozen=True)
class BadBatchSpec(FeatureBatches):
    tables: tuple[tuple[int, int], ...]  # (E, D) per table
    batch_size: int
    max_length: int = 4
    index_dtype: IndexDtype = IndexDtype.INT64
    weighted: bool = False
    duplicates: bool = False  # ids drawn from at most two rows per table
    bad_ids: tuple[BadId, ...] = ()
    bad_offsets: tuple[str, ...] = ()
    seed: int = 0
    feature_table_map: tuple[int, ...] = ()  # the table each feature reads; empty: feature t reads table t
    batch_size_per_feature: Optional[tuple[int, ...]] = None  # VBE: feature f has B_f bags, batch_size = max B_f

    def __post_init__(self) -> None:
        object.__setattr__(self, "tables", tuple(tuple(int(x) for x in t) for t in self.tables))
        object.__setattr__(self, "feature_table_map",
                           checked_map("BadBatchSpec", self.feature_table_map, len(self.tables)))
        if self.batch_size_per_feature is not None:
            object.__setattr__(self, "batch_size_per_feature", checked_sizes(
                "BadBatchSpec", self.batch_size_per_feature, self.num_features, self.batch_size))
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
        object.__setattr__(self, "index_dtype", index_dtype("BadBatchSpec.index_dtype", self.index_dtype))
        self._check_bags_for_bad_ids()

    def _check_bags_for_bad_ids(self) -> None:
        """Every bad id needs a bag to go in: its feature must have a batch size of at least 1."""
        for i, b in enumerate(self.bad_ids):
            f = self.feature_of(b)
            if self.batch_sizes[f] == 0:
                where = (f"batch_size_per_feature[{f}] = 0" if self.vbe else f"batch_size = 0")
                raise ValueError(f"BadBatchSpec.bad_ids[{i}] goes to the {b.table} feature ({f}), which has no bag "
                                 f"({where}): a bad id cannot be placed there")

    @property
    def layout(self) -> TableLayout:
        return TableLayout(tuple(TableSpec(e, d) for e, d in self.tables), self.feature_table_map)

    @property
    def feature_tables(self) -> tuple[int, ...]:
        """The table of every feature (the identity when the map is empty)."""
        return self.feature_table_map or tuple(range(len(self.tables)))

    @property
    def num_features(self) -> int:
        return len(self.feature_tables)

    def feature_of(self, bad: BadId) -> int:
        """The feature whose bags ``bad`` goes to: the first or the last."""
        return 0 if bad.table == "first" else self.num_features - 1

    @property
    def fbgemm_comparable(self) -> bool:
        return not any(b.kind in DIVERGENT_ID_KINDS for b in self.bad_ids) and not any(
            k in DIVERGENT_OFFSET_KINDS for k in self.bad_offsets
        )

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        d["tables"] = [list(t) for t in self.tables]
        d["feature_table_map"] = list(self.feature_table_map)
        if not self.feature_table_map:  # one feature per table: records (and their hashes) stay as before the field
            del d["feature_table_map"]
        if self.batch_size_per_feature is None:  # a fixed batch: records stay as before the field
            del d["batch_size_per_feature"]
        else:
            d["batch_size_per_feature"] = list(self.batch_size_per_feature)
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
        """The rows of each feature's table (what a bounds check takes)."""
        return [self.spec.tables[t][0] for t in self.spec.feature_tables]


def _bad_value(kind: str, rows: int, dtype: torch.dtype, g: torch.Generator) -> int:
    info = torch.iinfo(dtype)
    if kind == "negative":
        return -int(torch.randint(2, 1000, (1,), generator=g))
    return {"minus_one": -1, "rows": rows, "rows_plus_one": rows + 1,
            "dtype_max": info.max, "dtype_min": info.min}[kind]


def _place_targets(spec: BadBatchSpec, lengths: torch.Tensor) -> dict[tuple[int, int], list[BadId]]:
    """(feature, sample) -> the bad ids going to that bag, each such bag grown to hold one id at least."""
    targets: dict[tuple[int, int], list[BadId]] = {}
    for bad in spec.bad_ids:
        f = spec.feature_of(bad)
        b = bag_index(bad.bag, spec.batch_sizes[f])
        lengths[f, b] = max(int(lengths[f, b]), 1)
        targets.setdefault((f, b), []).append(bad)
    return targets


def _valid_ids(spec: BadBatchSpec, lengths: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """In-range ids for every feature's bags, feature by feature (from two rows per table with duplicates)."""
    parts = []
    for f, t in enumerate(spec.feature_tables):
        rows, n_f = spec.tables[t][0], int(lengths[f, :spec.batch_sizes[f]].sum())
        if spec.duplicates:
            pool = torch.randint(0, rows, (2,), generator=g)
            parts.append(pool[torch.randint(0, 2, (n_f,), generator=g)])
        else:
            parts.append(torch.randint(0, rows, (n_f,), generator=g))
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)


def materialize_bad(spec: BadBatchSpec) -> BadBatch:
    """Tensors for ``spec`` (CPU), deterministic in the spec. Bag lengths are drawn [F, max B_f] and feature f keeps
    its first B_f (under a fixed batch, all of them: the draws of a fixed batch are as before VBE)."""
    g = torch.Generator().manual_seed(spec.seed)
    sizes, dtype = spec.batch_sizes, spec.index_dtype.torch
    lengths = torch.randint(0, spec.max_length + 1, (spec.num_features, spec.batch_size), generator=g)
    targets = _place_targets(spec, lengths)
    indices = _valid_ids(spec, lengths, g)
    flat = torch.cat([lengths[f, :b] for f, b in enumerate(sizes)] + [lengths.new_zeros(0)])
    offsets = torch.zeros(flat.numel() + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(flat, 0)
    n, first_bag = indices.numel(), bag_base(sizes)
    for (f, b), bads in targets.items():
        start, end = int(offsets[first_bag[f] + b]), int(offsets[first_bag[f] + b + 1])
        for bad in bads:
            pos = start if bad.element == "first" else end - 1
            indices[pos] = _bad_value(bad.kind, spec.tables[spec.feature_tables[f]][0], dtype, g)
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
