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
from tbe.routing import Path, backward_paths, long_runs, route

TIERS = (Path.BWD_SHORT, Path.BWD_LONG, Path.BWD_FUSED)
COUNTER_EDGE = 4096  # chunks a 12-bit counter holds: a run past it (2^20 lookups at chunk size 256) is its own edge
PAST_COUNTER = "past_4096_chunks"
# edges within the long tiers worth counting separately
LONG_EDGES = ("exact_threshold", "single_chunk", "multi_chunk", "partial_last_chunk", PAST_COUNTER)


COUNTER_ROOM = 512  # lookups a case keeps beside its run past the counter (the rest of its batch)


def past_counter_length(config: KernelConfig) -> int:
    """The shortest run past ``COUNTER_EDGE`` chunks of ``config``'s size: 2^20 + 1 lookups by default."""
    return COUNTER_EDGE * config.chunk_size + 1


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
    edges: frozenset[str]


def tier_report(segment_lengths: torch.Tensor, num_lookups: int, config: KernelConfig) -> TierReport:
    """Tiers and long-run edges of runs with SLs ``segment_lengths`` under ``config``."""
    sl = segment_lengths.to(torch.int64).reshape(-1)
    th, ch = config.long_run_threshold, config.chunk_size
    long = long_runs(sl, config)
    lsl = sl[long]
    edges = set()
    routing = route(sl, num_lookups, config)
    tiers = backward_paths(routing)
    if routing.long:
        if bool((lsl == th).any()):
            edges.add("exact_threshold")
        if bool((lsl <= ch).any()):
            edges.add("single_chunk")
        if routing.multi_chunk:
            edges.add("multi_chunk")
        if bool((lsl % ch != 0).any()):
            edges.add("partial_last_chunk")
        if bool((lsl >= past_counter_length(config)).any()):
            edges.add(PAST_COUNTER)
    return TierReport(
        runs=int(sl.numel()), short_runs=int((~long).sum()), long_runs=int(long.sum()),
        chunks=int(((lsl + ch - 1) // ch).sum()), max_segment=int(sl.max()) if sl.numel() else 0,
        tiers=frozenset(tiers), edges=frozenset(edges),
    )


def case_tier_report(case: Case, config: KernelConfig) -> TierReport:
    """The report for a materialized case; a case without a backward step exercises no tier."""
    if case.spec.steps == 0 or case.spec.batch_size == 0 or case.num_lookups == 0:
        return tier_report(torch.zeros(0, dtype=torch.int64), 0, config)
    return tier_report(case.segment_lengths(), case.num_lookups, config)
