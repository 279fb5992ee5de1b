"""Config-space search: KernelConfig overrides drawn on top of the config under test.

A campaign under config X draws, with every case, a set of field overrides (or none: about
half the draws run X itself, and shrinking goes there): the long tier's threshold and chunk
size small enough that a CPU-sized batch has multi-chunk runs, the fused long tier, the
fused bounds check and its block, the hoisted transpose, small-table thresholds a cheap
case can reach, short-tier runs per program and gathers, grid multipliers and
classification blocks small enough that persistent grids loop, per-bucket forward tiles and
dimension buckets small enough that rows are wider than the largest bucket. So every tier
runs whatever X's defaults are, and ``tbe-fuzz run --config X.json`` searches around X.

``fixed`` fields are never overridden: the gate passes the fields on which baseline and
candidate differ and applies the same drawn overrides to both. ``faults``, ``fence`` and
``index_dtype='int32'`` (refused for layouts past 2^31 rows) are never drawn. A failure is saved
with its effective config (config.json), so replay and the gate see exactly what ran.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import strategies as st

from fuzz.cases import AnyCase
from tbe import KernelConfig

NEVER = frozenset({"faults", "fence"})

# (threshold, chunk): multi-chunk runs at CPU-sized segment lengths; a threshold below the chunk
# size (one chunk per long run) and chunk 1 (a chunk per lookup) too
LONG_TIERS = [(8, 4), (12, 5), (5, 2), (4, 7), (16, 16), (3, 1)]
# (max rows, min dim, max dim, min mean pooling, bags per program, histogram ids)
SMALL_TABLES = [(16, 16, 32, 8, 2, 16), (64, 8, 64, 4, 4, 32), (4, 1, 16, 1, 1, 16)]
DIM_BUCKETS = [(4,), (8, 32), (16,), (2, 8, 64), (1, 4, 16, 64, 256), (32, 128)]
SMALL_TABLE_FIELDS = ("small_table_max_rows", "small_table_min_dim", "small_table_max_dim",
                      "small_table_min_pooling", "small_table_bags_per_program", "small_table_histogram_ids")


@dataclasses.dataclass(frozen=True)
class Drawn:
    """A case and the overrides its config was drawn with (sorted (field, value) pairs)."""

    case: AnyCase
    overrides: tuple[tuple[str, Any], ...] = ()

    def config(self, base: KernelConfig) -> KernelConfig:
        return base.replace(**dict(self.overrides)) if self.overrides else base


def split_draw(drawn: Any, base: KernelConfig) -> tuple[AnyCase, KernelConfig, dict[str, Any]]:
    """(case, effective config, overrides) of what a campaign strategy drew (a plain case: no overrides)."""
    if isinstance(drawn, Drawn):
        return drawn.case, drawn.config(base), dict(drawn.overrides)
    return drawn, base, {}


def _maybe(strategy: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(st.just({}), strategy)


def _group_long() -> st.SearchStrategy[dict[str, Any]]:
    return st.tuples(st.sampled_from(LONG_TIERS), st.sampled_from([True, False]), st.sampled_from([0, 64])).map(
        lambda v: {"long_run_threshold": v[0][0], "chunk_size": v[0][1], "fused_long_tier": v[1],
                   "fused_long_min_lookups": v[2]})


def _group_small_table() -> st.SearchStrategy[dict[str, Any]]:
    return st.tuples(st.booleans(), st.sampled_from(SMALL_TABLES)).map(
        lambda v: {"small_table_path": v[0], **dict(zip(SMALL_TABLE_FIELDS, v[1]))})


def _group_bounds() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"fused_bounds_check": st.sampled_from([True, False]), "bounds_check_block": st.sampled_from([4, 16, 64])})


def _group_backward() -> st.SearchStrategy[dict[str, Any]]:
    p2 = st.sampled_from([1, 2, 4])
    return st.fixed_dictionaries({
        "hoist_transpose": st.sampled_from([True, False]), "index_dtype": st.sampled_from(["auto", "int64"]),
        "bwd_short_runs_per_program": st.sampled_from([1, 2, 4, 8]), "bwd_short_gather_unweighted": p2,
        "bwd_short_gather_weighted": p2, "bwd_long_gather": p2, "classify_block": st.sampled_from([4, 16, 64]),
        "short_grid_multiplier": st.sampled_from([1, 2]), "long_grid_multiplier": st.sampled_from([1, 2]),
    })


@st.composite
def _group_forward(draw: st.DrawFn) -> dict[str, Any]:
    buckets = draw(st.sampled_from(DIM_BUCKETS))
    tiles = draw(st.lists(st.tuples(st.sampled_from(buckets), st.sampled_from([1, 2, 4, 16]), st.sampled_from([1, 2, 4]),
                                    st.sampled_from([1, 4])), min_size=1, max_size=2, unique_by=lambda t: t[0]))
    return {"dim_buckets": buckets, "fwd_bucket_tiles": tuple(tiles),
            "fwd_bags_per_program": draw(st.sampled_from([1, 2, 3, 8])),
            "fwd_gather_unweighted": draw(st.sampled_from([1, 2, 4])), "fwd_gather_weighted": draw(st.sampled_from([1, 2, 4]))}


GROUPS = (_group_long, _group_small_table, _group_bounds, _group_backward, _group_forward)


def _valid(base: KernelConfig, overrides: dict[str, Any]) -> bool:
    try:
        base.replace(**overrides)
    except (TypeError, ValueError):
        return False
    return True


@st.composite
def _overrides(draw: st.DrawFn, base: KernelConfig, fixed: frozenset[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for group in GROUPS:
        ov = {k: v for k, v in draw(_maybe(group())).items() if k not in fixed and k not in NEVER}
        if ov and _valid(base, {**out, **ov}):  # e.g. small-table dims against a fixed bound: skip the group
            out.update(ov)
    return {k: v for k, v in out.items() if getattr(base, k) != v}


def config_overrides(base: KernelConfig, fixed: frozenset[str] = frozenset()) -> st.SearchStrategy[dict[str, Any]]:
    """Overrides of ``base`` (about half the draws none); ``fixed`` fields stay as they are."""
    return _maybe(_overrides(base, frozenset(fixed)))


def drawn_cases(base: KernelConfig, cases_for, fixed: frozenset[str] = frozenset()) -> st.SearchStrategy[Drawn]:
    """Overrides, then a case drawn for the effective config (``cases_for(config)``: its edges)."""

    @st.composite
    def draw_one(draw: st.DrawFn) -> Drawn:
        ov = draw(config_overrides(base, fixed))
        config = base.replace(**ov) if ov else base
        return Drawn(draw(cases_for(config)), tuple(sorted(ov.items())))

    return draw_one()
