"""A triaged campaign saves an unexplained failure like a plain campaign does: the config it failed
under (drawn overrides applied) and the environment of the worker that ran it."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import strategies as st

from fuzz.budgets import Budget
from fuzz.campaign.triage import run_triaged
from fuzz.execution.supervisor import shared
from fuzz.judge.known import KnownFinding
from fuzz.status import FailureKind
from cases import CaseSpec, Drawn, HotRow
from tbe import KernelConfig

TINY = Budget("tiny", seconds=30.0, shrink_seconds=20.0, max_examples=3, max_lookups=300)


def forward_triaged_sut():
    """``module:factory``: the triton SUT with a finding of its own (any forward mismatch), so campaigns
    against it are triaged; valid batches only."""
    from fuzz.sut.triton_tbe import factory

    finding = KnownFinding("any-forward", (), "test entry: every forward mismatch is triaged", lambda case: True,
                           ("forward vs fp64",))
    sut = factory()
    caps = dataclasses.replace(sut.capabilities, bad_ids=(), bad_offsets=(), bounds_modes=("none",))
    return dataclasses.replace(sut, findings=(finding,), capabilities=caps)


class MarkedSupervisor:
    """The shared supervisor, with a mark in the environment it reports, to tell it from the driver's."""

    def run(self, *args, **kwargs):
        return shared().run(*args, **kwargs)

    @property
    def environment(self):
        env = shared().environment
        return None if env is None else {**env, "mark": "the supervised worker"}


@pytest.mark.fuzz
def test_untriaged_failure_under_drawn_overrides_is_saved_with_its_config_and_environment(tmp_path):
    spec = CaseSpec(tables=((30, 6),), batch_size=3, max_length=2, hot_rows=(HotRow(0, 4, 11),), seed=3)
    overrides = (("chunk_size", 4), ("long_run_threshold", 8))
    config = KernelConfig(faults=("skip_last_chunk_update",))  # only the long tier shows it: not a forward finding
    res = run_triaged(config, TINY, artifacts_dir=tmp_path, sut="tests.fuzz.campaign.test_triage:forward_triaged_sut",
                      use_database=False, supervisor=MarkedSupervisor(), strategy=st.just(Drawn(spec, overrides)))
    assert not res.ok and res.stopped_by == "failure" and not res.known
    assert KernelConfig.load(res.artifact / "config.json") == config.replace(**dict(overrides))
    env = json.loads((res.artifact / "environment.json").read_text())
    assert env.get("mark") == "the supervised worker"
    meta = json.loads((res.artifact / "meta.json").read_text())
    assert meta["config_overrides"] == dict(overrides) and meta["config_under_test"]["chunk_size"] == 256
    assert res.failure_overrides == dict(overrides)


def mean_as_sum_sut():
    """``module:factory``: PyTorch's TBE pooling MEAN bags as SUM, with that triaged as a known finding of its own
    (a SUT without a KernelConfig, so its campaign runs the opening tour's cases as they are)."""
    from fuzz.sut.torch_tbe import TorchInstance, factory
    from oracles.compare import Check

    class MeanAsSum(TorchInstance):
        def __init__(self, p):
            super().__init__(dataclasses.replace(p, pooling="sum"))

    checks = (Check.FORWARD, Check.WEIGHTS, Check.MOMENTUM, Check.PSW_GRAD)
    finding = KnownFinding("mean-as-sum", (), "test entry: MEAN pooled as SUM",
                           lambda case: case.spec.pooling == "mean", checks)
    return dataclasses.replace(factory(), name="mean-as-sum", build=MeanAsSum, findings=(finding,))


def test_a_triaged_campaign_goes_on_with_the_tour_where_the_round_before_stopped():
    """The tour's first MEAN case fails with the known finding and ends the round; the next round runs the tour's
    remaining cases, not the ones before again, so every tour case runs once in all."""
    from fuzz.sut.protocol import get as get_sut
    from fuzz.sut.fit import fit_case
    from strategies.tour import tour

    sut = "tests.fuzz.campaign.test_triage:mean_as_sum_sut"
    budget = Budget("t", seconds=60.0, shrink_seconds=2.0, max_examples=24, max_lookups=300)
    caps = get_sut(sut).capabilities
    cases = [c for c in (fit_case(Drawn(d.case), caps) for d in tour(KernelConfig(), budget.max_lookups)) if c]
    res = run_triaged(KernelConfig(), budget, artifacts_dir=None, sut=sut, use_database=False)
    assert res.ok and [k.finding.id for k in res.known] == ["mean-as-sum"], res.failure
    assert res.tour_examples == len(cases), (res.tour_examples, len(cases))


@pytest.mark.parametrize("weights, expected, got, explained", [
    ("fp32", 0.19394567, 0.1939697265625, True),      # an fp16 value: rounded through fp16
    ("fp32", 0.19394567, 0.19394568, False),        # off the fp16 grid: some other error
    ("bf16", 3.937e-7, 4.172325134277344e-07, True),  # below fp16's normal range, on its subnormal grid
    ("bf16", 0.5, 0.50390625, False),               # normal range: every bf16 value is an fp16 one, not evidence
    ("bf16", 1e5, float("inf"), True),              # past fp16's largest value
])
def test_stochastic_rounding_through_fp16_is_matched_on_the_worst_entry(weights, expected, got, explained):
    from fuzz.judge.known import _stored_through_fp16
    from oracles.compare import Mismatch

    case = CaseSpec(tables=((8, 4),), batch_size=1, weights_dtype=weights)
    assert _stored_through_fp16(case, Mismatch(0, 0, 0, expected, got, 1e-9)) is explained


