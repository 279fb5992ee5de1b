"""The adversarial strategies themselves: budgets respected, edges derived from the config,
every backward tier reached by the default profile, duplicates that make pairing matter,
int32 layouts on both sides of the switch. No kernels run here (cheap, many examples)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz.profiles import MAX_BAGS, MAX_COLUMN_BLOCKS, MAX_LOOKUPS, MAX_RUNS, MAX_TABLES, examples
from strategies.adversarial import fuzz_cases
from cases import materialize
from strategies.configs import NAMED
from strategies.duplicates import bad_duplicate_specs, duplicate_specs, pairing_sensitive
from strategies.int32_edges import int32_edge_specs, materialize_int32
from strategies.segments import segment_lengths
from strategies.shapes import batch_shapes
from strategies.tiers import TIERS, case_tier_report, tier_report
from tbe import KernelConfig
from tbe.layout import INT32_MAX
from tbe.routing import FIXED_SEGMENT_EDGES, LongEdge, Path, past_counter_length, segment_edges

pytestmark = pytest.mark.fuzz

# the default profile of the adversarial fuzz test (tests/strategies/test_adversarial.py draws the same)
DEFAULT_CASES = dict(max_lookups=MAX_LOOKUPS, max_runs=MAX_RUNS, max_bags=MAX_BAGS, max_tables=MAX_TABLES,
                     max_total_dim=256,
                     max_column_blocks=MAX_COLUMN_BLOCKS)


def test_segment_edges_follow_the_config():
    d = KernelConfig()
    edges = segment_edges(d)
    th, ch = d.long_run_threshold, d.chunk_size
    for x in (*FIXED_SEGMENT_EDGES, th - 1, th, th + 1, ch - 1, ch + 1, 2 * ch - 1, 2 * ch, 2 * ch + 1, 3 * ch + 1):
        assert x in edges
    moved = segment_edges(d.replace(long_run_threshold=100, chunk_size=40))
    assert {99, 100, 101, 39, 41, 79, 81, 119, 121} <= set(moved) and 255 not in moved
    assert max(segment_edges(d, limit=300)) <= 300


@settings(max_examples=examples(300))
@given(st.sampled_from(list(NAMED)), st.integers(0, 20_000_000), st.data())
def test_segment_lengths_stay_within_budget(name, budget, data):
    sls = data.draw(segment_lengths(NAMED[name], budget))
    assert all(sl >= 1 for sl in sls) and sum(sls) <= budget


def test_hot_profile_reaches_millions_on_a_gpu_budget():
    """The GPU budget (>= 10M lookups) admits a single run of several million lookups."""
    seen = []

    @settings(max_examples=200, database=None, derandomize=True)
    @given(segment_lengths(KernelConfig(), 12_000_000, profile="hot"))
    def collect(sls):
        seen.append(max(sls))

    collect()
    assert max(seen) >= 5_000_000 and min(seen) >= KernelConfig().long_run_threshold


def test_tier_report_rule():
    cfg = KernelConfig(long_run_threshold=8, chunk_size=4)
    r = tier_report(torch.tensor([1, 7, 8, 9, 12]), 37, cfg)
    assert (r.short_runs, r.long_runs, r.chunks, r.max_segment) == (2, 3, 2 + 3 + 3, 12)
    assert r.tiers == {Path.BWD_SHORT, Path.BWD_LONG}
    assert r.edges == {"exact_threshold", "multi_chunk", "partial_last_chunk"}
    fused = tier_report(torch.tensor([4]), 4, KernelConfig(long_run_threshold=4, chunk_size=4, fused_long_tier=True))
    assert fused.tiers == {Path.BWD_FUSED} and fused.edges == {"exact_threshold", "single_chunk"}
    gated = KernelConfig(long_run_threshold=4, chunk_size=4, fused_long_tier=True, fused_long_min_lookups=5)
    assert tier_report(torch.tensor([4]), 4, gated).tiers == {Path.BWD_LONG}
    # 4,096 chunks of 4 fill the counter; one lookup more is the edge
    assert LongEdge.PAST_COUNTER not in tier_report(torch.tensor([4096 * 4]), 4096 * 4, cfg).edges
    assert LongEdge.PAST_COUNTER in tier_report(torch.tensor([3, 4096 * 4 + 1]), 4096 * 4 + 4, cfg).edges


def test_default_profile_hits_every_tier():
    """Every backward tier and long-run edge is reached by the fuzz test's own strategy."""
    tiers, edges, lookups = set(), set(), []

    @settings(max_examples=examples(400), database=None)  # drawing only: about 10 ms an example
    @given(fuzz_cases(**DEFAULT_CASES))
    def collect(fc):
        case = materialize(fc.spec)
        assert case.num_lookups <= MAX_LOOKUPS
        r = case_tier_report(case, fc.kernel_config())
        tiers.update(r.tiers)
        edges.update(r.edges)
        lookups.append(case.num_lookups)

    collect()
    assert tiers == set(TIERS), f"tiers reached: {sorted(t.value for t in tiers)}"
    # a run past 4,096 chunks fits the interpreter's lookup cap under no named config
    affordable = min(past_counter_length(c) for c in NAMED.values()) <= MAX_LOOKUPS
    expected = set(LongEdge) - (set() if affordable else {LongEdge.PAST_COUNTER})
    assert edges == expected, f"long-run edges reached: {sorted(edges)}"


