"""Built-in SUT adapters, capability fitting and known findings.

FBGEMM's CPU TBE, the torch baseline and this project's kernels as systems under test;
campaigns against them, with and without their triage lists; the torch-ops bounds check
against the sequential reference; the CUDA adapter on a GPU (skipped elsewhere).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

from fuzz.budgets import Budget
from cases import BadBatchSpec, BadId, BadIdCase, CaseSpec, initial_weights, materialize_bad
from fuzz.judge import CaseResult, run_case
from fuzz.cli import main
from fuzz.judge.differential import check_case, failures
from fuzz.gate.correctness import run_gate
from fuzz.judge.known import TRIAGE, KnownFinding, explain, for_sut
from fuzz.profiles import examples
from strategies.space import campaign_cases
from fuzz.errors import SUTError, TorchBoundsError
from fuzz.status import FailureKind
from fuzz.sut.protocol import get, packed_weights, params_for
from fuzz.sut.fit import fit_case, fit_strategy, refusal
from fuzz.sut.torch_bounds import check_bounds
from fuzz.campaign.triage import run_triaged
from oracles import fbgemm_cpu
from oracles.compare import Check, Mismatch, Oracle, Report
from oracles.reference_bounds import reference_bounds_check
from strategies.bad_inputs import bad_batch_specs
from fuzz.sut import build_module
from tbe import KernelConfig
from tbe.modes import BoundsCheckMode

needs_fbgemm = pytest.mark.skipif(not fbgemm_cpu.available(), reason="fbgemm_gpu CPU ops did not load")
SPEC = CaseSpec(tables=((20, 4), (9, 8)), batch_size=3, max_length=5, seed=3)
BUDGET = Budget("sut-test", seconds=120.0, shrink_seconds=10.0, max_examples=12, max_lookups=400)


# ----------------------------------------------------------------------------- adapters
@pytest.mark.parametrize("sut", ["torch", pytest.param("fbgemm-cpu", marks=needs_fbgemm), "triton"])
@pytest.mark.parametrize("pooling, weighted, optimizer", [("sum", True, "exact_rowwise_adagrad"),
                                                          ("mean", False, "exact_sgd"), ("sum", False, "exact_sgd")])
def test_adapters_agree_with_fp64(sut, pooling, weighted, optimizer):
    spec = dataclasses.replace(SPEC, pooling=pooling, weighted=weighted, optimizer=optimizer, steps=2)
    reports = check_case(spec, sut=sut)
    assert not failures(reports), "\n".join(map(str, failures(reports)))
    assert any("weights after update" in r.what for r in reports) and any("forward" in r.what for r in reports)


def test_torch_adapter_is_checked_for_real(monkeypatch):
    """The same checks fail a torch SUT whose update uses twice the learning rate, or whose
    pooling is off by one part in 10^4: the adapter's agreement above is not vacuous."""
    from fuzz.sut import torch_tbe as sut_torch

    spec = dataclasses.replace(SPEC, optimizer="exact_rowwise_adagrad", learning_rate=0.5)
    real_backward = sut_torch.TorchInstance.backward

    def doubled(self, grad_output):
        self.p = dataclasses.replace(self.p, learning_rate=2 * self.p.learning_rate)
        return real_backward(self, grad_output)

    monkeypatch.setattr(sut_torch.TorchInstance, "backward", doubled)
    assert [r for r in failures(check_case(spec, sut="torch")) if "weights after update" in r.what]
    monkeypatch.setattr(sut_torch.TorchInstance, "backward", real_backward)
    real_bag = sut_torch.F.embedding_bag
    monkeypatch.setattr(sut_torch.F, "embedding_bag", lambda *a, **k: real_bag(*a, **k) * (1 + 1e-4))
    assert [r for r in failures(check_case(spec, sut="torch")) if "forward" in r.what]


def test_seeded_initial_weights_are_the_modules():
    for wd in ("fp32", "fp16", "bf16"):
        spec = dataclasses.replace(SPEC, weights_dtype=wd, seed=11)
        assert torch.equal(initial_weights(spec), build_module(spec).weights.cpu())


