"""Packs (strategies.pack): sub-cases side by side in one step give each sub-case what it gets alone, a failing
pack names its sub-case and shrinks to it, and a campaign counts sub-cases apart from examples."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz.budgets import Budget
from fuzz.campaign import CampaignOptions, CampaignRunner
from fuzz.campaign.reduce import reduce_failure
from fuzz.execution.stats import CampaignStats
from fuzz.judge import CaseResult
from fuzz.judge.check import run_case
from fuzz.sut.protocol import get as get_sut
from fuzz.sut.protocol import packed_weights, params_for
from oracles.compare import Check, Mismatch, Report
from oracles.reference import table_rows
from cases import MODE_FIELDS, CaseKind, CaseSpec, HotRow, PackCase, assemble, case_from_dict, initial_weights, tensors
from strategies.pack import packs
from strategies.space import campaign_cases
from strategies.specs import case_specs
from tbe import KernelConfig, faults
from tests.strategies.test_config_space import draws

MODES = dict(pooling="mean", weighted=True, optimizer="exact_rowwise_adagrad", learning_rate=0.5)
A = CaseSpec(tables=((20, 8), (30, 5)), batch_size=3, max_length=4, seed=1, **MODES)
TH = KernelConfig().long_run_threshold  # B's hot row: a run of exactly the threshold
B = CaseSpec(tables=((300, 16),), batch_size=5, max_length=2, seed=2, hot_rows=(HotRow(0, 7, TH),), **MODES)
C = CaseSpec(tables=((10, 4),), batch_size=0, max_length=4, seed=3, **MODES)


def test_a_pack_lays_its_sub_cases_side_by_side_and_round_trips():
    p = PackCase((A, B, C))
    assert case_from_dict(p.to_dict()) == p
    spec = p.spec
    assert spec.tables == A.tables + B.tables + C.tables and spec.batch_size == 5
    assert spec.hot_rows == (HotRow(2, 7, TH),)  # B's table 0 is the pack's table 2
    assert [p.sub_of_table(t) for t in range(5)] == [0, 0, 1, 2, None]
    assert len(p.subs) == 3 and len(A.subs) == 1
    t = tensors(p)
    off = t.offsets.to(torch.int64)
    lengths = (off[1:] - off[:-1]).reshape(4, 5)
    assert lengths[:2, 3:].eq(0).all() and lengths[3].eq(0).all()  # A's and C's padding bags are empty
    assert t.indices.numel() == sum(tensors(s).indices.numel() for s in (A, B, C))
    assert torch.equal(t.initial_weights, torch.cat([initial_weights(s) for s in (A, B, C)]))


@pytest.mark.parametrize("field", MODE_FIELDS)
def test_sub_cases_that_need_different_modules_are_refused_by_name(field):
    value = {"pooling": "sum", "weights_dtype": "fp16", "output_dtype": "bf16", "index_dtype": "int32",
             "weighted": False, "optimizer": "exact_sgd", "learning_rate": 2.0, "eps": 1e-3,
             "bounds_check": "ignore", "steps": 2}[field]
    with pytest.raises(ValueError, match=rf"subs\[1\]\.{field} is"):
        PackCase((A, dataclasses.replace(A, **{field: value})))


def test_fatal_bounds_checking_runs_alone():
    fatal = dataclasses.replace(A, bounds_check="fatal")
    with pytest.raises(ValueError, match="bounds_check is 'fatal'"):
        PackCase((fatal, dataclasses.replace(B, bounds_check="fatal")))
    assert assemble([fatal, B], 10_000) == fatal


def _run_alone_and_packed(pack: PackCase):
    """Per sub-case: (forward output, weights after one step) alone, and its slice of the pack's."""
    def step(case):
        spec, t = case.spec, tensors(case)
        tables = [table_rows(spec.layout, t.initial_weights, i).clone() for i in range(spec.num_tables)]
        sut = get_sut("triton").build(params_for(spec, KernelConfig(), tables))
        with torch.set_grad_enabled(True):
            out = sut.forward(t.indices.clone(), t.offsets.clone(), t.per_sample_weights)
        sut.backward(t.grad_outputs[0].clone())
        return out.detach().cpu(), packed_weights(sut)

    out, w = step(pack)
    got, col, at = [], 0, 0
    for sub in pack.subs:
        o, sw = step(sub)
        dim, size = sum(d for _, d in sub.tables), sum(e * d for e, d in sub.tables)
        got.append(((o, out[:sub.batch_size, col:col + dim]), (sw, w[at:at + size])))
        assert out[sub.batch_size:, col:col + dim].eq(0).all()  # padding bags pool to zero
        col, at = col + dim, at + size
    return got


def test_padding_with_empty_bags_gives_each_sub_case_its_own_results():
    for (alone_out, packed_out), (alone_w, packed_w) in _run_alone_and_packed(PackCase((A, B, C))):
        assert torch.equal(alone_out, packed_out)
        assert torch.equal(alone_w, packed_w)


@settings(max_examples=6, deadline=None, derandomize=True, database=None)
@given(st.lists(case_specs(max_lookups=150, max_tables=2, max_batch=6, weights_dtypes=("fp32",),
                           output_dtypes=("fp32",)), min_size=2, max_size=3))
