"""Workloads the performance gate and the tuner time: named shapes, presets, and their batches.

A ``PerfShape`` is a set of tables and one batch recipe: ``tables`` tables of ``rows`` rows (D ``dim``, or
``dims`` cycled over the tables), ``bags`` bags each, of ``pooling`` lookups (``lengths="variable"``: 1 to
2 x pooling - 1, mean ``pooling``), output in ``output_dtype``. Ids come from one of three recipes:
uniform or Zipf-skewed over the rows (the realistic shapes, which ``benchmarks/bench_tbe.py`` times too),
or a segment-length band, where every distinct row is read a number of times drawn from
[lo, hi], so the backward's short tier, its edge and the long tier each get a shape of their
own; ``hot`` adds one row read that many times (a run split into thousands of chunks).

Presets: ``bands`` (one shape per segment-length band plus the hot row), ``production`` (several tables,
bag lengths 1 to 200, fixed and variable, mixed D, fp16 weights with fp32 output, a small hot table), ``bench`` (the shapes the
benchmarks time, with this batch recipe and ``fuzz.gate.timing.build_module``: 5.2M lookups over 20M rows), ``bench-lite`` (the same shapes at 2M rows
and 1.3M lookups), ``quick`` (bands and bench-lite: the gate's default). A JSON file holding a
list of shape objects (the fields below; ``band`` as [lo, hi]) is accepted wherever a preset is, and so is a
comma-separated list of presets.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any, Optional

import torch

from tbe.modes import FloatDtype

LENGTHS = ("fixed", "variable")

OPTIMIZERS = ("exact_sgd", "exact_rowwise_adagrad")


@dataclasses.dataclass(frozen=True)
class PerfShape:
    name: str
    rows: int
    dim: int
    weights_dtype: str = "fp32"
    bags: int = 65_536
    pooling: int = 20                       # lookups per bag (every bag has this many)
    skew: float = 0.0                       # Zipf exponent over rows; 0 = uniform ids
    band: Optional[tuple[int, int]] = None  # every distinct row read lo..hi times (replaces skew)
    hot: int = 0                            # one row read this many times, inside the bags' lookups
    weighted: bool = False
    optimizer: str = "exact_rowwise_adagrad"
    tables: int = 1                         # tables of ``rows`` rows each, ids drawn within each by the recipe
    dims: tuple[int, ...] = ()              # D of table t: dims[t % len(dims)] (empty: every table ``dim``)
    lengths: str = "fixed"                  # "variable": bag lengths 1 .. 2 * pooling - 1, mean ``pooling``
    output_dtype: str = "fp32"

    def __post_init__(self) -> None:
        if self.band is not None:
            object.__setattr__(self, "band", tuple(int(x) for x in self.band))
        object.__setattr__(self, "dims", tuple(self.dims))
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the shape and the field that makes no sense."""
        def bad(field: str, why: str) -> ValueError:
            return ValueError(f"shape {self.name!r}: {field} {why}")

        for field in ("rows", "dim", "bags", "pooling", "tables"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise bad(field, f"must be a positive integer, got {value!r}")
        for d in self.dims:
            if isinstance(d, bool) or not isinstance(d, int) or d < 1:
                raise bad("dims", f"must hold positive integers, got {list(self.dims)}")
        for field in ("weights_dtype", "output_dtype"):
            if getattr(self, field) not in tuple(FloatDtype):
                raise bad(field, f"must be one of {[d.value for d in FloatDtype]}, got {getattr(self, field)!r}")
        if self.lengths not in LENGTHS:
            raise bad("lengths", f"must be one of {LENGTHS}, got {self.lengths!r}")
        if self.tables > 1 and (self.band is not None or self.hot):
            raise bad("tables", f"must be 1 with band or hot (their recipes read one table), got {self.tables}")
        if self.optimizer not in OPTIMIZERS:
            raise bad("optimizer", f"must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if not 0 <= self.hot <= self.lookups:
            raise bad("hot", f"must be in [0, bags * pooling = {self.lookups}], got {self.hot}")
        if self.skew < 0 or (0 < self.skew <= 1):
            raise bad("skew", f"must be 0 (uniform) or a Zipf exponent > 1, got {self.skew}")
        if self.band is not None:
            lo, hi = self.band
            if not (len(self.band) == 2 and 1 <= lo <= hi):
                raise bad("band", f"must be [lo, hi] with 1 <= lo <= hi, got {list(self.band)}")
            if (self.lookups - self.hot) // lo >= self.rows:
                raise bad("band", f"needs more distinct rows than the table's {self.rows}")

    @property
    def specs(self) -> list[tuple[int, int]]:
        """(rows, D) of every table."""
        return [(self.rows, self.dims[t % len(self.dims)] if self.dims else self.dim) for t in range(self.tables)]

    @functools.cached_property
    def bag_lengths(self) -> torch.Tensor:
        """Lookups of every bag, table after table (CPU int64): ``pooling`` each, or a spread with that mean."""
        n = self.tables * self.bags
        if self.lengths == "fixed":
            return torch.full((n,), self.pooling, dtype=torch.int64)
        span = 2 * self.pooling - 1  # lengths 1 .. span, each equally often over a period of span bags
        return 1 + (torch.arange(n, dtype=torch.int64) * _coprime_step(span)) % span

    @property
    def lookups(self) -> int:
        if self.lengths == "fixed":
            return self.tables * self.bags * self.pooling
        return int(self.bag_lengths.sum())

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["band"] = None if self.band is None else list(self.band)
        d["dims"] = list(self.dims)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PerfShape":
        if not isinstance(d, dict):
            raise ValueError(f"a shape must be a JSON object, got {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"shape {d.get('name', '?')!r}: unknown field {unknown[0]!r} (known: {sorted(known)})")
        if "name" not in d or "rows" not in d or "dim" not in d:
            raise ValueError(f"shape {d.get('name', '?')!r}: name, rows and dim are required")
        return cls(**d)


def _coprime_step(span: int) -> int:
    """A stride coprime to ``span``, so bag j's length 1 + (j * stride) % span visits every length in turn."""
    import math

    step = 2_654_435_761 % span or 1
    while math.gcd(step, span) != 1:
        step += 1
    return step


def _bench(rows: int, bags: int, suffix: str = "") -> list[PerfShape]:
    """The realistic shapes: uniform ids at D 128, 64 and 256 (fp16), Zipf 1.1, weighted, exact SGD."""
    return [
        PerfShape(f"D128-fp32-uniform{suffix}", rows, 128, "fp32", bags),
        PerfShape(f"D64-fp32-uniform{suffix}", rows, 64, "fp32", bags),
        PerfShape(f"D256-fp16-uniform{suffix}", rows, 256, "fp16", bags),
        PerfShape(f"D128-fp32-zipf1.1{suffix}", rows, 128, "fp32", bags, skew=1.1),
        PerfShape(f"D128-fp32-weighted{suffix}", rows, 128, "fp32", bags, weighted=True),
        PerfShape(f"D128-fp32-sgd{suffix}", rows, 128, "fp32", bags, optimizer="exact_sgd"),
    ]


# segment-length bands of the backward: single lookups, short runs, runs up to the long threshold,
# long runs, and one run above a million lookups (thousands of chunks on one row)
BANDS = [
    PerfShape("SL1-3", 4_000_000, 128, bags=65_536, band=(1, 3)),
    PerfShape("SL4-31", 4_000_000, 128, bags=65_536, band=(4, 31)),
    PerfShape("SL32-255", 4_000_000, 128, bags=65_536, band=(32, 255)),
    PerfShape("SL256-4096", 4_000_000, 128, bags=65_536, band=(256, 4096)),
    PerfShape("hot-1.2M", 4_000_000, 128, bags=65_536, band=(1, 3), hot=1_200_000),
]

# what production batches look like (8 tables x 1M rows, B 16,384, 40 lookups a bag is TorchRec's anchor shape):
# bag lengths 1, 8, 40 and 200, fixed and variable, 8 to 64 tables, mixed D, fp16 weights read into fp32
# output, and a small hot table (the small-table forward's shape)
PRODUCTION = [
    PerfShape("T8-D128-L40", 1_000_000, 128, bags=16_384, pooling=40, tables=8),
    PerfShape("T8-D128-L40-fp16", 1_000_000, 128, "fp16", bags=16_384, pooling=40, tables=8),
    PerfShape("T8-D128-L1", 1_000_000, 128, bags=65_536, pooling=1, tables=8),
    PerfShape("T8-D128-L8-var", 1_000_000, 128, bags=32_768, pooling=8, tables=8, lengths="variable"),
    PerfShape("T8-D128-L40-var", 1_000_000, 128, bags=16_384, pooling=40, tables=8, lengths="variable"),
    PerfShape("T8-D128-L200", 1_000_000, 128, bags=4_096, pooling=200, tables=8),
    PerfShape("T64-mixedD-L8-var", 250_000, 128, bags=4_096, pooling=8, tables=64, dims=(64, 128, 256),
              lengths="variable"),
    PerfShape("T32-mixedD-fp16-L40", 500_000, 128, "fp16", bags=4_096, pooling=40, tables=32, dims=(64, 128, 256)),
    PerfShape("small-E64-D64-fp16-L64", 64, 64, "fp16", bags=16_384, pooling=64),
]

PRESETS: dict[str, list[PerfShape]] = {
    "bands": BANDS,
    "production": PRODUCTION,
    "bench": _bench(20_000_000, 262_144),
    "bench-lite": _bench(2_000_000, 65_536, "-lite"),
}
PRESETS["quick"] = PRESETS["bands"] + PRESETS["bench-lite"]


def load_shapes(text: str) -> list[PerfShape]:
    """A preset name, comma-separated preset names, or a JSON file of shape objects; errors name the preset, file
    or shape."""
    if text in PRESETS:
        return list(PRESETS[text])
    if "," in text:
        shapes = [s for part in text.split(",") for s in load_shapes(part.strip())]
        names = [s.name for s in shapes]
        if len(set(names)) != len(names):
            raise ValueError(f"{text!r}: shape names must be unique across the sets, got {names}")
        return shapes
    path = Path(text)
    if not path.is_file():
        raise ValueError(f"{text!r} is neither a shape preset ({', '.join(sorted(PRESETS))}) nor a file")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{text!r} is not valid JSON ({e})") from None
    if isinstance(data, dict) and "shapes" in data:
        data = data["shapes"]
    if not isinstance(data, list) or not data:
        raise ValueError(f"{text!r} must hold a non-empty list of shapes")
    try:
        shapes = [PerfShape.from_dict(d) for d in data]
    except TypeError as e:
        raise ValueError(f"{text!r}: {e}") from None
    names = [s.name for s in shapes]
    if len(set(names)) != len(names):
        raise ValueError(f"{text!r}: shape names must be unique, got {names}")
    return shapes


# ----------------------------------------------------------------------------- batches
def _distinct_rows(count: int, rows: int, g: torch.Generator, device) -> torch.Tensor:
    """``count`` distinct rows spread over the table (an affine map with a stride coprime to ``rows``)."""
    import math

    stride = 2_654_435_761 % rows or 1
    while math.gcd(stride, rows) != 1:
        stride += 1
    start = int(torch.randint(0, rows, (1,), generator=g))
    return (torch.arange(count, dtype=torch.int64, device=device) * stride + start) % rows


def make_ids(shape: PerfShape, device, seed: int = 0) -> torch.Tensor:
    """The ``shape.lookups`` ids of the batch, bag after bag and table after table, each id local to its table
    (deterministic in shape and seed)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    if shape.tables == 1:
        return _table_ids(shape, shape.lookups, g, device)
    per_table = shape.bag_lengths.view(shape.tables, shape.bags).sum(1).tolist()
    return torch.cat([_table_ids(shape, n, g, device) for n in per_table])


def _table_ids(shape: PerfShape, n: int, g: torch.Generator, device) -> torch.Tensor:
    """``n`` ids of one table by the shape's recipe, in a random order."""
    rows = shape.rows
    plain = n - shape.hot
    if shape.band is not None:
        lo, hi = shape.band
        lengths = torch.randint(lo, hi + 1, (plain // lo + 1,), generator=g)
        cut = int(torch.searchsorted(torch.cumsum(lengths, 0), torch.tensor(plain)))
        lengths = lengths[: cut + 1]
        lengths[-1] -= int(lengths.sum()) - plain  # the last run takes what is left (may fall below lo)
        distinct = _distinct_rows(lengths.numel() + 1, rows, g, device)
        ids = torch.repeat_interleave(distinct[1:], lengths.to(device))
        hot_row = distinct[:1]
    elif shape.skew > 0:
        u = torch.rand(plain, generator=g, dtype=torch.float64)
        ranks = torch.floor((1 - u) ** (-1 / (shape.skew - 1))).to(torch.int64) - 1
        ids = ((ranks * 2_654_435_761) % rows).to(device)
        hot_row = torch.zeros(1, dtype=torch.int64, device=device)
    else:
        ids = torch.randint(0, rows, (plain,), generator=g).to(device)
        hot_row = torch.zeros(1, dtype=torch.int64, device=device)
    if shape.hot:
        ids = torch.cat([ids, hot_row.expand(shape.hot)])
    perm = torch.randperm(n, generator=g).to(device)
    return ids[perm].contiguous()


@dataclasses.dataclass
class Workload:
    """A shape's batch on the device: ids, offsets, per-sample weights (or None), upstream gradient."""

    shape: PerfShape
    indices: torch.Tensor
    offsets: torch.Tensor
    per_sample_weights: Optional[torch.Tensor]
    grad: torch.Tensor


def make_workload(shape: PerfShape, device, seed: int = 0) -> Workload:
    ids = make_ids(shape, device, seed)
    zero = torch.zeros(1, dtype=torch.int64)
    offsets = torch.cat([zero, torch.cumsum(shape.bag_lengths, 0)]).to(device)
    g = torch.Generator(device="cpu").manual_seed(seed + 1)
    psw = (torch.rand(shape.lookups, generator=g) + 0.5).to(device) if shape.weighted else None
    grad = torch.randn(shape.bags, sum(d for _, d in shape.specs), generator=g).to(device)
    return Workload(shape, ids, offsets, psw, grad)


def segment_lengths(ids: torch.Tensor) -> torch.Tensor:
    """SL of every distinct row of a one-table batch."""
    return torch.unique(ids, return_counts=True)[1]
