"""The coverage matrix (fuzz.judge.coverage), its heatmap and the novelty steering (fuzz.campaign.steer).

Expected cells come from the kernel rules as DESIGN.md states them (small-table path: one fp16
table, E <= 64, 64 <= D <= 128, mean bag length >= 64, fp32 output, unweighted; long runs from
SL >= long_run_threshold; buckets by next_pow2(D) up to 256), written out by hand per case.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings

from fuzz.campaign import coverage_map, report, steer
from fuzz.campaign.search import CampaignResult
from fuzz.budgets import get as get_budget
from fuzz.judge import check
from fuzz.profiles import examples
from fuzz.judge.coverage import (
    EDGES, PATHS, Coverage, Edge, EdgeGroup, Facts, cells_of, edges_of, facts_of, merge_json,
    paths_of, reachable,
)
from tbe.routing import Path
from cases import BadBatchSpec, BadId, BadIdCase, CaseSpec, split_draw, tensors
from strategies.space import campaign_cases
from tbe import KernelConfig

P = Path
DEFAULT = KernelConfig()


def dims(*values: str) -> set[Edge]:
    return {Edge(EdgeGroup.DIM, v) for v in values}


def test_small_table_shape_takes_the_small_table_paths_and_weights_move_it_off():
    f = Facts(dims=(64,), rows=(16,), batch_size=2, lookups=128, weights_dtype="fp16", output_dtype="fp32",
              segment_lengths=(8,))
    assert paths_of(f, DEFAULT) == {P.FWD_SMALL_TABLE, P.BOUNDS_STANDALONE, P.BWD_SMALL_TABLE}
    tiers = DEFAULT.replace(small_table_backward=False)  # the forward counts, the step takes the tiers
    assert paths_of(f, tiers) == {P.FWD_SMALL_TABLE, P.BOUNDS_STANDALONE, P.BWD_SHORT}
    weighted = Facts(**{**f.__dict__, "weighted": True})
    assert paths_of(weighted, DEFAULT) == {P.FWD_GENERIC, P.BOUNDS_STANDALONE, P.BWD_SHORT, P.PSW_GRAD}
    assert paths_of(f, DEFAULT.replace(small_table_path=False)) == {P.FWD_GENERIC, P.BOUNDS_STANDALONE, P.BWD_SHORT}


def test_long_runs_route_by_config():
    f = Facts(dims=(16,), rows=(1000,), batch_size=4, lookups=300, segment_lengths=(300,), bounds_check="none")
    assert paths_of(f, DEFAULT) == {P.FWD_GENERIC, P.BWD_LONG}
    assert paths_of(f, DEFAULT.replace(fused_long_tier=True)) == {P.FWD_GENERIC, P.BWD_FUSED}
    # below fused_long_min_lookups the backward runs grad-accum + apply, not the fused tier
    below = DEFAULT.replace(fused_long_tier=True, fused_long_min_lookups=1000)
    assert paths_of(f, below) == {P.FWD_GENERIC, P.BWD_LONG}
    e = edges_of(f, DEFAULT)  # 300 > chunk 256, 300 % 256 != 0, SL band 256-4095
    assert {Edge(EdgeGroup.LONG_RUN, "multi_chunk"), Edge(EdgeGroup.LONG_RUN, "partial_last_chunk"),
            Edge(EdgeGroup.SEGMENT, "256-4095")} <= e
    assert Edge(EdgeGroup.LONG_RUN, "exact_threshold") not in e
    assert Edge(EdgeGroup.SEGMENT, "1-3") not in e
    # a run past 4,096 chunks counts there only in exact values, where a lost chunk shows
    past = Facts(**{**f.__dict__, "segment_lengths": (4096 * 256 + 1,), "lookups": 4096 * 256 + 1})
    counter = Edge(EdgeGroup.LONG_RUN, "past_4096_chunks, exact values")
    assert counter not in edges_of(past, DEFAULT)
    assert counter in edges_of(Facts(**{**past.__dict__, "exact": True}), DEFAULT)


@pytest.mark.parametrize("dim, expected", [
    (1, {"1", "< 4", "not a multiple of BLOCK_D"}),       # block 8
    (3, {"< 4", "not a multiple of BLOCK_D"}),
    (8, set()),
    (100, {"not a multiple of BLOCK_D"}),                 # block 128
    (257, {"not a multiple of BLOCK_D", "wider than the largest bucket"}),   # loops over 256-wide blocks
    (1024, {"wider than the largest bucket"}),
    (2048, {"wider than the largest bucket", "> 1024"}),
    (1030, {"not a multiple of BLOCK_D", "wider than the largest bucket", "> 1024"}),
])
def test_dim_classes(dim, expected):
    f = Facts(dims=(dim,), rows=(5,), batch_size=1, lookups=1)
    assert {e for e in edges_of(f, DEFAULT) if e.group == EdgeGroup.DIM} == dims(*expected)


def test_other_edges_of_a_materialized_case():
    spec = CaseSpec(tables=((10, 4), (6, 2)), batch_size=3, pooling="mean", weighted=True, weights_dtype="fp16",
                    output_dtype="bf16", index_dtype="int32", optimizer="exact_rowwise_adagrad", steps=2,
                    length_profile="empty")
    t = tensors(spec, weights=False)
    f = facts_of(spec, t)
    assert f.empty_bag and f.steps == 2 and f.lookups == 0
    e = edges_of(f, DEFAULT)
    assert {Edge(EdgeGroup.EMPTY_BAG, "yes"), Edge(EdgeGroup.POOLING, "mean, weighted"),
            Edge(EdgeGroup.DTYPE, "weights fp16"), Edge(EdgeGroup.DTYPE, "output bf16"),
            Edge(EdgeGroup.DTYPE, "index int32"), Edge(EdgeGroup.OPTIMIZER, "exact_rowwise_adagrad"),
            Edge(EdgeGroup.STEPS, "> 1")} <= e
    assert not {x for x in e if x.group in (EdgeGroup.SEGMENT, EdgeGroup.LONG_RUN)}  # no lookups, no runs


def test_bad_ids_count_on_the_bounds_path_with_their_placement():
    bad = BadBatchSpec(tables=((5, 3), (7, 2)), batch_size=1, max_length=3,
                       bad_ids=(BadId("rows", table="last", bag="last", element="first"),
                                BadId("negative", table="first", bag="first", element="last")),
                       bad_offsets=("last_long",), seed=3)
    case = BadIdCase(CaseSpec(tables=bad.tables, batch_size=1, max_length=3, bounds_check="warning"), bad)
    f = facts_of(case, tensors(case, weights=False))
    # one bag per table: the first bag is also the last
    cells = cells_of(f, DEFAULT)
    assert {p for p, _ in cells} == {P.BOUNDS_STANDALONE}
    expect = {Edge(EdgeGroup.BAD_ID_BAG, "rows @ first"), Edge(EdgeGroup.BAD_ID_BAG, "rows @ last"),
              Edge(EdgeGroup.BAD_ID_BAG, "negative @ first"), Edge(EdgeGroup.BAD_ID_BAG, "negative @ last"),
              Edge(EdgeGroup.BAD_ID_SLOT, "rows @ first"), Edge(EdgeGroup.BAD_ID_SLOT, "negative @ last"),
              Edge(EdgeGroup.BAD_OFFSETS, "last_long")}
    bad_edges = {e for _, e in cells if e.group in (EdgeGroup.BAD_ID_BAG, EdgeGroup.BAD_ID_SLOT, EdgeGroup.BAD_OFFSETS)}
    assert bad_edges == expect
    assert {p for p, _ in cells_of(f, DEFAULT.replace(fused_bounds_check=True))} == {P.BOUNDS_FUSED}
    assert not cells_of(Facts(**{**f.__dict__, "bounds_check": "none"}), DEFAULT)


def test_reachable_follows_the_config():
    plain = reachable(DEFAULT, search_config=False)
    paths = {p for p, _ in plain}
    assert P.FWD_SMALL_TABLE in paths and P.BWD_LONG in paths and P.BOUNDS_STANDALONE in paths
    assert P.BWD_FUSED not in paths and P.BOUNDS_FUSED not in paths
    off = reachable(DEFAULT.replace(small_table_path=False), search_config=False)
    assert not {c for c in off if c[0] == P.FWD_SMALL_TABLE}
    fused = {p for p, _ in reachable(DEFAULT.replace(fused_long_tier=True), search_config=False)}
    assert P.BWD_FUSED in fused and P.BWD_LONG not in fused
    searched = reachable(DEFAULT)  # the config-space search draws the fused tier and fused bounds check
    assert {P.BWD_FUSED, P.BOUNDS_FUSED} <= {p for p, _ in searched} and plain <= searched
    for cell in [(P.FWD_SMALL_TABLE, Edge(EdgeGroup.POOLING, "sum, weighted")),
                 (P.FWD_SMALL_TABLE, Edge(EdgeGroup.DTYPE, "weights fp32")),
                 (P.PSW_GRAD, Edge(EdgeGroup.POOLING, "mean, unweighted")),
                 (P.BWD_SHORT, Edge(EdgeGroup.STEPS, "0 (forward only)")),
                 (P.FWD_GENERIC, Edge(EdgeGroup.BAD_ID_BAG, "rows @ first"))]:
        assert cell not in searched, cell
    assert (P.BOUNDS_STANDALONE, Edge(EdgeGroup.BAD_ID_BAG, "dtype_min @ middle")) in searched
    # a budget of 4,000 lookups holds no segment of 4,096 or more, nor a long run past it
    capped = reachable(DEFAULT, max_lookups=4000)
    long_band = Edge(EdgeGroup.SEGMENT, "4096-2^20-1")
    assert (P.BWD_SHORT, long_band) in searched and (P.BWD_SHORT, long_band) not in capped
    assert not {c for c in capped if c[1].group == EdgeGroup.SEGMENT and c[1].value.startswith((">=", "4096"))}
    assert (P.BWD_LONG, Edge(EdgeGroup.SEGMENT, "256-4095")) in capped and capped < searched
    past = Edge(EdgeGroup.LONG_RUN, "past_4096_chunks, exact values")  # 4,097 chunks: at least 4,097 lookups
    assert (P.BWD_LONG, past) in reachable(DEFAULT, max_lookups=1_200_000) and (P.BWD_LONG, past) not in capped
    # a campaign's draws all run a step; a test session also checks forward-only cases
    forward_only = (P.FWD_GENERIC, Edge(EdgeGroup.STEPS, "0 (forward only)"))
    assert forward_only not in searched and forward_only not in plain
    assert forward_only in reachable(DEFAULT, search_config=False, forward_only=True)
    assert (P.FWD_GENERIC, Edge(EdgeGroup.DIM, "> 1024")) in searched


def test_cells_of_witnesses_are_reachable():
    config = DEFAULT.replace(fused_long_tier=True)
    cases = [
        Facts(dims=(64,), rows=(16,), batch_size=2, lookups=128, weights_dtype="fp16", segment_lengths=(1, 300)),
        Facts(dims=(3, 2000), rows=(9, 9), batch_size=5, lookups=40, weighted=True, pooling="mean",
              empty_bag=True, segment_lengths=(2, 256), steps=3, index_dtype="int32"),
    ]
    for f in cases:
        assert cells_of(f, config) <= reachable(config, search_config=False)


def _cov(*cells) -> Coverage:
    c = Coverage()
    for group in cells:
        c.add(group)
    return c


def test_zero_cells_and_unexpected_hits_are_listed():
    a = (P.FWD_GENERIC, Edge(EdgeGroup.DIM, "1"))
    b = (P.FWD_GENERIC, Edge(EdgeGroup.DIM, "< 4"))
    z = (P.BWD_SHORT, Edge(EdgeGroup.STEPS, "1"))
    odd = (P.PSW_GRAD, Edge(EdgeGroup.POOLING, "sum, unweighted"))
    data = _cov({a, b}, {a}, {odd}).to_json(frozenset({a, b, z}))
    assert data["examples"] == 3
    assert data["counts"] == {"forward, generic": {"D: 1": 2, "D: < 4": 1},
                              "per-sample-weight gradient": {"pooling: sum, unweighted": 1}}
    assert data["zero"] == [["backward, short tier", "steps: 1"]]
    assert data["reachable"] == 3 and data["covered"] == 2
    assert data["unexpected"] == [["per-sample-weight gradient", "pooling: sum, unweighted"]]
    assert data["paths"] == [p.label for p in PATHS] and data["edges"] == [e.label for e in EDGES]


def test_merge_adds_counts_and_keeps_cells_zero_everywhere():
    a = (P.FWD_GENERIC, Edge(EdgeGroup.DIM, "1"))
    b = (P.BWD_SHORT, Edge(EdgeGroup.DIM, "1"))
    c = (P.BWD_LONG, Edge(EdgeGroup.DIM, "1"))
    reach = frozenset({a, b, c})
    one = _cov({a}, {a, b}).to_json(reach)
    two = _cov({a}).to_json(reach)
    merged = merge_json([one, None, two])
    assert merged["examples"] == 3
    assert merged["counts"] == {"forward, generic": {"D: 1": 3}, "backward, short tier": {"D: 1": 1}}
    assert merged["zero"] == [["backward, long tier (two kernels)", "D: 1"]]
    assert merged["covered"] == 2 and merged["reachable"] == 3
    assert merge_json([None]) is None


def test_novelty_is_monotone_in_the_rarest_count():
    cov = Coverage()
    a, b = (P.FWD_GENERIC, Edge(EdgeGroup.DIM, "1")), (P.BWD_SHORT, Edge(EdgeGroup.DIM, "1"))
    assert steer.novelty(cov, {a, b}) == 1.0  # opens two cells
    assert steer.novelty(cov, set()) == 0.0
    seen = []
    for _ in range(5):
        cov.add({a})
        seen.append(steer.novelty(cov, {a}))
    assert all(x > y for x, y in zip(seen, seen[1:]))
    assert steer.novelty(cov, {a, b}) == 1.0  # b still unseen: the rarest cell decides
    cov.add({b})
    assert steer.novelty(cov, {a, b}) == 0.5


def test_campaign_json_and_heatmap(tmp_path):
    spec = CaseSpec(tables=((10, 3),), batch_size=2, max_length=3)
    result = check.case_result(spec, tensors(spec, weights=False), DEFAULT, 0.0, None, None)
    assert result.cells == cells_of(facts_of(spec, tensors(spec, weights=False), result.segment_hist), DEFAULT)
    budget = get_budget("quick")
    res = CampaignResult(DEFAULT, budget, 0, search_config=False)
    res.record(result)
    data = report.campaign_json(res)["coverage"]
    assert data["examples"] == 1 and data["covered"] == len(result.cells)
    # the campaign's own budget bounds its segments
    assert data["reachable"] == len(reachable(DEFAULT, search_config=False, max_lookups=budget.max_lookups))
    g = coverage_map.grid(data)
    row = g[data["paths"].index("forward, generic")]
    assert row[data["edges"].index("D: < 4")] == 1
    assert row[data["edges"].index("D: 1")] == 0               # reachable, not hit
    assert row[data["edges"].index("bad offsets: decreasing")] is None  # unreachable on the forward row
    pytest.importorskip("matplotlib", reason="the heatmap needs matplotlib (an optional dependency)")
    path, why = coverage_map.write(data, tmp_path)
    assert why is None and path.exists() and path.stat().st_size > 1000
    assert "coverage:" in report.campaign_text(res)
    # readable at a glance: the many edge classes are rows whose labels read across, the few paths columns
    from PIL import Image

    width, height = Image.open(path).size
    assert len(data["edges"]) > 3 * len(data["paths"]) and height > width, (width, height)
    # a search that stopped at its failure draws its cells at zero pale, and its title says why
    path, _ = coverage_map.write(data, tmp_path / "failed", stopped="the search stopped at its failure")
    pixels = Image.open(path).convert("RGB").getdata()
    red = tuple(int(coverage_map.ZERO[i:i + 2], 16) for i in (1, 3, 5))
    pale = tuple(int(coverage_map.PALE[i:i + 2], 16) for i in (1, 3, 5))
    assert red not in set(pixels) and pale in set(pixels)


def test_merge_of_runs_under_different_configs():
    a = (P.FWD_GENERIC, Edge(EdgeGroup.DIM, "1"))
    s = (P.FWD_SMALL_TABLE, Edge(EdgeGroup.DIM, "1"))
    f = (P.BWD_FUSED, Edge(EdgeGroup.DIM, "1"))
    one = _cov({a}).to_json(frozenset({a, s}))           # this run could reach the small-table cell
    two = _cov({a}, {f}).to_json(frozenset({a}))         # this one hit a cell outside its reachable set
    merged = merge_json([one, two])
    assert merged["zero"] == [["forward, small-table", "D: 1"]]
    assert merged["unexpected"] == [["backward, long tier (fused)", "D: 1"]]
    assert merged["reachable"] == 2 and merged["covered"] == 1
    three = _cov({s}).to_json(frozenset({s}))
    assert merge_json([one, three])["zero"] == []


def test_session_counts_cases_and_their_configs():
    from fuzz.execution.verdict import SessionCoverage

    spec = CaseSpec(tables=((10, 3),), batch_size=2, max_length=3)
    result = check.case_result(spec, tensors(spec, weights=False), DEFAULT, 0.0, None, None)
    session = SessionCoverage()
    assert session.to_json() is None
    session.add(result, DEFAULT.replace(faults=("fwd_skip_last_id",)))
    session.add(result, DEFAULT)
    data = session.to_json()
    assert data["examples"] == 2 and session.configs == {DEFAULT}
    assert data["covered"] == len(result.cells) and data["unexpected"] == []


def test_a_bad_id_in_a_middle_bag():
    bad = BadBatchSpec(tables=((5, 3),), batch_size=5, max_length=3,
                       bad_ids=(BadId("rows_plus_one", bag="middle", element="last"),), seed=1)
    case = BadIdCase(CaseSpec(tables=bad.tables, batch_size=5, max_length=3), bad)
    t = tensors(case, weights=False)
    off = t.offsets.tolist()
    assert t.indices[off[3] - 1].item() == 6  # E + 1, last id of bag 2 of 0..4
    f = facts_of(case, t)
    assert f.bad_ids == (("rows_plus_one", "middle", "last"),)
    assert {e for _, e in cells_of(f, DEFAULT) if e.group == EdgeGroup.BAD_ID_BAG} == {
        Edge(EdgeGroup.BAD_ID_BAG, "rows_plus_one @ middle")}
    with pytest.raises(ValueError, match="bag"):
        BadBatchSpec(tables=((5, 3),), batch_size=1, bad_ids=(BadId("rows", bag="centre"),))


@pytest.mark.fuzz
@settings(max_examples=examples(40), deadline=None)
@given(campaign_cases(DEFAULT, 4000, pack=4))
def test_every_campaign_draw_runs_a_step(drawn):
    """Why a campaign's reachable cells hold no "0 steps" edge: no draw is forward-only."""
    case, _, _ = split_draw(drawn, DEFAULT)
    assert case.spec.steps >= 1
    assert all(sub.steps >= 1 for sub in getattr(case, "subs", ()))


