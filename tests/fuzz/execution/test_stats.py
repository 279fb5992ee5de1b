"""Campaign statistics: recorded per case, merged across rounds and workers in one place (fuzz.execution.stats)."""

from __future__ import annotations

import json

import pytest

from fuzz.compile.watch import CompileCounts
from fuzz.execution import workers
from fuzz.execution.stats import CampaignStats
from fuzz.judge.check import CaseResult
from oracles.compare import Check, Mismatch, Report
from cases import CaseSpec
from strategies.tour import TourShare

SPEC = CaseSpec(tables=((4, 2),), batch_size=1)


def _result(lookups: int, tiers: set, ratio: float, fbgemm: str = "") -> CaseResult:
    worst = Mismatch(0, 0, 0, expected=0.0, got=ratio, bound=1.0)  # |got - expected| / bound = ratio
    report = Report("step 0 table 0 weights after update", ratio <= 1, worst, int(ratio > 1), 8,
                    check=Check.WEIGHTS, step=0, table=0)
    r = CaseResult(SPEC, [report], lookups, frozenset(tiers), 0.1, fbgemm=fbgemm)
    r.compiles = CompileCounts(compiled=1, loaded=2, interpreted=False)
    return r


def _stats(*results: CaseResult, seconds: float = 1.0) -> CampaignStats:
    s = CampaignStats()
    for r in results:
        s.record(r)
        s.time.add({"sut": 0.1}, 0.2)
    s.seconds = seconds
    return s


def test_record_then_merge_adds_counts_and_keeps_the_worst_ratio_per_check():
    a = _stats(_result(10, {"bwd:short"}, 0.5, "checked"), _result(5, {"bwd:short", "bwd:long"}, 0.25))
    b = _stats(_result(7, {"bwd:long"}, 0.75, "checked"))
    b.unmaterializable, b.unmaterializable_example, b.expected_failures = 2, "first", 1
    a.merge(b)
    assert (a.examples, a.lookups, a.seconds) == (3, 22, 2.0)
    assert a.tiers == {"bwd:short": 2, "bwd:long": 2}
    assert a.max_ratio == {"weights after update": pytest.approx(0.75)}
    assert a.fbgemm == {"checked": 2, "not run": 1}
    assert (a.compiles.compiled, a.compiles.loaded) == (3, 6)
    assert (a.unmaterializable, a.unmaterializable_example, a.expected_failures) == (2, "first", 1)
    assert a.time.cases == 3 and a.time.round_trip == pytest.approx(0.6)


def test_a_json_summary_reads_back_into_the_same_statistics():
    a = _stats(_result(10, {"bwd:short"}, 0.5, "checked"), _result(5, {"bwd:long"}, 0.25), seconds=3.0)
    state = json.loads(json.dumps(a.to_state()))
    back = CampaignStats.from_state(state)
    again = back.to_state()
    assert {k: v for k, v in again.items() if k != "teeth"} == {k: v for k, v in state.items() if k != "teeth"}
    assert again["teeth"] == {}  # not carried by JSON (the module docstring says so)


def test_workers_merge_through_the_same_statistics():
    a = _stats(_result(10, {"bwd:short"}, 0.5, "checked"), seconds=2.0)
    b = _stats(_result(4, {"bwd:short", "fwd:generic"}, 0.25), seconds=1.0)
    summaries = [{**x.to_state(), "kind": "campaign", "ok": True, "crashed": False, "worker": i, "seed": i,
                  "exit_code": 0, "log": f"w{i}.log"} for i, x in enumerate((a, b))]
    summaries.append({"worker": 2, "seed": 2, "crashed": True, "exit_code": 3, "log": "w2.log", "log_tail": []})
    m = workers.merge(summaries, wall=2.0, budget="quick")
    a.merge(b)
    expected = a.to_state()
    for key in ("examples", "lookups", "tiers", "max_ratio", "compiles", "fbgemm", "time_split"):
        assert m[key] == expected[key], key
    assert m["seconds"] == 2.0 and m["examples_per_s"] == 1.0 and not m["ok"] and len(m["crashed"]) == 1
    assert "tiers exercised: bwd:short x2, fwd:generic x1" in workers.merged_text(m)


def test_tour_shares_merge_once_each_and_their_cases_add_up():
    rounds = [CampaignStats(tour_shares=(TourShare(0, 2),), tour_examples=n) for n in (5, 3)]
    rounds[0].merge(rounds[1])  # a triaged campaign's rounds run one share
    assert rounds[0].tour_shares == (TourShare(0, 2),) and rounds[0].tour_examples == 8
    other = CampaignStats.from_state(json.loads(json.dumps(
        CampaignStats(tour_shares=(TourShare(1, 2),), tour_examples=4).to_state())))
    rounds[0].merge(other)  # another worker's share, read back from its JSON summary
    assert rounds[0].tour_shares == (TourShare(0, 2), TourShare(1, 2)) and rounds[0].tour_examples == 12
    merged = workers.merge([{**rounds[0].to_state(), "ok": True, "crashed": False}], wall=1.0, budget="quick")
    assert "opening tour: 12 case(s) checked, split as shares 0/2, 1/2" in workers.merged_text(merged)
    searched_alone = CampaignStats()
    assert searched_alone.to_state()["tour"] is None and CampaignStats.from_state({}).tour_shares == ()