def test_a_finding_of_wrong_weights_explains_the_stochastic_rounding_checks_of_those_weights():
    """The stochastic-rounding checks judge the stored weights as "weights after update" does: wrong weights (a
    TorchRec argsort case, say) fail all three, and a finding that explains the first explains the others; a
    finding of the forward explains none of them."""
    from oracles.compare import Check, Report

    case = CaseSpec(tables=((8, 4),), batch_size=1, weights_dtype="fp16", weighted=True)
    weights = KnownFinding("w", ("torch",), "test entry: wrong weights", lambda c: True, (Check.WEIGHTS,))
    forward = KnownFinding("f", ("torch",), "test entry: wrong forward", lambda c: True, (Check.FORWARD,))
    for check in (Check.WEIGHTS, Check.SR_NEIGHBOURS, Check.SR_BIAS):
        report = Report(f"step 0 {check.value}", False, None, 1, 1, check=check)
        assert weights.explains(report, case) and not forward.explains(report, case)
    assert not weights.explains(Report("step 0 momentum", False, None, 1, 1, check=Check.MOMENTUM), case)


# A table's features split into two runs ([0, 1, 2, 0]): FBGEMM's row-wise Adagrad raises, its SGD steps twice.
SPLIT = CaseSpec(tables=((1, 4), (1, 4), (1, 4)), feature_table_map=(0, 1, 2, 0), batch_size=1, max_length=1,
                 length_profile="fixed", index_dtype="int32", seed=1)


@pytest.mark.parametrize("output, optimizer, known, kind", [
    ("fp32", "exact_rowwise_adagrad", "fbgemm-adagrad-unsorted-feature-map", FailureKind.EXCEPTION),
    ("fp32", "exact_sgd", "fbgemm-sgd-split-feature-runs", FailureKind.MISMATCH),
    ("fp16", "exact_sgd", "fbgemm-fp16-output-unsorted-feature-map", FailureKind.EXCEPTION),
])
def test_fbgemm_cpu_feature_map_findings_are_known(output, optimizer, known, kind):
    """FBGEMM's CPU TBE fails these cases, and only the entry for that optimizer, output and map explains the
    failure."""
    from fuzz.judge.check import run_case
    from fuzz.judge.known import explain

    spec = dataclasses.replace(SPLIT, output_dtype=output, optimizer=optimizer)
    r = run_case(spec, KernelConfig(), sut="fbgemm-cpu")
    assert not r.ok and r.kind == kind
    assert [f.id for f in explain("fbgemm-cpu", r) or ()] == [known]
    assert explain("fbgemm-cpu", r, only=[f"not-{known}"]) is None
    if output == "fp32":
        other = dataclasses.replace(r, case=dataclasses.replace(
            spec, optimizer=({"exact_sgd", "exact_rowwise_adagrad"} - {optimizer}).pop()))
        assert explain("fbgemm-cpu", other) is None  # the other optimizer's entry does not cover it
    else:
        assert explain("fbgemm-cpu", dataclasses.replace(r, case=dataclasses.replace(spec, output_dtype="fp32"))) is None
    adjacent = dataclasses.replace(r, case=dataclasses.replace(spec, feature_table_map=(0, 0, 1, 2)))
    assert explain("fbgemm-cpu", adjacent) is None  # nor does either entry cover a map with each table's features adjacent


def test_fbgemm_cpu_adagrad_on_an_unsorted_map_under_vbe_updates_wrongly_and_is_known():
    """Under VBE, with a feature of batch 0 between a table's two features, FBGEMM's row-wise Adagrad returns wrong
    rows instead of raising; the VBE entry explains it, and not the same case as a fixed batch (which raises)."""
    from fuzz.judge.check import run_case
    from fuzz.judge.known import explain

    spec = CaseSpec(tables=((64, 64), (300, 64)), batch_size=8, batch_size_per_feature=(8, 0, 7),
                    feature_table_map=(0, 1, 0), optimizer="exact_rowwise_adagrad", length_profile="fixed",
                    max_length=1, learning_rate=2.0, values="dyadic", seed=0)
    r = run_case(spec, KernelConfig(), sut="fbgemm-cpu")
    assert not r.ok and r.kind == FailureKind.MISMATCH
    assert [f.id for f in explain("fbgemm-cpu", r) or ()] == ["fbgemm-adagrad-unsorted-feature-map-vbe"]
    fixed = run_case(dataclasses.replace(spec, batch_size_per_feature=None), KernelConfig(), sut="fbgemm-cpu")
    assert fixed.kind == FailureKind.EXCEPTION
    assert [f.id for f in explain("fbgemm-cpu", fixed) or ()] == ["fbgemm-adagrad-unsorted-feature-map"]
    sgd = run_case(spec.with_modes(optimizer="exact_sgd"), KernelConfig(), sut="fbgemm-cpu")
    assert sgd.ok