@pytest.mark.parametrize("sut", ["torch", pytest.param("fbgemm-cpu", marks=needs_fbgemm), "triton"])
def test_adapters_start_from_the_given_weights_and_count_warnings(sut):
    target = get(sut)
    w0 = initial_weights(SPEC)
    tables = [w0[:80].view(20, 4).clone(), w0[80:].view(9, 8).clone()]
    inst = target.build(params_for(SPEC, None, tables))
    assert torch.equal(packed_weights(inst), w0)
    idx, off = torch.tensor([0, 25, 3, 1, 9, 2]), torch.tensor([0, 2, 3, 3, 4, 5, 6])
    for _ in range(2):
        with torch.no_grad():
            inst.forward(idx, off)
    assert inst.bounds_check_warnings() == 4  # id 25 (table 0) and id 9 (table 1 has 9 rows), twice


@pytest.mark.parametrize("sut", ["torch", pytest.param("fbgemm-cpu", marks=needs_fbgemm)])
def test_fatal_rejects_bad_input(sut):
    from fuzz.errors import FatalBoundsCheck

    spec = dataclasses.replace(SPEC, bounds_check="fatal")
    inst = get(sut).build(params_for(spec, None, [torch.zeros(20, 4), torch.zeros(9, 8)]))
    with pytest.raises(FatalBoundsCheck):
        inst.forward(torch.tensor([0, 25, 3, 1, 2, 2]), torch.tensor([0, 2, 3, 3, 4, 5, 6]))


@settings(max_examples=examples(100), deadline=None)
@given(bad_batch_specs(max_tables=3, max_batch=4))
def test_torch_bounds_check_matches_the_reference(spec):
    """The prefix-maximum formulation repairs, counts and rejects exactly as the sequential walk."""
    batch = materialize_bad(spec)
    for mode in (BoundsCheckMode.WARNING, BoundsCheckMode.IGNORE, BoundsCheckMode.FATAL):
        ref = reference_bounds_check(batch.rows, batch.indices, batch.offsets, mode)
        try:
            ids, off, warnings = check_bounds(batch.rows, batch.indices, batch.offsets, mode)
        except TorchBoundsError:
            assert mode == BoundsCheckMode.FATAL and ref.fatal, spec
            continue
        assert not (mode == BoundsCheckMode.FATAL and ref.fatal), spec
        if mode != BoundsCheckMode.FATAL:
            assert torch.equal(ids, ref.indices.long()) and torch.equal(off, ref.offsets.long()), spec
            assert warnings == ref.warnings, (mode, warnings, ref.warnings, spec)


def test_fbgemm_cuda_says_why_it_is_not_available():
    from fuzz.sut import fbgemm_cuda as sut_fbgemm_cuda

    sut = get("fbgemm-cuda")
    assert sut.capabilities.dim_multiple == 4 and "fatal" not in sut.capabilities.bounds_modes
    reason = sut.available()
    if torch.cuda.is_available():
        pytest.skip(f"a GPU is present (reason: {reason})")
    assert reason is not None and "CUDA" in reason
    assert sut_fbgemm_cuda.probe_params().tables == ((2, 4),)


