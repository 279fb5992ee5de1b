"""Config-space search: KernelConfig overrides drawn on top of the config under test.

A campaign under config X draws, with every case, one override profile (or none: about half
the draws run X itself, and shrinking goes there): the long tier's threshold and chunk size
small enough that a CPU-sized batch has multi-chunk runs, the fused long tier, the fused
bounds check and its block, the hoisted transpose, small-table thresholds a cheap case can
reach, short-tier runs per program and gathers, grid multipliers and classification blocks
small enough that persistent grids loop, per-bucket forward tiles and short runs, dimension buckets
narrower than the rows. So every tier runs whatever X's defaults are, and
``tbe-fuzz run --config X.json`` searches around X; the case is then drawn at the effective
config's edges.

``fixed`` fields are never overridden: the gate passes the fields on which baseline and
candidate differ and applies the same drawn overrides to both. ``faults``, ``fence`` and
``index_dtype='int32'`` (refused for layouts past 2^31 rows) are never drawn. A failure is saved
with its effective config (config.json), so replay and the gate see exactly what ran.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from hypothesis import strategies as st

from cases import Drawn
from tbe import KernelConfig

NEVER = frozenset({"faults", "fence"})

# Override profiles: each a coherent set of fields aimed at one path. A fixed list (rather than
# independent per-field values) keeps the kernel specializations a campaign reaches finite, so a
# GPU warm-up can build them all (``campaign_configs``).
PROFILES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("long tier, multi-chunk", {"long_run_threshold": 8, "chunk_size": 4, "classify_block": 16,
                                "long_grid_multiplier": 1}),
    ("fused long tier, wide rows", {"long_run_threshold": 5, "chunk_size": 2, "fused_long_tier": True,
                                    "dim_buckets": (4, 16), "bwd_long_gather": 2,
                                    "long_grid_multiplier": 1}),
    ("threshold below the chunk size, fused", {"long_run_threshold": 4, "chunk_size": 7, "fused_long_tier": True,
                                               "fused_long_min_lookups": 0}),
    ("a chunk per lookup", {"long_run_threshold": 3, "chunk_size": 1, "short_grid_multiplier": 1}),
    ("narrow buckets and gathers", {"dim_buckets": (4,), "fwd_gather_unweighted": 2, "fwd_gather_weighted": 2,
                                    "bwd_short_gather_unweighted": 2, "bwd_short_gather_weighted": 4,
                                    "fwd_bags_per_program": 3}),
    ("short runs side by side", {"bwd_short_runs_per_program": 4, "classify_block": 4, "short_grid_multiplier": 1}),
    ("fused bounds check, hoisted transpose", {"fused_bounds_check": True, "bounds_check_block": 4,
                                               "hoist_transpose": True, "index_dtype": "int64"}),
    ("small-table path at small sizes", {"small_table_path": True, "small_table_max_rows": 16,
                                         "small_table_min_dim": 16, "small_table_max_dim": 32,
                                         "small_table_min_pooling": 8, "small_table_bags_per_program": 2,
                                         "small_table_histogram_ids": 16}),
    ("tiny small tables, fused check", {"small_table_path": True, "small_table_max_rows": 4,
                                        "small_table_min_dim": 1, "small_table_max_dim": 16,
                                        "small_table_min_pooling": 1, "small_table_bags_per_program": 1,
                                        "small_table_histogram_ids": 16, "fused_bounds_check": True}),
    ("per-bucket tiles and short runs", {"dim_buckets": (8, 32), "fwd_bucket_tiles": ((8, 2, 2, 1), (32, 1, 4, 4)),
                                         "bwd_short_bucket_runs": ((8, 4), (32, 1)), "bounds_check_block": 16}),
    ("small-table path off, long tier", {"small_table_path": False, "long_run_threshold": 12, "chunk_size": 5,
                                         "bwd_short_runs_per_program": 2}),
    # general cases under these draw fp16 or bf16 weights (``strategies.space.general_cases``)
    ("stochastic rounding", {"stochastic_rounding": True}),
    ("stochastic rounding, fused long tier", {"stochastic_rounding": True, "long_run_threshold": 5, "chunk_size": 2,
                                              "fused_long_tier": True, "long_grid_multiplier": 1}),
)


def profile_overrides(base: KernelConfig, overrides: dict[str, Any],
                      fixed: frozenset[str] = frozenset()) -> Optional[dict[str, Any]]:
    """``overrides`` less ``fixed`` fields and values ``base`` already has; None if the rest is invalid."""
    ov = {k: v for k, v in overrides.items() if k not in fixed and k not in NEVER and getattr(base, k) != v}
    try:
        base.replace(**ov)
    except (TypeError, ValueError):
        return None
    return ov


Profiles = Sequence[tuple[str, Any]]  # (label, overrides as a dict or as (field, value) pairs)


def usable_profiles(base: KernelConfig, fixed: frozenset[str] = frozenset(),
                    touching: Optional[frozenset[str]] = None, profiles: Optional[Profiles] = None
                    ) -> list[dict[str, Any]]:
    """The profiles' overrides of ``base``, without duplicates or empty ones (with ``touching``: only
    those that override one of those fields). ``profiles``: a SUT's own (``Capabilities.config_profiles``);
    default ``PROFILES``, this project's kernels'."""
    out: list[dict[str, Any]] = []
    for _, overrides in PROFILES if profiles is None else profiles:
        ov = profile_overrides(base, dict(overrides), fixed)
        if ov and ov not in out and (touching is None or touching & set(ov)):
            out.append(ov)
    return out


def campaign_configs(base: KernelConfig) -> list[KernelConfig]:
    """Every config a campaign under ``base`` runs: ``base`` and each profile on it (what a warm-up builds)."""
    return [base] + [base.replace(**ov) for ov in usable_profiles(base)]


def config_overrides(base: KernelConfig, fixed: frozenset[str] = frozenset(),
                     touching: Optional[frozenset[str]] = None, profiles: Optional[Profiles] = None
                     ) -> st.SearchStrategy[dict[str, Any]]:
    """No overrides (about half the draws; shrinking goes there) or one profile (``touching``: one that
    overrides one of those fields; ``profiles``: a SUT's own); ``fixed`` fields stay."""
    usable = usable_profiles(base, frozenset(fixed), touching, profiles)
    return st.one_of(st.just({}), st.sampled_from(usable)) if usable else st.just({})


def drawn_cases(base: KernelConfig, cases_for, fixed: frozenset[str] = frozenset(),
                touching: Optional[frozenset[str]] = None, profiles: Optional[Profiles] = None
                ) -> st.SearchStrategy[Drawn]:
    """Overrides, then a case drawn for the effective config (``cases_for(config)``: its edges);
    ``touching``: draw only profiles that override one of those fields (the rest would not change the case).
    Each profile's case strategy is built once, at its first draw: building Hypothesis strategies anew for
    every example (and validating them) cost a packed draw a third of its time."""
    overrides = config_overrides(base, fixed, touching, profiles)
    built: dict[tuple[tuple[str, Any], ...], st.SearchStrategy] = {}  # sorted overrides -> their case strategy

    def cases_under(key: tuple[tuple[str, Any], ...]) -> st.SearchStrategy:
        if key not in built:
            built[key] = cases_for(base.replace(**dict(key)) if key else base)
        return built[key]

    @st.composite
    def draw_one(draw: st.DrawFn) -> Drawn:
        key = tuple(sorted(draw(overrides).items()))
        return Drawn(draw(cases_under(key)), key)

    return draw_one()
