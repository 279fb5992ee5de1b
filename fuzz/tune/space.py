"""What ``tbe-fuzz tune`` searches: KernelConfig fields, their candidate values, and starting hints.

Only fields the timed shapes can show are searched: forward gathers, bags and warps (and a
per-bucket tile for every BLOCK_D the shapes use), the short tier's gathers, warps, runs per
program (also per bucket, for every BLOCK_D the shapes use) and grid, the long tier's gather,
warps and grid, the routing threshold, chunk size, classification block, the fused long tier,
the hoisted transpose and the dimension buckets.
The weighted gathers are searched only when a shape is weighted. Small-table, bounds-check
and index-width fields stay at the baseline's values (the shapes never reach them), and so
do ``fence`` and ``faults``. Every value is a power of two the config accepts, plus the
baseline's own value, so the baseline is a point of the space. ``GROUPS`` bundles the fields
that change the same kernels, for the block-wise search of ``fuzz.tune.search``.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

from fuzz.gate import PerfShape
from tbe import KernelConfig
from tbe.buckets import block_for_dim

P2 = (1, 2, 4, 8, 16, 32)
CHOICES: dict[str, tuple] = {
    "fwd_gather_unweighted": P2,
    "fwd_gather_weighted": P2,
    "fwd_bags_per_program": (1, 2, 4, 8, 16),
    "fwd_num_warps": (1, 2, 4, 8),
    "fwd_one_bag_pooling": (0, 8, 16, 32, 64, 128),
    "bwd_short_gather_unweighted": P2,
    "bwd_short_gather_weighted": P2,
    "bwd_short_num_warps": (1, 2, 4, 8),
    "bwd_short_runs_per_program": P2,
    "short_grid_multiplier": (4, 8, 16, 32, 64, 128),
    "bwd_long_gather": (2, 4, 8, 16, 32),
    "bwd_long_num_warps": (1, 2, 4, 8),
    "bwd_long_stages": (1, 2, 3),
    "bwd_long_vector": (False, True),
    "long_grid_multiplier": (1, 2, 4, 8, 16, 32),
    "long_run_threshold": (32, 64, 128, 256, 512, 1024),
    "chunk_size": (64, 128, 256, 512, 1024),
    "classify_block": (256, 512, 1024, 2048),
    "fused_long_tier": (False, True),
    "hoist_transpose": (False, True),
    "dim_buckets": ((8, 16, 32, 64, 128, 256), (32, 64, 128, 256), (64, 128, 256), (8, 16, 32, 64, 128, 256, 512)),
}
WEIGHTED_ONLY = {"fwd_gather_weighted", "bwd_short_gather_weighted"}
TILE = {"gather": P2, "bags": (1, 2, 4, 8, 16), "warps": (1, 2, 4, 8)}
TILES = "fwd_bucket_tiles"
RUNS = "bwd_short_bucket_runs"
PER_BUCKET = (TILES, RUNS)  # searched a bucket at a time, as trial parameters "tile<BLOCK_D>..." and "runs<BLOCK_D>"

# fields that change the same kernels: a trial frees one group and keeps the rest at the best
# values so far, so most kernels come from Triton's cache and a trial costs seconds, not a
# recompilation of everything
GROUPS: dict[str, tuple[str, ...]] = {
    "forward": ("fwd_gather_unweighted", "fwd_gather_weighted", "fwd_bags_per_program", "fwd_num_warps", TILES,
                "fwd_one_bag_pooling"),
    "short tier": ("bwd_short_gather_unweighted", "bwd_short_gather_weighted", "bwd_short_num_warps",
                   "bwd_short_runs_per_program", "short_grid_multiplier", RUNS),
    "long tier": ("bwd_long_gather", "bwd_long_num_warps", "bwd_long_stages", "bwd_long_vector",
                  "long_grid_multiplier", "long_run_threshold", "chunk_size", "fused_long_tier"),
    "layout": ("classify_block", "hoist_transpose", "dim_buckets"),
}

# single-field starting points worth a trial each (the search samples around them afterwards)
HINTS: list[dict[str, Any]] = [
    {"bwd_short_runs_per_program": 4},
    {"bwd_short_runs_per_program": 8, "short_grid_multiplier": 64},
    {"fwd_gather_unweighted": 2},
    {"fwd_gather_unweighted": 16, "fwd_bags_per_program": 2},
    {"fused_long_tier": True},
    {"hoist_transpose": True},
]


def _encode(value: Any) -> Any:
    """Optuna's categorical choices must be None, bool, int, float or str: tuples travel as strings."""
    return ",".join(map(str, value)) if isinstance(value, tuple) else value