# ----------------------------------------------------------------------------- capability fitting
def test_fitting_keeps_every_draw_within_fbgemm_capabilities():
    caps = get("fbgemm-cpu").capabilities
    seen = set()

    @hypothesis_seed(3)
    @settings(max_examples=150, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(fit_strategy(campaign_cases(KernelConfig(), 2000, search_config=caps.kernel_config), caps))
    def draw(case):
        assert refusal(case, caps) is None, case
        s = case.spec
        seen.update({("D", d) for _, d in s.tables} | {("out", s.output_dtype), ("bad", case.bad is not None)})

    draw()
    dims = {d for k, d in seen if k == "D"}
    assert all(d % 4 == 0 for d in dims) and len(dims) > 3
    assert {("out", "fp16"), ("out", "fp32"), ("bad", True), ("bad", False)} <= seen


def test_fbgemm_cuda_is_never_fed_what_could_corrupt_the_device():
    caps = get("fbgemm-cuda").capabilities
    assert "fatal" not in caps.bounds_modes and "minus_one" not in caps.bad_ids and not caps.bad_offsets
    bad = BadIdCase(CaseSpec(tables=((6, 4),), batch_size=2),
                    BadBatchSpec(((6, 4),), 2, bad_ids=(BadId("minus_one"), BadId("rows")),
                                 bad_offsets=("decreasing", "last_short")))
    assert "minus_one" in refusal(bad, caps)
    fitted = fit_case(bad, caps)
    assert fitted.bad.bad_ids == (BadId("rows"),) and fitted.bad.bad_offsets == () and refusal(fitted, caps) is None


def test_fitting_maps_and_refuses():
    caps = get("fbgemm-cpu").capabilities
    spec = CaseSpec(tables=((5, 1), (7, 65)), batch_size=2, weights_dtype="bf16", output_dtype="bf16")
    fitted = fit_case(spec, caps)
    assert fitted.tables == ((5, 4), (7, 68)) and fitted.weights_dtype == "fp16" and fitted.output_dtype == "fp16"
    assert refusal(spec, caps).startswith("weights_dtype='bf16'") and refusal(fitted, caps) is None
    with pytest.raises(SUTError, match="weights_dtype='bf16'"):
        check_case(spec, sut="fbgemm-cpu")
    assert fit_case(spec, get("triton").capabilities) is spec  # a SUT that runs everything: unchanged
    readme_like = dataclasses.replace(caps, bounds_modes=("none",), per_sample_weights=False)
    bad = BadIdCase(CaseSpec(tables=((6, 4),), batch_size=2), BadBatchSpec(((6, 4),), 2, bad_ids=(BadId("rows"),)))
    assert fit_case(bad, readme_like) is None  # no mode that repairs or rejects: no bad-id cases


# ----------------------------------------------------------------------------- known findings
def _result(case, *checks: Check, error: str = None, oracle: Oracle = Oracle.FP64) -> CaseResult:
    """A CaseResult failing exactly ``checks`` (plus a passing one), or crashing with ``error``."""
    reports = [Report(f"step 1 {c}", False, Mismatch(0, 0, 0, 1.0, 2.0, 0.1), 1, 1, check=c, step=1, oracle=oracle)
               for c in checks]
    reports.append(Report("step 0 bounds-check warnings", True, None, 0, 1, check=Check.WARNINGS, step=0))
    return CaseResult(case, reports, 1, frozenset(), 0.0, error)


def test_known_findings_match_on_sut_case_and_check():
    mean_w16 = CaseSpec(tables=((4, 4),), batch_size=1, pooling="mean", weighted=True, output_dtype="fp16")
    fwd, upd = Check.FORWARD, Check.WEIGHTS
    ids = [f.id for f in explain("fbgemm-cpu", _result(mean_w16, fwd, upd))]
    assert ids == ["fbgemm-weighted-mean-fp16-forward", "fbgemm-weighted-mean-backward"]
    assert explain("fbgemm-cpu", _result(mean_w16, fwd, Check.UNTOUCHED)) is None
    assert explain("fbgemm-cpu", _result(mean_w16, fwd, oracle=Oracle.FBGEMM)) is None  # FBGEMM's own check
    assert explain("torch", _result(mean_w16, fwd)) is None                       # not triaged for that SUT
    assert explain("fbgemm-cpu", _result(dataclasses.replace(mean_w16, output_dtype="fp32"), fwd)) is None
    assert explain("fbgemm-cpu", _result(mean_w16, fwd), only=()) is None          # restricted to none
    minus = BadIdCase(CaseSpec(tables=((3, 4),), batch_size=1),
                      BadBatchSpec(((3, 4),), 1, bad_ids=(BadId("minus_one"),)))
    crash = "Traceback...\nRuntimeError: Index 0 is out of bounds: -1, range 0 to 3"
    assert [f.id for f in explain("fbgemm-cpu", _result(minus, error=crash))] == ["fbgemm-minus-one-raises"]
    assert explain("fbgemm-cpu", _result(minus, error="RuntimeError: something else")) is None
    assert all(f.suts for f in TRIAGE) and len({f.id for f in TRIAGE}) == len(TRIAGE)
    minus_one = next(f for f in for_sut("fbgemm-cpu") if f.id == "fbgemm-minus-one-raises")
    assert minus_one.error and not minus_one.checks  # matched on its error alone


def test_a_finding_of_failure_kinds_explains_them_whatever_their_text():
    """One bad access shows as an access the sanitizer stopped, a dead worker or a CUDA error: a finding with
    ``kinds`` explains each on its kind alone, and nothing else (an exception, a failing check)."""
    case = CaseSpec(tables=((3, 4),), batch_size=1)
    finding = KnownFinding("memory", ("fbgemm-cpu",), "test entry: any memory fault", lambda c: True,
                           kinds=(FailureKind.SANITIZER, FailureKind.CRASH))
    for kind in (FailureKind.SANITIZER, FailureKind.CRASH):
        result = dataclasses.replace(_result(case, error="whatever the text says"), error_kind=kind)
        assert [f.id for f in explain("fbgemm-cpu", result, (finding,))] == ["memory"]
    for kind in (FailureKind.EXCEPTION, FailureKind.CUDA_ERROR):
        result = dataclasses.replace(_result(case, error="whatever the text says"), error_kind=kind)
        assert explain("fbgemm-cpu", result, (finding,)) is None
    assert explain("fbgemm-cpu", _result(case, Check.FORWARD), (finding,)) is None


@needs_fbgemm
@pytest.mark.fuzz
def test_fbgemm_campaign_records_known_findings_and_fails_on_an_untriaged_one(tmp_path, capsys):
    """With its triage list the campaign passes and lists each finding shrunk; with one entry
    removed, that disagreement is a failure again."""
    res = run_triaged(KernelConfig(), BUDGET, seed=0, artifacts_dir=tmp_path, sut="fbgemm-cpu")
    assert res.ok, res.failure and res.failure.text()
    assert res.known, "a fbgemm-cpu campaign must meet at least one triaged disagreement"
    for k in res.known:
        assert explain("fbgemm-cpu", k.result) and k.result.lookups <= 100 and k.artifact.is_dir()
        assert k.artifact.parent == tmp_path / "known"
    assert main(["replay", str(res.known[0].artifact)]) == 0  # the saved finding replays as known
    assert "KNOWN" in capsys.readouterr().out
    first = res.known[0].finding
    triage = tuple(f for f in TRIAGE if f.id != first.id)
    res2 = run_triaged(KernelConfig(), BUDGET, seed=0, artifacts_dir=tmp_path / "b", sut="fbgemm-cpu", triage=triage)
    assert not res2.ok and res2.artifact is not None
    assert first.id not in {k.finding.id for k in res2.known}
    assert explain("fbgemm-cpu", res2.failure, triage) is None
    assert first in (explain("fbgemm-cpu", res2.failure) or ()), res2.failure.text()


def forward_findings_sut():
    """``module:factory`` for the tests below: the triton SUT carrying its own finding, which
    explains any forward mismatch (so the planted forward fault becomes a known finding). It is
    fed valid batches without a bounds check: under the fused check the planted fault also skips
    copying the last id of a bag to the checked ids the backward reads (garbage there, a crash),
    which the finding does not explain."""
    from fuzz.sut.triton_tbe import factory

    finding = KnownFinding("any-forward", (), "test entry: every forward mismatch is triaged", lambda case: True,
                           ("forward vs fp64",))
    sut = factory()
    caps = dataclasses.replace(sut.capabilities, bad_ids=(), bad_offsets=(), bounds_modes=("none",))
    return dataclasses.replace(sut, findings=(finding,), capabilities=caps)


@pytest.mark.fuzz
def test_a_suts_own_findings_are_known_in_campaigns_and_the_gate():
    name = "tests.fuzz.sut.test_sut_adapters:forward_findings_sut"
    faulty = KernelConfig(faults=("fwd_skip_last_id",))
    tiny = Budget("tiny", seconds=60.0, shrink_seconds=20.0, max_examples=6, max_lookups=300)
    res = run_triaged(faulty, tiny, artifacts_dir=None, sut=name)
    assert res.ok and [k.finding.id for k in res.known] == ["any-forward"], res.failure and res.failure.text()
    short = Budget("tiny", seconds=3.0, shrink_seconds=1.0, max_examples=1, max_lookups=300)
    gate = run_gate(KernelConfig(), faulty, short, sut=name)
    assert gate.ok and any("known finding(s) any-forward" in n for n in gate.notes), gate.reasons
    assert not run_gate(KernelConfig(), faulty, short).ok  # plain triton: the same failure fails the gate


@needs_fbgemm
def test_fbgemm_fp16_sgd_finding_is_the_step_rounding():
    """Pins fbgemm-fp16-sgd-step-rounding: FBGEMM's new rows equal w - fp16(lr * g), bit for bit."""
    from fuzz.sut.fbgemm_cpu import FbgemmInstance

    spec = CaseSpec(tables=((50, 8),), batch_size=32, weights_dtype="fp16", length_profile="fixed", max_length=3)
    w0 = initial_weights(spec).view(50, 8)
    inst = FbgemmInstance(params_for(spec, None, [w0.clone()]))
    idx = torch.randint(0, 50, (96,), generator=torch.Generator().manual_seed(0))
    off = torch.arange(0, 97, 3)
    grad = torch.randn(32, 8, generator=torch.Generator().manual_seed(1))
    inst.forward(idx, off)
    inst.backward(grad)
    g = torch.zeros(50, 8).index_add_(0, idx, grad.repeat_interleave(3, 0))
    lr = torch.tensor(spec.learning_rate)
    step16 = (w0.float() - (lr * g).half().float()).half()
    touched = torch.zeros(50, dtype=torch.bool)
    touched[idx] = True
    got = inst.weights()[0]
    assert torch.equal(got[touched], step16[touched])
    assert not torch.equal(got[touched], (w0.float() - lr * g).half()[touched])  # one rounding would differ


@needs_fbgemm
def test_fbgemm_minus_one_finding_still_holds():
    bad = BadIdCase(CaseSpec(tables=((3, 4),), batch_size=1, max_length=2),
                    BadBatchSpec(((3, 4),), 1, max_length=2, bad_ids=(BadId("minus_one"),)))
    res = run_case(bad, sut="fbgemm-cpu")
    assert res.error is not None and "out of bounds: -1" in res.error
    assert [f.id for f in explain("fbgemm-cpu", res)] == ["fbgemm-minus-one-raises"]


def test_seeded_weights_are_uniform_per_table_from_one_generator():
    """What a seed means, which replays rematerialize: per table in order, Uniform(-1/sqrt(E), 1/sqrt(E)) drawn
    as float64 ``rand`` from one generator seeded once, rounded to the weights' dtype."""
    import math

    from tbe.layout import TableLayout, parse_specs, seeded_weights

    shapes = [(20, 4), (9, 8), (1, 3)]
    layout = TableLayout(parse_specs(shapes))
    g = torch.Generator().manual_seed(7)
    want = torch.cat([(torch.rand(e * d, generator=g, dtype=torch.float64) * 2 - 1) * (1.0 / math.sqrt(e))
                      for e, d in shapes])
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        got = seeded_weights(layout, dtype, seed=7)
        assert torch.equal(got, want.to(dtype))
        got.zero_()  # a fresh tensor: the next caller is not handed this one
        assert torch.equal(seeded_weights(layout, dtype, seed=7), want.to(dtype))
