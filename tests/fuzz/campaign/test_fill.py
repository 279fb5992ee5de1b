"""Aimed cases (``fuzz.campaign.fill``): a case for every reachable coverage cell, and the campaign's last share
of time running them for the cells its draws left at zero.

The campaigns here run against a stand-in supervisor that passes every case at once (its cells come from the
materialized case, as a real run's do), so only the driver's bookkeeping and the recipes are under test.
"""

from __future__ import annotations

import pytest

from fuzz.budgets import Budget
from fuzz.campaign import fill
from fuzz.campaign.report import coverage_json
from fuzz.campaign.search import CampaignOptions, CampaignRunner
from fuzz.judge import coverage
from fuzz.judge.check import case_result, run_case
from fuzz.judge.coverage import Edge, EdgeGroup
from tbe.routing import Path
from cases import split_draw, tensors
from strategies.tour import TourShare
from tbe import KernelConfig
from tests.passing_supervisor import PassingSupervisor

BUDGET = Budget("t", seconds=6.0, shrink_seconds=0.0, max_examples=100_000, max_lookups=4000)
# a config away from the defaults: the fused long tier and check by default, no small-table path, narrow buckets
OTHER = KernelConfig(fused_long_tier=True, fused_bounds_check=True, small_table_path=False, dim_buckets=(16, 64),
                     long_run_threshold=64, chunk_size=32)


@pytest.mark.parametrize("config, max_lookups", [(KernelConfig(), 4000), (KernelConfig(), 1_200_000), (OTHER, 4000)],
                         ids=["defaults, CPU examples", "defaults, quick GPU examples", "fused tiers, narrow buckets"])
def test_every_reachable_cell_gets_an_aimed_case_that_hits_it(config, max_lookups):
    reachable = coverage.reachable(config, True, max_lookups=max_lookups)
    missed = []
    for cell in sorted(reachable, key=coverage.cell_order):
        if cell[1] in coverage.LOOP_CLASS:  # its candidates run on the kernels: test_every_loop_cell_...
            continue
        drawn = fill.aimed_case(cell, config, max_lookups, seconds=5.0)
        if drawn is None:
            missed.append(cell)
            continue
        case, cfg, _ = split_draw(drawn, config)
        assert cell in case_result(case, tensors(case, weights=False), cfg, 0.0, None, None).cells
        assert tensors(case, weights=False).indices.numel() <= max_lookups
    assert not missed, [(p.value, e.label) for p, e in missed]


def test_every_reachable_loop_cell_gets_a_planned_case_whose_check_reaches_it():
    """Loop cells show only in a run: the plan's cases for them, checked for real (``run_case``, which watches
    the launches), reach every loop cell a CPU campaign under the defaults can reach."""
    config, max_lookups = KernelConfig(), 4000
    loops = sorted((c for c in coverage.reachable(config, True, max_lookups=max_lookups) if c[1] in coverage.LOOP_CLASS),
                   key=coverage.cell_order)
    reached = set()
    assert fill.plan(loops, config, max_lookups) == []  # only a campaign whose checks observe loops aims at them
    for _, drawn in fill.plan(loops, config, max_lookups, loops=True):
        case, cfg, _ = split_draw(drawn, config)
        result = run_case(case, cfg)
        assert result.error is None and all(r.ok for r in result.reports), result.error
        reached |= result.cells
    assert [c for c in loops if c not in reached] == []


def test_a_run_past_the_chunk_counter_is_aimed_at_in_exact_values():
    # random magnitudes hide one lost chunk of 2^20 lookups under the sum's error bound; exact values do not
    cell = (Path.BWD_LONG, Edge(EdgeGroup.LONG_RUN, "past_4096_chunks, exact values"))
    drawn = fill.aimed_case(cell, KernelConfig(), 1_200_000)
    assert drawn is not None and drawn.case.values == "dyadic"
    assert max(h.count for h in drawn.case.hot_rows) > 4096 * drawn.config(KernelConfig()).chunk_size
    assert fill.aimed_case(cell, KernelConfig(), 4000) is None  # the interpreter's budget holds no such run


def test_the_run_past_the_chunk_counter_is_reachable_only_with_room_beside_it():
    """The coverage matrix and the aimed cases share one rule (``strategies.tiers.past_counter_fits``): a budget that
    holds the run but not the lookups an aimed case keeps beside it lists no such cell."""
    from strategies.tiers import COUNTER_ROOM
    from tbe.routing import past_counter_length

    config = KernelConfig()  # under the defaults alone: the search's configs with small chunks reach it sooner
    cell = (Path.BWD_LONG, coverage.PAST_COUNTER_EDGE)
    tight, roomy = past_counter_length(config) + COUNTER_ROOM - 1, past_counter_length(config) + COUNTER_ROOM
    assert cell not in coverage.reachable(config, False, max_lookups=tight)
    assert fill.aimed_case(cell, config, tight, fixed=frozenset({"chunk_size"})) is None
    assert cell in coverage.reachable(config, False, max_lookups=roomy)
    assert fill.aimed_case(cell, config, roomy, fixed=frozenset({"chunk_size"})) is not None


def test_an_unreachable_cell_gets_no_case():
    # the small-table path takes unweighted batches only
    cell = (Path.FWD_SMALL_TABLE, Edge(EdgeGroup.POOLING, "sum, weighted"))
    assert cell not in coverage.reachable(KernelConfig(), True, max_lookups=4000)
    assert fill.aimed_case(cell, KernelConfig(), 4000) is None


