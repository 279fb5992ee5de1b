"""VBE (a batch size per feature) in the case model: records, validation, materialization, packs, reduction,
fitting to a SUT's capabilities, draws, and every SUT declaring it judged against FP64."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cases import CaseSpec, HotRow, PackCase, assemble, materialize
from fuzz.campaign.reduce import candidates
from fuzz.judge import coverage
from fuzz.judge.check import run_case
from fuzz.sut import fit_case
from fuzz.sut.fit import refusal
from fuzz.sut.protocol import Capabilities, get
from oracles import fbgemm_cpu
from oracles.findings import FBGEMM_CPU_VBE_INT32_HEAP
from strategies.specs import case_specs
from tbe import KernelConfig

VBE = CaseSpec(tables=((10, 4), (7, 8)), batch_size=6, feature_table_map=(0, 1, 0), batch_size_per_feature=(6, 0, 2),
               hot_rows=(HotRow(0, 2, 9),), weighted=True, seed=3, steps=2, optimizer="exact_rowwise_adagrad")
SMALL = KernelConfig(long_run_threshold=8, chunk_size=4)


def test_round_trip_and_fixed_records_unchanged():
    assert CaseSpec.from_dict(VBE.to_dict()) == VBE and VBE.to_dict()["batch_size_per_feature"] == [6, 0, 2]
    plain = dataclasses.replace(VBE, batch_size_per_feature=None)
    assert "batch_size_per_feature" not in plain.to_dict() and not plain.vbe
    assert VBE.size() == (2, 8, VBE.expected_lookups()) and VBE.output_size == 6 * 4 + 2 * 4


@pytest.mark.parametrize("fields,error,text", [
    (dict(batch_size_per_feature=(6, 0)), ValueError, "batch_size_per_feature has 2 entries"),
    (dict(batch_size_per_feature=(6, -1, 2)), ValueError, r"batch_size_per_feature\[1\] = -1"),
    (dict(batch_size_per_feature=(6, 0, 2.0)), TypeError, r"batch_size_per_feature\[2\]"),
    (dict(batch_size=5), ValueError, r"batch_size=5 must be max\(batch_size_per_feature=\[6, 0, 2\]\) = 6"),
    (dict(hot_rows=(HotRow(1, 0, 2),)), ValueError, r"hot_rows: HotRow\(table=1.* has no bag to go in"),  # table 1's one feature has batch 0
])
def test_bad_sizes_are_named(fields, error, text):
    with pytest.raises(error, match="CaseSpec." + text):
        dataclasses.replace(VBE, **fields)


def test_materialized_batch_has_each_features_bags():
    m = materialize(VBE)
    assert m.offsets.numel() == 6 + 0 + 2 + 1
    assert all(g.shape == (VBE.output_size,) for g in m.grad_outputs)
    rows = torch.tensor([10] * 6 + [10] * 2)  # features 0 and 2 read table 0; feature 1 has no bag
    per_bag = m.offsets[1:] - m.offsets[:-1]
    assert bool((m.indices < torch.repeat_interleave(rows, per_bag)).all())
    assert int(m.segment_lengths().max()) >= 9  # the hot row's run, over two features' bags
    assert torch.equal(materialize(VBE).indices, m.indices)  # deterministic


def test_packs_refuse_vbe_and_assemble_leaves_it_alone():
    plain = CaseSpec(tables=((5, 4),), batch_size=2)
    with pytest.raises(ValueError, match=r"PackCase.subs\[1\].batch_size_per_feature is \[6, 0, 2\]"):
        PackCase((plain, VBE.with_modes(optimizer="exact_sgd", weighted=False, steps=1)))
    assert assemble([plain, VBE], 10_000) == plain and assemble([VBE, plain], 10_000) == VBE


def test_reduction_cuts_each_features_batch_and_drops_features():
    cands = list(candidates(VBE))
    assert dataclasses.replace(VBE, batch_size_per_feature=None) in cands  # the fixed batch of max B_f
    sizes = {c.batch_size_per_feature for c in cands if c.tables == VBE.tables and len(c.feature_tables) == 3}
    assert {(3, 0, 2), (6, 0, 1)} <= sizes
    assert (6, 0, 0) in {c.batch_size_per_feature for c in candidates(dataclasses.replace(VBE, batch_size_per_feature=(6, 0, 1)))}
    assert any(c.feature_table_map == (1, 0) and c.batch_size_per_feature == (0, 2) for c in cands)
    assert all(c.batch_size == max(c.batch_sizes) for c in cands if c.vbe)


def test_capability_gates_vbe_cases():
    caps = Capabilities(feature_table_map=True)
    assert fit_case(VBE, caps) is None and "batch_size_per_feature=[6, 0, 2] (no VBE)" in refusal(VBE, caps)
    fitted = fit_case(VBE, dataclasses.replace(caps, vbe=True, empty_batch=False))
    assert fitted.batch_size_per_feature == (6, 1, 2)
    for name in ("triton", "torch", "fbgemm-cpu", "fbgemm-cuda"):
        assert get(name).capabilities.vbe, name


def test_vbe_cells():
    assert coverage.vbe_edges(()) == set() and coverage.vbe_edges((3, 3)) == set()
    assert {e.value for e in coverage.vbe_edges((0, 3))} == set(coverage.VBE_CLASSES)
    assert {e.value for e in coverage.vbe_edges((1, 3))} == {coverage.VBE_CLASSES[1]}
    r = run_case(VBE, SMALL)
    assert {e.value for _, e in r.cells if e.group == coverage.EdgeGroup.VBE} == set(coverage.VBE_CLASSES)
    reach = coverage.reachable(KernelConfig(), search_config=False, vbe=False)
    assert not {c for c in reach if c[1].group == coverage.EdgeGroup.VBE}


@pytest.mark.parametrize("sut", ["triton", "torch", pytest.param("fbgemm-cpu", marks=pytest.mark.skipif(
    not fbgemm_cpu.available(), reason="fbgemm_gpu CPU ops did not load (fbgemm-gpu-cpu, in requirements, is this SUT)"))])
def test_suts_agree_with_fp64(sut):
    spec = VBE if sut != "fbgemm-cpu" else dataclasses.replace(VBE, feature_table_map=(0, 0, 1),
                                                               hot_rows=(HotRow(0, 2, 9),))
    for mode in ("warning", "ignore"):
        r = run_case(spec.with_modes(bounds_check=mode), SMALL, sut=sut)
        assert r.error is None and r.ok, (r.error, [str(x) for x in r.reports if not x.ok][:2])
    assert {"bwd:short", "bwd:long"} <= r.tiers


def test_the_judge_catches_a_wrong_vbe_output(monkeypatch):
    """A SUT whose VBE output swaps two features' blocks fails the forward check (the judge reads the sizes)."""
    from fuzz.sut.torch_tbe import TorchInstance

    forward = TorchInstance.forward

    def swapped(self, indices, offsets, psw=None, batch_size_per_feature=None):
        out = forward(self, indices, offsets, psw, batch_size_per_feature)
        return out.flip(0) if batch_size_per_feature is not None else out

    monkeypatch.setattr(TorchInstance, "forward", swapped)
    r = run_case(dataclasses.replace(VBE, steps=1), SMALL, sut="torch")
    assert not r.ok and r.failed_check == "forward vs fp64"


