"""CaseSpec (what Hypothesis draws) and its materialization into a batch (what kernels run).

A spec names the tables, the table each feature reads, batch size (or one per feature: VBE), dtypes, modes, a
bag-length profile, hot rows with exact segment lengths and a seed. ``materialize`` is deterministic in the spec, so a
saved spec is a complete, replayable failing case.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from typing import Any, ClassVar, Optional

import torch

from cases.dyadic import VALUE_KINDS, dyadic_grads, dyadic_psw
from cases.protocol import CaseKind
from tbe import draws
from cases.features import FeatureBatches, checked_map, checked_sizes
from tbe.layout import TableLayout, TableSpec, VariableBatch
from tbe.modes import BoundsCheckMode, FloatDtype, IndexDtype, Optimizer, Pooling, float_dtype, index_dtype, parse_enum

LENGTH_PROFILES = ("fixed", "uniform", "log_uniform", "zipf", "empty")


@dataclasses.dataclass(frozen=True)
class HotRow:
    """Row ``row`` of table ``table`` is read exactly ``count`` times in the batch (one run of SL=count), in bags
    of any feature that reads the table."""

    table: int
    row: int
    count: int


@dataclasses.dataclass(frozen=True)
class CaseSpec(FeatureBatches):
    """A valid batch and the module it runs on: tables, batch size, modes, dtypes, bag lengths, hot rows, seed."""

    kind: ClassVar[CaseKind] = CaseKind.SPEC
    bad: ClassVar[None] = None  # a valid batch (cases.protocol.CaseRecord)
    tables: tuple[tuple[int, int], ...]
    batch_size: int
    pooling: Pooling = Pooling.SUM
    weights_dtype: FloatDtype = FloatDtype.FP32
    output_dtype: FloatDtype = FloatDtype.FP32
    index_dtype: IndexDtype = IndexDtype.INT64
    weighted: bool = False
    optimizer: Optimizer = Optimizer.EXACT_SGD
    learning_rate: float = 0.05
    eps: float = 1e-4
    bounds_check: BoundsCheckMode = BoundsCheckMode.WARNING
    length_profile: str = "uniform"
    max_length: int = 8
    hot_rows: tuple[HotRow, ...] = ()
    id_skew: float = 0.0  # 0 = uniform ids; > 0 = Zipf exponent over rows (more duplicates)
    steps: int = 1
    seed: int = 0
    values: str = "random"  # "dyadic": exact-value data (cases.dyadic), "random": random magnitudes
    feature_table_map: tuple[int, ...] = ()  # the table each feature reads (tbe.layout); empty: feature t, table t
    batch_size_per_feature: Optional[tuple[int, ...]] = None  # VBE: feature f has B_f bags and batch_size is
                                                              # max B_f; None: every feature has batch_size bags

    def __post_init__(self) -> None:
        object.__setattr__(self, "tables", tuple(tuple(int(x) for x in t) for t in self.tables))
        object.__setattr__(self, "feature_table_map", checked_map("CaseSpec", self.feature_table_map, len(self.tables)))
        if self.batch_size_per_feature is not None:
            object.__setattr__(self, "batch_size_per_feature", checked_sizes(
                "CaseSpec", self.batch_size_per_feature, self.num_features, self.batch_size))
        for name, cls in (("pooling", Pooling), ("optimizer", Optimizer), ("bounds_check", BoundsCheckMode)):
            object.__setattr__(self, name, parse_enum(cls, f"CaseSpec.{name}", getattr(self, name)))
        for name, parse in (("weights_dtype", float_dtype), ("output_dtype", float_dtype), ("index_dtype", index_dtype)):
            object.__setattr__(self, name, parse(f"CaseSpec.{name}", getattr(self, name)))
        object.__setattr__(
            self, "hot_rows", tuple(h if isinstance(h, HotRow) else HotRow(**h) for h in self.hot_rows)
        )
        if self.length_profile not in LENGTH_PROFILES:
            raise ValueError(f"CaseSpec.length_profile must be one of {LENGTH_PROFILES}, got {self.length_profile!r}")
        if self.values not in VALUE_KINDS:
            raise ValueError(f"CaseSpec.values must be one of {VALUE_KINDS}, got {self.values!r}")
        for h in self.hot_rows:
            if not 0 <= h.table < len(self.tables) or not 0 <= h.row < self.tables[h.table][0] or h.count < 1:
                raise ValueError(f"CaseSpec.hot_rows: {h} does not fit tables {self.tables}")
            if self.vbe and not any(self.batch_sizes[f] for f, t in enumerate(self.feature_tables) if t == h.table):
                raise ValueError(f"CaseSpec.hot_rows: {h} has no bag to go in (every feature of table {h.table} "
                                 f"has batch 0)")

    @property
    def layout(self) -> TableLayout:
        return TableLayout(tuple(TableSpec(e, d) for e, d in self.tables), self.feature_table_map)

    @property
    def num_tables(self) -> int:
        return len(self.tables)

    @property
    def feature_tables(self) -> tuple[int, ...]:
        """The table of every feature (``tbe.layout.TableLayout``'s rule: the identity when the map is empty)."""
        return self.layout.feature_tables

    @property
    def num_features(self) -> int:
        return self.layout.num_features

    @property
    def total_dim(self) -> int:
        """Width of the pooled output: every feature's table's D."""
        return sum(self.tables[t][1] for t in self.feature_tables)

    @property
    def variable_batch(self) -> Optional[VariableBatch]:
        """The VBE layout of the batch (tbe.layout), None for a fixed batch."""
        return VariableBatch(self.batch_size_per_feature, self.layout.feature_dims) if self.vbe else None

    @property
    def num_bags(self) -> int:
        return sum(self.batch_sizes)

    @property
    def output_size(self) -> int:
        """Entries of the output (and of each upstream gradient): sum B_f * D_f."""
        return sum(b * self.tables[t][1] for b, t in zip(self.batch_sizes, self.feature_tables))

    @property
    def spec(self) -> "CaseSpec":
        return self

    @property
    def subs(self) -> tuple["CaseSpec", ...]:
        return (self,)

    def size(self) -> tuple[int, int, int]:
        return self.num_tables, self.num_bags, self.expected_lookups()

    def with_modes(self, **fields: Any) -> "CaseSpec":
        return dataclasses.replace(self, **fields)

    def reseeded(self, shift: int) -> "CaseSpec":
        return dataclasses.replace(self, seed=self.seed + shift)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(pooling=self.pooling.value, optimizer=self.optimizer.value, bounds_check=self.bounds_check.value)
        d["tables"] = [list(t) for t in self.tables]
        d["hot_rows"] = [dataclasses.asdict(h) for h in self.hot_rows]
        d["feature_table_map"] = list(self.feature_table_map)
        if not self.feature_table_map:  # the identity: records (and their hashes) stay as before the field
            del d["feature_table_map"]
        if self.batch_size_per_feature is None:  # a fixed batch: records stay as before the field
            del d["batch_size_per_feature"]
        else:
            d["batch_size_per_feature"] = list(self.batch_size_per_feature)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CaseSpec":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"CaseSpec has no field {sorted(unknown)[0]!r}")
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def expected_lookups(self) -> int:
        """Upper estimate of the batch's lookups, for budgeting before materializing."""
        hot = sum(h.count for h in self.hot_rows)
        return self.num_bags * (0 if self.length_profile == "empty" else self.max_length) + hot


def multi_step_rate(learning_rate: float, longest: int, steps: int) -> float:
    """The learning rate a ``steps``-step case may use: after the first update a row can move by
    about ``learning_rate`` per lookup of its run, and the next step's forward sums ``longest`` such
    rows, so from two steps on the rate is capped at 8 / longest (fp16's 65,504 stays far away)."""
    return learning_rate if steps <= 1 else min(learning_rate, 8.0 / max(1, longest))


def with_rate_and_steps(spec: CaseSpec, learning_rate: float, steps: int) -> CaseSpec:
    """``spec`` running ``steps`` steps at ``learning_rate``, capped by ``multi_step_rate`` for its longest run
    (its longest hot row or bag)."""
    longest = max([h.count for h in spec.hot_rows] + [spec.max_length, 1])
    return dataclasses.replace(spec, learning_rate=multi_step_rate(learning_rate, longest, steps), steps=steps)


@dataclasses.dataclass
class Case:
    """A materialized spec: the batch and the upstream gradients of every step, on the device it was drawn for."""

    spec: CaseSpec
    indices: torch.Tensor
    offsets: torch.Tensor
    per_sample_weights: Optional[torch.Tensor]
    grad_outputs: list[torch.Tensor]

    @property
    def num_lookups(self) -> int:
        return self.indices.numel()

    def segment_lengths(self) -> torch.Tensor:
        """SL of every run (distinct (table, row), over every feature that reads the table) in the batch."""
        layout = self.spec.layout
        cs = torch.tensor([layout.hash_size_cumsum[t] for t in layout.feature_tables], dtype=torch.int64)
        feature_of = lookup_features(self.spec, self.offsets.cpu(), self.num_lookups)
        lin = cs[feature_of].to(self.indices.device) + self.indices.to(torch.int64)
        return torch.unique(lin, return_counts=True)[1]


def lookup_features(spec: CaseSpec, offsets: torch.Tensor, num_lookups: int) -> torch.Tensor:
    """The feature of every lookup of ``spec``'s valid batch (``offsets``' device): feature f's bags are the
    ``batch_sizes[f]`` after the features before it."""
    off = offsets.to(torch.int64)
    base = torch.tensor(list(itertools.accumulate(spec.batch_sizes, initial=0)), dtype=torch.int64, device=off.device)
    return torch.repeat_interleave(torch.arange(spec.num_features, device=off.device), off[base[1:]] - off[base[:-1]],
                                   output_size=num_lookups)


def _bag_lengths(spec: CaseSpec, g: torch.Generator) -> torch.Tensor:
    """[F, B] bag lengths (F features) before hot rows are added, from the spec's profile; under VBE, B = max B_f
    and feature f's bags are its row's first B_f (``_flat_lengths``)."""
    T, B, m = spec.num_features, spec.batch_size, spec.max_length
    if spec.length_profile == "empty" or m == 0:
        return torch.zeros(T, B, dtype=torch.int64)
    if spec.length_profile == "fixed":
        return torch.full((T, B), m, dtype=torch.int64)
    if spec.length_profile == "uniform":
        return torch.randint(0, m + 1, (T, B), generator=g)
    u = torch.rand(T, B, generator=g, dtype=torch.float64)
    if spec.length_profile == "log_uniform":
        return torch.floor(torch.exp(u * math.log(m + 1))).to(torch.int64) - 1 + (u > 0.5).to(torch.int64)
    # zipf-like: most bags short, a tail of long ones
    return torch.clamp(torch.floor(1.0 / (1.0 - u * 0.999) ** 1.2), 0, m).to(torch.int64)


def _draw_ids(rows: int, n: int, skew: float, exclude: list[int], g: torch.Generator,
              device: torch.device) -> torch.Tensor:
    """``n`` ids in [0, rows) on ``device``, avoiding ``exclude`` (hot rows keep their exact counts)."""
    if n == 0:
        return torch.zeros(0, dtype=torch.int64, device=device)
    allowed = rows - len(exclude)
    if allowed <= 0:
        raise ValueError(f"no rows left for ordinary ids: {rows} rows, all hot")
    if skew > 0:
        # Zipf over ranks on at most 2^20 candidates: rank r has weight r^-skew
        k = min(allowed, 1 << 20)
        ranks = draws.categorical(torch.arange(1, k + 1, dtype=torch.float64).pow(-skew), n, g, device)
        # spread ranks over the table with a seeded affine map so hot ids are not all near 0
        stride = int(torch.randint(1, max(2, allowed), (1,), generator=g))
        while math.gcd(stride, allowed) != 1:
            stride += 1
        ids = (ranks * stride) % allowed
    else:
        ids = draws.integers(0, allowed, n, g, device)
    for h in sorted(exclude):  # map [0, allowed) onto [0, rows) minus the excluded rows
        ids = ids + (ids >= h).to(torch.int64)
    return ids


def _place_hot(spec: CaseSpec, table: int, hot: list[HotRow], lengths: torch.Tensor, hot_of: dict,
               g: torch.Generator, dev: torch.device) -> None:
    """Put table ``table``'s hot occurrences in bags chosen at random among the bags of every feature reading
    it (so duplicates also fall within a bag, and a shared table's hot row spans features): its readers' hot
    ids into ``hot_of``, their bags' lengths grown."""
    readers = [f for f, t in enumerate(spec.feature_tables) if t == table]
    sizes = [spec.batch_sizes[f] for f in readers]
    start = list(itertools.accumulate(sizes, initial=0))
    hot_ids = torch.cat([torch.full((h.count,), h.row, dtype=torch.int64, device=dev) for h in hot])
    where = draws.integers(0, start[-1], hot_ids.numel(), g, dev)
    for j, f in enumerate(readers):
        mine = (where >= start[j]) & (where < start[j + 1])
        hot_of[f] = hot_ids[mine]
        lengths[f, :sizes[j]] += torch.bincount(where[mine] - start[j], minlength=sizes[j])


def materialize(spec: CaseSpec, device: Optional[torch.device | str] = None) -> Case:
    """Build the batch for ``spec`` deterministically, on ``device`` (default the CPU): small draws come from
    the spec's CPU generator, large ones (``tbe.draws``) run on the device, with the same values everywhere."""
    dev = draws.device_or_cpu(device)
    g = torch.Generator().manual_seed(spec.seed)
    T, B = spec.num_features, spec.batch_size
    lengths = _bag_lengths(spec, g).to(dev)
    if spec.vbe:  # bags past a feature's B_f hold nothing
        lengths *= (torch.arange(B, device=dev)[None, :] < torch.tensor(spec.batch_sizes, device=dev)[:, None])
    per_table_ids = []
    hot_of: dict[int, torch.Tensor] = {}  # feature -> the hot ids placed in its bags
    for f, t in enumerate(spec.feature_tables):
        rows = spec.tables[t][0]
        hot = [h for h in spec.hot_rows if h.table == t]
        if B == 0:
            per_table_ids.append(torch.zeros(0, dtype=torch.int64, device=dev))
            continue
        if hot and f not in hot_of:
            _place_hot(spec, t, hot, lengths, hot_of, g, dev)
        hot_ids = hot_of.get(f)
        n = int(lengths[f].sum())
        n_plain = n - (0 if hot_ids is None else hot_ids.numel())
        plain = _draw_ids(rows, n_plain, spec.id_skew, sorted({h.row for h in hot}), g, dev)
        ids = plain if hot_ids is None else torch.cat([plain, hot_ids])
        if hot_ids is not None or n <= draws.SMALL:  # i.i.d. ids need no shuffle; small draws stay as they were
            ids = ids[draws.permutation(n, g, dev)]
        per_table_ids.append(ids)
    idx_dtype = spec.index_dtype.torch
    indices = torch.cat(per_table_ids).to(idx_dtype)
    flat = lengths.reshape(-1) if not spec.vbe else \
        torch.cat([lengths[f, :b] for f, b in enumerate(spec.batch_sizes)] + [lengths.new_zeros(0)])
    offsets = torch.zeros(flat.numel() + 1, dtype=torch.int64, device=dev)
    offsets[1:] = torch.cumsum(flat, 0)
    offsets = offsets.to(idx_dtype)
    out_dtype = spec.output_dtype.torch
    if spec.values == "dyadic":
        psw = dyadic_psw(spec, offsets, g, spec.pooling == "mean") if spec.weighted else None
        return Case(spec, indices.contiguous(), offsets.contiguous(), psw, dyadic_grads(spec, g, out_dtype, dev))
    psw = None
    if spec.weighted:
        # distinct, sign-mixed weights so any mis-pairing of weights to lookups changes the result
        psw = (draws.uniform(indices.numel(), g, device=dev) * 1.5 + 0.25) * torch.where(
            draws.uniform(indices.numel(), g, device=dev) < 0.2, -1.0, 1.0
        )
    total_dim = spec.total_dim
    if spec.vbe:  # flat: feature f's [B_f, D_f] block after the one before
        grads = [draws.normal(spec.output_size, g, dev).to(out_dtype) for _ in range(spec.steps)]
    else:
        grads = [draws.normal(B * total_dim, g, dev).view(B, total_dim).to(out_dtype) for _ in range(spec.steps)]
    return Case(spec, indices.contiguous(), offsets.contiguous(), psw, grads)