def test_column_block_cap_keeps_rows_wider_than_the_bucket():
    """Under the 4-wide narrow config rows span at most 8 column blocks, and some still span several."""
    widest = []

    @settings(max_examples=60, database=None, derandomize=True)
    @given(fuzz_cases(max_lookups=400, max_runs=40, max_column_blocks=8, configs=("narrow",)))
    def collect(fc):
        dims = [d for _, d in fc.spec.tables]
        assert max(dims) <= 8 * max(NAMED["narrow"].dim_buckets), dims
        widest.append(max(dims))

    collect()
    assert max(widest) > 2 * max(NAMED["narrow"].dim_buckets), "no row spans several column blocks"


@settings(max_examples=examples(100))
@given(st.sampled_from(["default", "small", "uneven"]), st.data())
def test_duplicates_make_the_weight_pairing_matter(name, data):
    spec = data.draw(duplicate_specs(NAMED[name], MAX_LOOKUPS))
    case = materialize(spec)
    assert case.per_sample_weights is not None
    assert torch.unique(case.per_sample_weights).numel() == case.num_lookups, "weights must be distinct"
    assert pairing_sensitive(case), spec.to_json()


@settings(max_examples=examples(100))
@given(bad_duplicate_specs())
def test_bad_duplicates_keep_weights_and_duplicates(spec):
    assert spec.weighted and spec.duplicates and spec.batch_size >= 1


def test_shapes_reach_the_extremes():
    seen = dict(max_T=0, max_B=0, max_D=0, odd_D=False, D1=False, single_bag=False, empty=False)

    @settings(max_examples=400, database=None, derandomize=True)
    @given(batch_shapes(max_lookups=12_000_000, max_bags=64 * 65536))
    def collect(shape):
        T, B = len(shape.tables), shape.batch_size
        assert T * B <= 64 * 65536 and T * B * shape.max_length <= 12_000_000
        ds = [d for _, d in shape.tables]
        seen["max_T"] = max(seen["max_T"], T)
        seen["max_B"] = max(seen["max_B"], B)
        seen["max_D"] = max(seen["max_D"], *ds)
        seen["odd_D"] |= any(d % 2 and d > 1 for d in ds)
        seen["D1"] |= 1 in ds
        seen["single_bag"] |= T * B == 1
        seen["empty"] |= shape.length_profile == "empty" or shape.max_length == 0

    collect()
    assert seen["max_T"] == 64 and seen["max_B"] >= 32768 and seen["max_D"] >= 1000, seen
    assert seen["odd_D"] and seen["D1"] and seen["single_bag"] and seen["empty"], seen


def test_int32_specs_sit_on_both_sides_of_the_switch():
    sides, last_ids = set(), 0

    @settings(max_examples=200, database=None, derandomize=True)
    @given(int32_edge_specs())
    def collect(spec):
        nonlocal last_ids
        sides.add(spec.crosses_limit)
        b = materialize_int32(spec)
        T, B = len(spec.rows), spec.batch_size
        start = int(b.offsets[(T - 1) * B])
        last_ids += int((b.indices[start:] == spec.rows[-1] - 1).sum())
        assert all(0 <= int(x) for x in b.indices) and sum(spec.rows) - 1 in range(INT32_MAX - 3, 2**32 + 3)

    collect()
    assert sides == {True, False} and last_ids > 0


@settings(max_examples=examples(40), deadline=None)
@given(st.data())
def test_spread_bad_ids_hold_each_kind_once_at_distinct_places(data):
    """Every bad-id kind once, over distinct (bag, element) places; fbgemm-comparable drops the divergent kinds."""
    from cases import DIVERGENT_ID_KINDS, ID_KINDS
    from strategies.bad_inputs import spread_bad_ids

    comparable = data.draw(st.booleans())
    ids = data.draw(spread_bad_ids(comparable))
    kinds = [k for k in ID_KINDS if not (comparable and k in DIVERGENT_ID_KINDS)]
    assert sorted(b.kind for b in ids) == sorted(kinds)
    places = [(b.bag, b.element) for b in ids]
    assert len(set(places)) == len(places)