def _decode(field: str, value: Any) -> Any:
    return tuple(int(x) for x in value.split(",")) if field == "dim_buckets" else value


def searched_fields(shapes: Sequence[PerfShape], only: Optional[Iterable[str]] = None) -> list[str]:
    """The fields a search over ``shapes`` varies (``only`` restricts them; unknown names raise)."""
    fields = [f for f in CHOICES if f not in WEIGHTED_ONLY or any(s.weighted for s in shapes)] + list(PER_BUCKET)
    if only is not None:
        only = list(only)
        unknown = [f for f in only if f not in CHOICES and f not in PER_BUCKET]
        if unknown:
            raise ValueError(f"--fields: {unknown[0]!r} is not a searchable field (searchable: "
                             f"{', '.join(list(CHOICES) + list(PER_BUCKET))})")
        fields = [f for f in fields if f in only]
    return fields


def choices(field: str, base: KernelConfig) -> list[Any]:
    """The encoded candidate values of ``field``, the baseline's value included."""
    values = list(CHOICES[field])
    if getattr(base, field) not in values:
        values.append(getattr(base, field))
    return [_encode(v) for v in values]


def suggest(trial, base: KernelConfig, shapes: Sequence[PerfShape], fields: Sequence[str]) -> KernelConfig:
    """One candidate config from an Optuna trial (define-by-run: tiles depend on the trial's buckets)."""
    changes: dict[str, Any] = {}
    for f in fields:
        if f not in PER_BUCKET:
            changes[f] = _decode(f, trial.suggest_categorical(f, choices(f, base)))
    cfg = base.replace(**changes)
    blocks = _blocks(shapes, cfg)
    if TILES in fields:
        tiles = []
        existing = {e[0]: e for e in base.fwd_bucket_tiles}
        for block in blocks:
            if not trial.suggest_categorical(f"tile{block}", [False, True]):
                continue
            g, b, w = (trial.suggest_categorical(f"tile{block}_{k}", list(v)) for k, v in TILE.items())
            tiles.append((block, g, b, w))
        kept = [e for blk, e in existing.items() if blk not in {t[0] for t in tiles}]
        cfg = cfg.replace(fwd_bucket_tiles=tuple(sorted(kept + tiles)))
    if RUNS in fields:
        runs = dict(base.bwd_short_bucket_runs)
        for block in blocks:  # 0: the bucket takes bwd_short_runs_per_program
            runs[block] = trial.suggest_categorical(f"runs{block}", [0, *P2])
        cfg = cfg.replace(bwd_short_bucket_runs=tuple(sorted((b, r) for b, r in runs.items() if r)))
    return cfg


def _blocks(shapes: Sequence[PerfShape], config: KernelConfig) -> list[int]:
    """The BLOCK_D of every dimension bucket the shapes use under ``config``."""
    return sorted({block_for_dim(d, config) for s in shapes for _, d in s.specs})


def params_of(config: KernelConfig, base: KernelConfig, shapes: Sequence[PerfShape],
              fields: Sequence[str]) -> dict[str, Any]:
    """The trial parameters that reproduce ``config`` (for enqueuing the baseline and the hints)."""
    params = {f: _encode(getattr(config, f)) for f in fields if f not in PER_BUCKET}
    blocks = _blocks(shapes, config)
    if TILES in fields:
        tiles = {e[0]: e for e in config.fwd_bucket_tiles}
        for block in blocks:
            params[f"tile{block}"] = block in tiles
            if block in tiles:
                params.update({f"tile{block}_{k}": v for k, v in zip(TILE, tiles[block][1:])})
    if RUNS in fields:
        runs = dict(config.bwd_short_bucket_runs)
        params.update({f"runs{block}": runs.get(block, 0) for block in blocks})
    return params


def hint_configs(base: KernelConfig, fields: Sequence[str]) -> list[KernelConfig]:
    """The hints that touch only searched fields and change the baseline, as configs."""
    out = []
    for hint in HINTS:
        if all(f in fields for f in hint) and any(getattr(base, f) != v for f, v in hint.items()):
            out.append(base.replace(**hint))
    return out


def group_of(param: str) -> str:
    """The group of a trial parameter (tile parameters belong to the forward, per-bucket runs to the short tier)."""
    field = TILES if param.startswith("tile") else RUNS if param.startswith("runs") else param
    return next(g for g, fields in GROUPS.items() if field in fields)


def active_groups(fields: Sequence[str]) -> list[str]:
    return [g for g, members in GROUPS.items() if any(f in fields for f in members)]
