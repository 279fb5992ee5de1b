"""Workloads the performance gate and the tuner time: named shapes, presets, and their batches.

A ``PerfShape`` is one table and one batch recipe. Ids come from one of three recipes:
uniform or Zipf-skewed over the rows (the realistic shapes, which ``benchmarks/bench_tbe.py`` times too),
or a segment-length band, where every distinct row is read a number of times drawn from
[lo, hi], so the backward's short tier, its edge and the long tier each get a shape of their
own; ``hot`` adds one row read that many times (a run split into thousands of chunks).

Presets: ``bands`` (one shape per segment-length band plus the hot row), ``bench`` (the shapes the
benchmarks time, with this batch recipe and ``fuzz.gate.timing.build_module``: 5.2M lookups over 20M rows), ``bench-lite`` (the same shapes at 2M rows
and 1.3M lookups), ``quick`` (bands and bench-lite: the gate's default). A JSON file holding a
list of shape objects (the fields below; ``band`` as [lo, hi]) is accepted wherever a preset is.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Optional

import torch

from tbe.modes import FLOAT_NAMES, parse_float_dtype

WEIGHT_DTYPES = {name: parse_float_dtype("weights_dtype", name) for name in FLOAT_NAMES}
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

    def __post_init__(self) -> None:
        if self.band is not None:
            object.__setattr__(self, "band", tuple(int(x) for x in self.band))
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the shape and the field that makes no sense."""
        def bad(field: str, why: str) -> ValueError:
            return ValueError(f"shape {self.name!r}: {field} {why}")

        for field in ("rows", "dim", "bags", "pooling"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise bad(field, f"must be a positive integer, got {value!r}")
        if self.weights_dtype not in WEIGHT_DTYPES:
            raise bad("weights_dtype", f"must be one of {sorted(WEIGHT_DTYPES)}, got {self.weights_dtype!r}")
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
    def lookups(self) -> int:
        return self.bags * self.pooling

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["band"] = None if self.band is None else list(self.band)
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

PRESETS: dict[str, list[PerfShape]] = {
    "bands": BANDS,
    "bench": _bench(20_000_000, 262_144),
    "bench-lite": _bench(2_000_000, 65_536, "-lite"),
}
PRESETS["quick"] = PRESETS["bands"] + PRESETS["bench-lite"]


def load_shapes(text: str) -> list[PerfShape]:
    """A preset name or a JSON file of shape objects; errors name the preset, file or shape."""
    if text in PRESETS:
        return list(PRESETS[text])
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
    """The ``shape.lookups`` ids of the batch, bag after bag (deterministic in shape and seed)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    n, rows = shape.lookups, shape.rows
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
    offsets = torch.arange(0, shape.lookups + 1, shape.pooling, dtype=torch.int64, device=device)
    g = torch.Generator(device="cpu").manual_seed(seed + 1)
    psw = (torch.rand(shape.lookups, generator=g) + 0.5).to(device) if shape.weighted else None
    grad = torch.randn(shape.bags, shape.dim, generator=g).to(device)
    return Workload(shape, ids, offsets, psw, grad)


def segment_lengths(ids: torch.Tensor) -> torch.Tensor:
    """SL of every distinct row of a one-table batch."""
    return torch.unique(ids, return_counts=True)[1]