@settings(max_examples=40, database=None, derandomize=True, suppress_health_check=list(HealthCheck), deadline=None)
@given(st.data())
def test_draws_include_vbe_with_its_adversarial_forms(data):
    spec = data.draw(case_specs(max_lookups=200, shared_tables=True, vbe=True, hot_row_counts=st.integers(1, 30)))
    assert data.draw(case_specs(max_lookups=200)).batch_size_per_feature is None
    if spec.vbe:
        assert spec.batch_size == max(spec.batch_sizes)
    materialize(spec)


def test_vbe_draws_are_frequent_and_adversarial():
    seen = []

    @settings(max_examples=60, database=None, derandomize=True, suppress_health_check=list(HealthCheck),
              deadline=None)
    @given(case_specs(max_lookups=200, max_batch=16, shared_tables=True, vbe=True, hot_row_counts=st.integers(1, 30)))
    def draw(spec):
        seen.append(spec)

    draw()
    vbe = [s for s in seen if s.vbe]
    assert len(vbe) >= 10
    assert any(0 in s.batch_sizes and 16 in s.batch_sizes for s in vbe)  # batch 0 beside the largest
    assert any(s.feature_table_map for s in vbe) and any(s.hot_rows for s in vbe) and any(s.weighted for s in vbe)


# ----------------------------------------------------------------------------- FBGEMM's CPU TBE under VBE
_HEAP_CASE = CaseSpec(tables=((1, 4),), batch_size=75, batch_size_per_feature=(75,), index_dtype="int32",
                      optimizer="exact_rowwise_adagrad", output_dtype="fp16", max_length=15, learning_rate=0.5,
                      eps=1e-4, steps=3, seed=325)
_RUN = """
import json, sys
from cases import case_from_dict, tensors
from fuzz.sut.protocol import get, params_for
spec = case_from_dict(json.loads(sys.argv[1]))
t = tensors(spec)
sut = get("fbgemm-cpu").build(params_for(spec, None, None))  # past the campaign's refusal: FBGEMM itself
for grad in t.grad_outputs:
    sut.forward(t.indices, t.offsets, t.per_sample_weights, spec.batch_size_per_feature)
    sut.backward(grad)
print("ran")
"""


def test_fbgemm_cpu_is_fed_vbe_with_int64_ids_only():
    caps = get("fbgemm-cpu").capabilities
    fitted = fit_case(_HEAP_CASE, caps)
    assert fitted.vbe and fitted.index_dtype == "int64"
    assert "index_dtype='int32' with VBE" in refusal(_HEAP_CASE, caps)
    assert fit_case(dataclasses.replace(_HEAP_CASE, batch_size_per_feature=None), caps).index_dtype == "int32"


@pytest.mark.skipif(not fbgemm_cpu.available(), reason="fbgemm_gpu CPU ops did not load")
def test_fbgemm_cpu_vbe_with_int32_ids_aborts_and_with_int64_runs():
    """Pins FBGEMM_CPU_VBE_INT32_HEAP in a process of its own: fails once FBGEMM runs the int32 batch, so
    campaigns can feed it again."""
    import json
    import subprocess
    import sys


    def run(spec):
        return subprocess.run([sys.executable, "-c", _RUN, json.dumps(spec.to_dict())], capture_output=True,
                              text=True, timeout=120)
    crashed = run(_HEAP_CASE)
    assert crashed.returncode < 0 and "ran" not in crashed.stdout, FBGEMM_CPU_VBE_INT32_HEAP
    clean = run(dataclasses.replace(_HEAP_CASE, index_dtype="int64"))
    assert clean.returncode == 0 and clean.stdout.strip() == "ran", clean.stderr[-500:]