def test_feature_map_cells_count_features_and_skip_the_small_table_path():
    """A table read by two features, and by four: their edges; one small table read by two features is no
    single-feature batch, so the forward takes the generic path, and the reachability rule agrees."""
    from fuzz.judge.coverage import FEATURE_MAP_CLASSES, Edge, EdgeGroup, cells_of, facts_of, reachable

    shared, many = (Edge(EdgeGroup.FEATURE_MAP, m) for m in FEATURE_MAP_CLASSES)
    small = KernelConfig(small_table_path=True, small_table_max_rows=16, small_table_min_dim=8,
                         small_table_max_dim=8, small_table_min_pooling=1)
    one = CaseSpec(tables=((16, 8),), batch_size=4, length_profile="fixed", max_length=2, weights_dtype="fp16",
                   output_dtype="fp32", seed=1)
    assert {p for p, _ in cells_of(facts_of(one, tensors(one, weights=False)), small)} >= {Path.FWD_SMALL_TABLE}
    for fmap, edges in (((0, 0), {shared}), ((0, 0, 0, 0), {shared, many})):
        spec = dataclasses.replace(one, feature_table_map=fmap)
        cells = cells_of(facts_of(spec, tensors(spec, weights=False)), small)
        assert {e for _, e in cells if e.group == EdgeGroup.FEATURE_MAP} == edges
        assert Path.FWD_GENERIC in {p for p, _ in cells} and Path.FWD_SMALL_TABLE not in {p for p, _ in cells}
    assert not cells_of(facts_of(one, tensors(one, weights=False)), small) & {(p, e) for p in Path for e in (shared, many)}
    cells = reachable(small, search_config=False)
    assert {(Path.FWD_GENERIC, shared), (Path.FWD_GENERIC, many), (Path.BWD_SHORT, many)} <= cells
    assert not {(Path.FWD_SMALL_TABLE, shared), (Path.FWD_SMALL_TABLE, many)} & cells
    assert not {c for c in reachable(small, search_config=False, feature_map=False)
                if c[1].group == EdgeGroup.FEATURE_MAP}  # a SUT without the capability


def test_a_short_run_beside_a_long_run_puts_the_long_tier_in_its_band_and_that_cell_is_reachable():
    """A batch's SL bands count for every path it takes: runs of 10 and 64 lookups under the defaults (threshold 64)
    hit (long tier, 4-31), so the reachability rule must list that cell, or a session's summary calls the hit a
    classifier bug."""
    from fuzz.judge import coverage

    config = KernelConfig()
    facts = coverage.Facts(dims=(8,), rows=(100,), batch_size=4, lookups=80, segment_lengths=(10, 64))
    cell = (Path.BWD_LONG, coverage.Edge(coverage.EdgeGroup.SEGMENT, "4-31"))
    hit = coverage.cells_of(facts, config)
    assert cell in hit
    missing = hit - coverage.reachable(config, search_config=False)
    assert not missing, sorted((p.value, e.value) for p, e in missing)