def test_drawn_packs_give_each_sub_case_its_own_results(subs):
    pack = assemble(subs, 10_000)
    if pack.kind is not CaseKind.PACK:
        return
    for (alone_out, packed_out), (alone_w, packed_w) in _run_alone_and_packed(pack):
        assert torch.equal(alone_out, packed_out)
        assert torch.equal(alone_w, packed_w)


def test_a_failing_pack_names_its_sub_case_and_reduces_to_it():
    pack = PackCase((A, B, C))
    with faults.allow():
        config = KernelConfig(faults=("long_threshold_off_by_one",))  # B's run of exactly the threshold
    result = run_case(pack, config)
    assert not result.ok and result.sub_case == 1
    assert "(sub-case 1 of 3, the pack's tables 2-2)" in result.headline
    reduced = reduce_failure(result, lambda case: run_case(case, config), lambda: False).result
    assert reduced.case.kind is CaseKind.SPEC and not reduced.ok
    assert reduced.case.hot_rows and reduced.case.hot_rows[0].count == TH


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(packs(case_specs(max_lookups=400), 4, 1000))
def test_drawn_packs_share_modes_and_stay_within_the_lookup_budget(drawn):
    subs = drawn.subs
    assert sum(s.expected_lookups() for s in subs) <= max(1000, subs[0].expected_lookups())
    for field in MODE_FIELDS:
        assert len({getattr(s, field) for s in subs}) == 1


def test_about_half_the_drawn_packs_are_full_and_small_ones_stay():
    """Packs pay per example, so the size branch favours full packs; smaller ones, down to one, are still drawn."""
    drawn = draws(st.tuples(packs(case_specs(max_lookups=100, max_tables=1, max_batch=2), 6, 10**6),
                            st.integers(0, 10**9)), 400)  # the counter keeps Hypothesis from skipping repeated draws
    sizes = [len(d.subs) for d, _ in drawn]
    full = sizes.count(6) / len(sizes)
    assert 0.4 <= full <= 0.75, full
    assert sizes.count(1) >= 10 and len(set(sizes)) == 6


class _FailsOn63Rows:
    """Fails any case holding a table of 63 rows (an edge the table strategy draws at times), naming that table
    as the worst entry's."""

    environment: dict = {}

    def run(self, case, config, pending=None, **options):
        dims = [d for _, d in case.spec.tables]
        bad = [t for t, (e, _) in enumerate(case.spec.tables) if e == 63]
        reports = [Report("forward vs fp64", not bad, Mismatch(bad[0], 0, 0, 1.0, 0.0, 0.1) if bad else None,
                          len(bad), len(dims), check=Check.FORWARD, step=0)]
        return CaseResult(case, reports, 1, frozenset(), 0.0)


def test_a_packed_campaign_counts_sub_cases_and_shrinks_a_failure_out_of_its_pack():
    budget = Budget("t", seconds=60.0, shrink_seconds=20.0, max_examples=200, max_lookups=400, pack=4)
    config = KernelConfig()
    packed_first = 0
    for seed in range(4):
        failed = []
        res = CampaignRunner(config, budget, seed, CampaignOptions(
            artifacts_dir=None, use_database=False,
            strategy=campaign_cases(config, budget.max_lookups, search_config=False, pack=budget.pack),
            supervisor=_FailsOn63Rows(), tour_share=None,
            observe=lambda stats, result: failed.append(result) if not result.ok else None)).run()
        assert not res.ok
        assert res.sub_cases >= res.examples
        first = failed[0]
        if first.case.kind is CaseKind.PACK and len(first.case.subs) > 1:
            packed_first += 1
            assert res.sub_cases > res.examples
            assert 63 in [e for e, _ in first.case.subs[first.sub_case].tables]
        assert res.failure.case.kind is CaseKind.SPEC  # shrinking dropped the other sub-cases
        assert 63 in [e for e, _ in res.failure.case.tables]
    assert packed_first >= 1  # (measured: seeds 0 and 1 of these four first fail in a pack)


def test_a_saved_failing_pack_replays_and_names_its_sub_case(tmp_path, capsys, monkeypatch):
    from fuzz.cli import main
    from fuzz.execution import artifacts

    monkeypatch.setenv("TBE_FUZZ_ALLOW_FAULTS", "1")
    with faults.allow():
        config = KernelConfig(faults=("long_threshold_off_by_one",))
    path = artifacts.save_result(tmp_path, run_case(PackCase((A, B, C)), config), config, {"source": "test"}, None)
    assert case_from_dict(json.loads((path / "case.json").read_text())) == PackCase((A, B, C))
    for extra in ([], ["--rematerialize"]):
        assert main(["replay", str(path), *extra]) == 1
        assert "failure kind: mismatch; sub-case 1 of 3, the pack's tables 2-2" in capsys.readouterr().out


def test_stats_count_sub_cases_apart_and_merge_them():
    stats = CampaignStats()
    stats.record(CaseResult(PackCase((A, B, C)), [], 10, frozenset(), 0.0))
    stats.record(CaseResult(A, [], 5, frozenset(), 0.0))
    assert (stats.examples, stats.sub_cases) == (2, 4)
    back = CampaignStats.from_state(stats.to_state())
    back.merge(stats)
    assert (back.examples, back.sub_cases) == (4, 8)
