"""KernelConfig: every tunable of the Triton TBE in one frozen, JSON-serialisable record.

Tier thresholds, chunk size, gather widths, grid multipliers, dimension buckets and the
fence/fusion switches live here and nowhere else, so a config change is a file diff that
the fuzz gate can check. ``faults`` plants known bugs and is refused outside tests and
the fuzz driver (see ``tbe.faults``).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from pathlib import Path
from typing import Any

from tbe import faults as _faults
from tbe.modes import IndexDtype

INDEX_DTYPE_CHOICES = ("auto", *IndexDtype)  # "auto": int32 where the ids and offsets fit


def _check_bucket_entries(name: str, entries, parts: tuple[str, ...]) -> None:
    """A per-bucket field: entries of len(parts) powers of two, the first (BLOCK_D) named once."""
    seen = set()
    for entry in entries:
        if len(entry) != len(parts) or any(v < 1 or v & (v - 1) for v in entry):
            raise ValueError(f"KernelConfig.{name} entries must be {len(parts)} powers of two "
                             f"({', '.join(parts)}), got {entry}")
        if entry[0] in seen:
            raise ValueError(f"KernelConfig.{name} names BLOCK_D={entry[0]} twice")
        seen.add(entry[0])


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    # forward, generic gather
    fwd_bags_per_program: int = 4
    fwd_gather_unweighted: int = 8
    fwd_gather_weighted: int = 8
    fwd_num_warps: int = 4
    # per dimension bucket: (BLOCK_D, gather, bags per program, warps) replacing the three above for
    # unweighted and weighted launches of that bucket (the best tile differs with the row width);
    # the defaults are the fastest by device time of sweeps on the H200 (benchmarks/results/sweep_*_h200.jsonl)
    fwd_bucket_tiles: tuple[tuple[int, int, int, int], ...] = ((64, 16, 4, 1), (128, 8, 4, 1), (256, 2, 4, 1))
    # a generic forward whose mean bag length (lookups over bags, known on the host) reaches this pools one bag a
    # program, at the tile's specialization: long bags keep a program busy alone, short ones share it; 0: never
    fwd_one_bag_pooling: int = 32
    # forward, small-table path (counts + tl.dot); small_table_histogram_ids: the ids of each bag one step counts
    small_table_path: bool = True
    small_table_max_rows: int = 64
    small_table_min_dim: int = 64
    small_table_max_dim: int = 128
    small_table_min_pooling: int = 64
    small_table_bags_per_program: int = 16
    small_table_histogram_ids: int = 16
    # the backward of a step whose forward counted: counts^T @ d_out per program, no transpose (off: the tiers)
    small_table_backward: bool = True
    # bounds check: ids per block of the standalone id check and of the offsets repair kernel
    fused_bounds_check: bool = False
    bounds_check_block: int = 256
    # backward: transpose
    hoist_transpose: bool = False
    index_dtype: str = "auto"
    # backward: routing and tiers
    long_run_threshold: int = 64
    chunk_size: int = 256
    bwd_short_gather_unweighted: int = 8
    bwd_short_gather_weighted: int = 16
    bwd_long_gather: int = 16
    bwd_short_num_warps: int = 1
    # short runs per program of the narrow short tier (1: one run at a time, a gather of GATHER rows;
    # more: that many runs side by side as one [runs, BLOCK_D] tile, one row of each per step)
    bwd_short_runs_per_program: int = 2
    # per dimension bucket: (BLOCK_D, runs) replacing bwd_short_runs_per_program for that bucket's rows; four in the
    # 64 bucket (its uniform and Zipf 1.1 batches gain; four in the 128 and 256 buckets slow skewed ones and fp16
    # D=256: benchmarks/results/production_h100.md)
    bwd_short_bucket_runs: tuple[tuple[int, int], ...] = ((64, 4),)
    bwd_long_num_warps: int = 4
    # software-pipeline depth of the long tier's gather loop: 1 loads each gather when it is summed; 2 or 3 keep the
    # next gathers' bags and rows in flight meanwhile (Triton's loop pipelining, cp.async into shared memory on sm_90)
    bwd_long_stages: int = 1
    # the two-kernel long tier reads gradient rows in 16-byte vectors where the layout allows
    # (``tbe.layout.row_vector``) and keeps a [gather, D] block of sums, reduced across the gathers once per chunk
    # instead of once per gather
    bwd_long_vector: bool = True
    # workspace rows (chunk partials) the two-kernel tier's apply kernel loads and sums a step: a run of N chunks
    # takes N / this many dependent steps, so the hottest row's run sets the kernel's length
    bwd_apply_parts: int = 32
    classify_block: int = 1024
    short_grid_multiplier: int = 256
    long_grid_multiplier: int = 16
    # fused long tier: last chunk applies the update after a fence and a countdown
    fused_long_tier: bool = False
    fused_long_min_lookups: int = 0
    fence: bool = True
    # column blocks: launches are bucketed by next_pow2(D) up to this width, wider rows loop
    dim_buckets: tuple[int, ...] = (8, 16, 32, 64, 128, 256)
    # round each updated fp16 or bf16 weight to one of its two neighbours in the weights' dtype, with probability by
    # distance (``tbe.rounding``); fp32 weights have nothing to round and ignore it
    stochastic_rounding: bool = False
    # planted bugs, for proving the fuzzers' power; refused outside tests and the fuzz driver
    faults: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "dim_buckets", tuple(int(x) for x in self.dim_buckets))
        object.__setattr__(self, "faults", tuple(str(x) for x in self.faults))
        object.__setattr__(self, "fwd_bucket_tiles", tuple(tuple(int(v) for v in e) for e in self.fwd_bucket_tiles))
        object.__setattr__(self, "bwd_short_bucket_runs",
                           tuple(tuple(int(v) for v in e) for e in self.bwd_short_bucket_runs))
        self.validate()

    # -- validation -------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ValueError naming the first field whose value makes no sense."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", int):
                if isinstance(value, bool) or not isinstance(value, int):
                    raise TypeError(f"KernelConfig.{f.name} must be an int, got {value!r}")
                minimum = 0 if f.name in ("fused_long_min_lookups", "fwd_one_bag_pooling") else 1
                if value < minimum:
                    raise ValueError(f"KernelConfig.{f.name} must be >= {minimum}, got {value}")
            elif f.type in ("bool", bool):
                if not isinstance(value, bool):
                    raise TypeError(f"KernelConfig.{f.name} must be a bool, got {value!r}")
        pow2 = (
            "fwd_gather_unweighted", "fwd_gather_weighted", "bwd_short_gather_unweighted",
            "bwd_short_gather_weighted", "bwd_long_gather", "classify_block",
            "fwd_num_warps", "bwd_short_num_warps", "bwd_long_num_warps",
            "small_table_bags_per_program", "small_table_histogram_ids", "bounds_check_block",
            "bwd_short_runs_per_program", "bwd_apply_parts",
        )
        for name in pow2:
            value = getattr(self, name)
            if value & (value - 1):
                raise ValueError(f"KernelConfig.{name} must be a power of two, got {value}")
        if not self.dim_buckets:
            raise ValueError("KernelConfig.dim_buckets must not be empty")
        for b in self.dim_buckets:
            if b < 1 or b & (b - 1):
                raise ValueError(f"KernelConfig.dim_buckets entries must be powers of two, got {b}")
        if list(self.dim_buckets) != sorted(set(self.dim_buckets)):
            raise ValueError(f"KernelConfig.dim_buckets must be strictly increasing, got {self.dim_buckets}")
        _check_bucket_entries("fwd_bucket_tiles", self.fwd_bucket_tiles, ("BLOCK_D", "gather", "bags", "warps"))
        _check_bucket_entries("bwd_short_bucket_runs", self.bwd_short_bucket_runs, ("BLOCK_D", "runs"))
        if self.index_dtype not in INDEX_DTYPE_CHOICES:
            raise ValueError(f"KernelConfig.index_dtype must be one of {INDEX_DTYPE_CHOICES}, got {self.index_dtype!r}")
        if self.small_table_min_dim > self.small_table_max_dim:
            raise ValueError(
                f"KernelConfig.small_table_min_dim ({self.small_table_min_dim}) exceeds "
                f"small_table_max_dim ({self.small_table_max_dim})"
            )
        _faults.check_allowed(self.faults)

    # -- convenience --------------------------------------------------------------------
    def has_fault(self, name: str) -> bool:
        return name in self.faults

    def forward_tile(self, block_d: int, weighted: bool) -> tuple[int, int, int]:
        """(gather, bags per program, warps) of the generic forward for one dimension bucket."""
        for b, gather, bags, warps in self.fwd_bucket_tiles:
            if b == block_d:
                return gather, bags, warps
        gather = self.fwd_gather_weighted if weighted else self.fwd_gather_unweighted
        return gather, self.fwd_bags_per_program, self.fwd_num_warps

    def short_runs(self, block_d: int) -> int:
        """Short runs one program of the narrow short tier takes side by side in bucket ``block_d`` (1: the
        one-run gather kernel)."""
        for b, runs in self.bwd_short_bucket_runs:
            if b == block_d:
                return runs
        return self.bwd_short_runs_per_program

    def most_short_runs(self) -> int:
        """The most short runs a program of any bucket takes side by side."""
        return max(self.short_runs(b) for b in self.dim_buckets)

    def forward_bags(self, tile_bags: int, num_indices: int, num_bags: int) -> int:
        """Bags one generic forward program pools: one where the mean bag length reaches ``fwd_one_bag_pooling``,
        else the tile's (its ``BAGS``, the most a program of that specialization pools)."""
        if self.fwd_one_bag_pooling and num_indices >= self.fwd_one_bag_pooling * max(num_bags, 1):
            return 1
        return tile_bags

    def replace(self, **changes: Any) -> "KernelConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["dim_buckets"] = list(self.dim_buckets)
        d["faults"] = list(self.faults)
        d["fwd_bucket_tiles"] = [list(e) for e in self.fwd_bucket_tiles]
        d["bwd_short_bucket_runs"] = [list(e) for e in self.bwd_short_bucket_runs]
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "KernelConfig":
        if not isinstance(data, dict):
            raise TypeError(f"KernelConfig JSON must be an object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            close = difflib.get_close_matches(unknown[0], known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(known))}"
            raise ValueError(f"KernelConfig has no field {unknown[0]!r} ({hint})")
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "KernelConfig":
        return cls.from_dict(json.loads(text))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> "KernelConfig":
        return cls.from_json(Path(path).read_text())

    def diff(self, other: "KernelConfig") -> dict[str, tuple[Any, Any]]:
        """Fields whose values differ, as name -> (self, other)."""
        a, b = self.to_dict(), other.to_dict()
        return {k: (a[k], b[k]) for k in a if a[k] != b[k]}