def test_fixed_fields_are_never_overridden():
    cell = (Path.BWD_FUSED, Edge(EdgeGroup.DIM, "< 4"))
    assert fill.aimed_case(cell, KernelConfig(), 4000) is not None  # through a profile with the fused tier
    assert fill.aimed_case(cell, KernelConfig(), 4000, fixed=frozenset({"fused_long_tier"})) is None


@pytest.fixture
def aimed_most(monkeypatch):
    """Most of the time to the aimed cases: the draws here are instant, so a fifth would leave few cells to aim at."""
    monkeypatch.setattr(fill, "FILL_SHARE", 0.9)  # read by fuzz.campaign.search as aim.FILL_SHARE


def test_a_campaign_ends_with_every_reachable_cell_hit(aimed_most):
    res = CampaignRunner(KernelConfig(), BUDGET, 1, CampaignOptions(
        artifacts_dir=None, supervisor=PassingSupervisor(), tour_share=None)).run()
    cov = coverage_json(res)
    assert res.fill_zero > 0 and res.fill_examples == res.fill_planned > 0
    assert _but_loops(cov["zero"]) == [] and cov["unexpected"] == []


def _but_loops(cells: list) -> list:
    """Cells of a coverage JSON but the loop cells: the stand-in supervisor launches no kernel, so it reaches none."""
    loops = {e.label for e in coverage.LOOP_CLASS}
    return [c for c in cells if c[1] not in loops]


def test_without_fill_or_after_max_examples_the_draws_keep_the_run(aimed_most):
    res = CampaignRunner(KernelConfig(), BUDGET, 1, CampaignOptions(
        artifacts_dir=None, supervisor=PassingSupervisor(), tour_share=None, fill=False)).run()
    assert res.fill_examples == res.fill_zero == 0
    few = Budget("few", seconds=600.0, shrink_seconds=0.0, max_examples=2, max_lookups=4000)
    res = CampaignRunner(KernelConfig(), few, 1, CampaignOptions(
        artifacts_dir=None, supervisor=PassingSupervisor(), tour_share=None)).run()
    assert res.examples == 2 and res.fill_examples == 0 and coverage_json(res)["zero"]


def test_workers_split_the_cells_and_together_hit_every_one(aimed_most):
    parts = [CampaignRunner(KernelConfig(), BUDGET, 1, CampaignOptions(
        artifacts_dir=None, supervisor=PassingSupervisor(), tour_share=TourShare(i, 2))).run() for i in range(2)]
    merged = coverage.merge_json([coverage_json(p) for p in parts])
    assert _but_loops(merged["zero"]) == []
    assert all(0 < p.fill_zero < 320 for p in parts)  # each aims at its own half of the cells at zero
    reachable = sorted(coverage.reachable(KernelConfig(), True, max_lookups=4000), key=coverage.cell_order)
    assert parts[0].fill_zero <= len(TourShare(0, 2).pick(reachable))


def test_draws_go_on_after_the_aimed_cases_when_time_is_left():
    """The aimed cases take a few seconds of their fifth here: the drawn search resumes from seed + 1."""
    from fuzz.status import StopReason

    budget = Budget("t", seconds=20.0, shrink_seconds=0.0, max_examples=100_000, max_lookups=4000)
    fills: list[int] = []
    res = CampaignRunner(KernelConfig(), budget, 1, CampaignOptions(
        artifacts_dir=None, supervisor=PassingSupervisor(), tour_share=None,
        observe=lambda r, result: fills.append(r.fill_examples))).run()
    assert res.resumed and res.stopped_by == StopReason.TIME and res.fill_examples > 0
    after = sum(1 for n in fills if n == res.fill_examples) - 1  # observed after the last aimed case
    assert after > 0


def test_feature_map_cells_are_aimed_at_with_shared_tables():
    """Each feature-map cell's aimed case gives table 0 two features, or four, and the tour has such a case."""
    from strategies.tour import tour

    c = KernelConfig()
    for value, least in zip(coverage.FEATURE_MAP_CLASSES, (2, coverage.MANY_FEATURES)):
        for path in (Path.FWD_GENERIC, Path.BWD_SHORT):
            drawn = fill.aimed_case((path, Edge(EdgeGroup.FEATURE_MAP, value)), c, 2000)
            assert drawn is not None and drawn.case.feature_table_map.count(0) >= least
    assert fill.aimed_case((Path.FWD_SMALL_TABLE, Edge(EdgeGroup.FEATURE_MAP, coverage.FEATURE_MAP_CLASSES[0])),
                           c, 2000) is None
    assert any(len(set(d.case.feature_table_map)) < len(d.case.feature_table_map)
               for d in tour(c, 2000) if hasattr(d.case, "feature_table_map"))


def test_vbe_cells_are_aimed_at_with_a_batch_size_per_feature():
    """Each VBE cell's aimed case gives its last feature batch 0 (or 1) beside the others' batch; the small-table
    forward takes no VBE, so its cells get none; the tour holds a VBE case with a feature of batch 0."""
    from strategies.tour import tour

    c = KernelConfig()
    for value, last in zip(coverage.VBE_CLASSES, (0, 1)):
        for path in (Path.FWD_GENERIC, Path.BWD_SHORT):
            drawn = fill.aimed_case((path, Edge(EdgeGroup.VBE, value)), c, 2000)
            assert drawn is not None and drawn.case.batch_size_per_feature[-1] == last
    assert fill.aimed_case((Path.FWD_SMALL_TABLE, Edge(EdgeGroup.VBE, coverage.VBE_CLASSES[0])), c, 2000) is None
    assert any(0 in (getattr(d.case, "batch_size_per_feature", None) or ()) for d in tour(c, 2000))
