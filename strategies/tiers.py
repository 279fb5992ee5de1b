"""Which backward tiers a batch exercises, computed from its segment lengths and a KernelConfig.

The rule is ``tbe.routing.route`` (no kernel runs), so a test can show the default strategies
reach every tier and a campaign can count tiers. Tiers are ``tbe.routing.Path``'s backward members:
``BWD_SHORT`` (SL < long_run_threshold), ``BWD_LONG`` (long runs, partial sums in a workspace then an
apply kernel), ``BWD_FUSED`` (long runs, the last chunk applies the update).
"""

from __future__ import annotations

import dataclasses

import torch

from cases import Case
from tbe import KernelConfig
from tbe.routing import LongEdge, Path, backward_paths, long_edges, long_runs, past_counter_length, route

TIERS = (Path.BWD_SHORT, Path.BWD_LONG, Path.BWD_FUSED)
COUNTER_ROOM = 512  # lookups a case keeps beside its run past the counter (the rest of its batch)


def past_counter_fits(config: KernelConfig, max_lookups: int) -> bool:
    """Whether a case of at most ``max_lookups`` holds that run and ``COUNTER_ROOM`` lookups beside it."""
    return past_counter_length(config) + COUNTER_ROOM <= max_lookups


@dataclasses.dataclass(frozen=True)
class TierReport:
    runs: int
    short_runs: int
    long_runs: int
    chunks: int
    max_segment: int
    tiers: frozenset[Path]
    edges: frozenset[LongEdge]


def tier_report(segment_lengths: torch.Tensor, num_lookups: int, config: KernelConfig,
                forward: Path = Path.FWD_GENERIC) -> TierReport:
    """Tiers and long-run edges of runs with SLs ``segment_lengths`` under ``config`` (``forward``: the path the
    step's forward took; after a counting one the backward is the small-table one, whatever the runs)."""
    sl = segment_lengths.to(torch.int64).reshape(-1)
    ch = config.chunk_size
    long = long_runs(sl, config)
    lsl = sl[long]
    tiers = backward_paths(route(sl, num_lookups, config, forward))
    return TierReport(
        runs=int(sl.numel()), short_runs=int((~long).sum()), long_runs=int(long.sum()),
        chunks=int(((lsl + ch - 1) // ch).sum()), max_segment=int(sl.max()) if sl.numel() else 0,
        tiers=frozenset(tiers), edges=long_edges(sl, config),
    )


def case_tier_report(case: Case, config: KernelConfig) -> TierReport:
    """The report for a materialized case; a case without a backward step exercises no tier."""
    if case.spec.steps == 0 or case.spec.batch_size == 0 or case.num_lookups == 0:
        return tier_report(torch.zeros(0, dtype=torch.int64), 0, config)
    return tier_report(case.segment_lengths(), case.num_lookups, config)
