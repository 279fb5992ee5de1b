"""Features sharing a table (``feature_table_map``): our TBE in every tier against the FP64 reference, the bounds
check per feature, FBGEMM's CPU TBE and torch's adapter, the case record, its reduction and the draws."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cases import CaseSpec, HotRow, PackCase, materialize, tensors
from fuzz.campaign.reduce import candidates
from fuzz.judge.check import run_case
from fuzz.profiles import examples
from fuzz.sut import fit_case
from fuzz.sut.fit import refusal
from fuzz.sut.protocol import Capabilities, get
from oracles import fbgemm_cpu
from oracles.checks import check_forward
from oracles.findings import (FBGEMM_ADAGRAD_UNSORTED_FEATURE_MAP, FBGEMM_FP16_OUTPUT_UNSORTED_FEATURE_MAP,
                              FBGEMM_SGD_SPLIT_FEATURE_RUNS,
                              fbgemm_feature_map_differences, fbgemm_update_difference, split_tables)
from oracles.reference_bounds import reference_bounds_check
from strategies.specs import case_specs
from tbe import KernelConfig, TritonTBE
from tbe.forward_dispatch import choose_path
from tbe.modes import Optimizer, Pooling
from tbe.routing import Path
from tests.backward_helpers import make_batch, on, train_step

SPECS = [(6, 4), (5, 7)]
FMAP = [0, 1, 0, 0]  # three features read table 0, in columns 0, 11 and 15
B = 3
LENGTHS = [5, 9, 0, 3, 4, 2, 7, 0, 6, 8, 8, 1]  # per feature, per sample
SMALL = KernelConfig(long_run_threshold=8, chunk_size=4)
TIERS = {
    "default": KernelConfig(),
    "split": SMALL,
    "fused": SMALL.replace(fused_long_tier=True),
    "short_rows": SMALL.replace(bwd_short_runs_per_program=4),
    "vector": SMALL.replace(chunk_size=8, bwd_long_gather=2, bwd_long_vector=True),
    "narrow": SMALL.replace(dim_buckets=(4,)),  # rows wider than 4 loop over columns
    "fused_check": SMALL.replace(fused_bounds_check=True),
}


def shared_batch(weighted: bool, seed: int = 0):
    """The features' batch, each feature's hot id the same row of table 0 (a run spanning three features)."""
    return make_batch([SPECS[t] for t in FMAP], B, LENGTHS, torch.int64, seed, weighted, hot=[1, 2, 1, 1])


def module(config: KernelConfig, optimizer: str, pooling: str = "sum", fmap=FMAP, **kw) -> TritonTBE:
    return TritonTBE(SPECS, optimizer=optimizer, learning_rate=0.3, eps=1e-3, pooling=pooling, config=config,
                     feature_table_map=fmap, **kw)


# ----------------------------------------------------------------------------- our TBE
@pytest.mark.parametrize("tier", list(TIERS))
@pytest.mark.parametrize("weighted,optimizer,pooling", [(False, "exact_sgd", "sum"),
                                                        (True, "exact_rowwise_adagrad", "mean")])
def test_shared_tables_train_as_fp64(tier, weighted, optimizer, pooling):
    m = module(TIERS[tier], optimizer, pooling)
    idx, off, psw = on(m, *shared_batch(weighted))
    out = m(idx, off, psw)
    fwd = check_forward(m.layout, m.weights.detach(), idx, off, psw, B, m.pooling, out.detach(), what="forward")
    assert fwd.ok, fwd
    assert out.shape == (B, sum(SPECS[t][1] for t in FMAP))
    assert not train_step(m, idx, off, psw)


def test_a_row_read_by_several_features_is_one_run():
    """The backward merges the row's lookups over the features: one update of the summed gradient, and the
    split tier sees a run longer than any one feature's share of it."""
    m = module(SMALL, "exact_rowwise_adagrad")
    idx, off, _ = shared_batch(False)
    layout = m.layout
    lin = torch.tensor([layout.hash_size_cumsum[layout.feature_tables[int(f)]] for f in
                        torch.repeat_interleave(torch.arange(len(FMAP)), (off[B::B] - off[:-1:B]))]) + idx
    per_feature_max = max(int(torch.unique(lin[off[f * B]:off[(f + 1) * B]], return_counts=True)[1].max())
                          for f in (0, 2, 3))
    merged = int(torch.unique(lin, return_counts=True)[1].max())
    assert merged > per_feature_max
    config = KernelConfig(long_run_threshold=per_feature_max + 1, chunk_size=4)  # long only when merged
    assert not train_step(module(config, "exact_rowwise_adagrad"), idx, off, None)


def test_a_single_feature_map_is_the_identity_and_a_shared_one_takes_the_generic_forward():
    m = TritonTBE([(64, 64)], feature_table_map=[0])
    assert m.layout.feature_table_map == () and not m.layout.shared
    path = choose_path(module(KernelConfig(), "exact_sgd").layout.feature_dims, [64] * 4, 4096, 16, torch.float16,
                       torch.float32, False, KernelConfig())
    assert path is Path.FWD_GENERIC  # the small-table path takes a single feature


@pytest.mark.parametrize("fmap,error,text", [
    ([0, 2], ValueError, "feature_table_map[1] = 2"),
    ([0, -1], ValueError, "feature_table_map[1] = -1"),
    ([1, 1], ValueError, "no feature from table 0"),
    ([0, 1.0], TypeError, "feature_table_map[1]"),
    ("01", TypeError, "feature_table_map"),
])
def test_bad_map_is_named(fmap, error, text):
    with pytest.raises(error, match=text.replace("[", r"\[").replace("]", r"\]")):
        TritonTBE(SPECS, feature_table_map=fmap)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("mode", ["warning", "ignore", "fatal"])
def test_bounds_check_uses_each_features_table(fused, mode):
    """Id 5 is in range for table 0 (6 rows) and out of it for table 1 (5 rows): repaired where feature 1 reads."""
    m = module(KernelConfig(fused_bounds_check=fused), "exact_sgd", bounds_check=mode)
    idx, off = on(m, torch.tensor([5, 5, 5, 5, 4, 0]),  # B = 1: one bag per feature, feature 1 holds [5]
                  torch.tensor([0, 2, 3, 5, 6]))
    ref = reference_bounds_check(m.layout.feature_rows, idx, off, m.bounds_check_mode)
    assert ref.fatal and ref.first_bad == ("id", 2) and ref.warnings == (mode == "warning")
    if mode == "fatal":
        with pytest.raises(Exception, match="5"):
            m(idx, off)
        return
    out = m(idx, off)
    fixed = ref.indices
    fwd = check_forward(m.layout, m.weights.detach(), fixed, ref.offsets, None, 1, m.pooling, out.detach(),
                        what="forward")
    assert fwd.ok, fwd
    assert int(m.bounds_check_warnings[0]) == (1 if mode == "warning" else 0)


# ----------------------------------------------------------------------------- the case record
SHARED = CaseSpec(tables=((10, 4), (7, 8)), batch_size=3, feature_table_map=(0, 1, 0, 0),
                  hot_rows=(HotRow(0, 2, 12),), weighted=True, seed=3, learning_rate=0.1, steps=2,
                  optimizer="exact_rowwise_adagrad")


def test_spec_round_trip_and_old_records():
    assert CaseSpec.from_dict(SHARED.to_dict()) == SHARED
    plain = CaseSpec(tables=((10, 4),), batch_size=2)
    assert "feature_table_map" not in plain.to_dict()  # records written before the field read the same
    assert CaseSpec.from_dict(plain.to_dict()) == plain
    assert CaseSpec(tables=((3, 4), (3, 4)), batch_size=1, feature_table_map=(0, 1)).feature_table_map == ()


@pytest.mark.parametrize("fmap,text", [((0, 2), "CaseSpec.feature_table_map[1] = 2"),
                                       ((1, 1), "CaseSpec.feature_table_map=[1, 1] reads no feature from table 0")])
def test_spec_rejects_a_bad_map(fmap, text):
    with pytest.raises(ValueError, match=text.replace("[", r"\[").replace("]", r"\]")):
        CaseSpec(tables=((10, 4), (7, 8)), batch_size=3, feature_table_map=fmap)


def test_materialized_batch_is_per_feature():
    m = materialize(SHARED)
    assert m.offsets.numel() == 4 * 3 + 1 and m.grad_outputs[0].shape == (3, 4 + 8 + 4 + 4)
    f = torch.repeat_interleave(torch.arange(4), m.offsets[3::3] - m.offsets[:-1:3])
    rows = torch.tensor([10, 7, 10, 10])[f]
    assert bool((m.indices < rows).all())
    hot = (m.indices == 2) & (f != 1)
    assert int(hot.sum()) == 12 and len(set(f[hot].tolist())) > 1  # the hot row spans features
    assert int(m.segment_lengths().max()) == 12
    assert SHARED.size() == (2, 12, SHARED.expected_lookups())


def test_pack_concatenates_maps():
    other = dataclasses.replace(SHARED, tables=((5, 4),), feature_table_map=(), hot_rows=(), seed=1)
    pack = PackCase((SHARED, other))
    assert pack.spec.feature_table_map == (0, 1, 0, 0, 2)
    assert tensors(pack).offsets.numel() == 5 * 3 + 1


def test_reduction_drops_features_with_their_tables():
    cands = list(candidates(SHARED))
    maps = {c.feature_table_map for c in cands if c.tables == SHARED.tables}
    assert {(1, 0, 0), (0, 1, 0)} <= maps  # one feature of table 0 dropped
    alone = [c for c in cands if c.tables == ((10, 4),)]
    assert alone and all(c.feature_table_map == (0, 0, 0) for c in alone)
    assert any(c.tables == ((7, 8),) and c.feature_table_map == () for c in cands)


# ----------------------------------------------------------------------------- SUTs and oracles
needs_fbgemm = pytest.mark.skipif(not fbgemm_cpu.available(), reason="fbgemm_gpu CPU ops did not load")


@pytest.mark.parametrize("sut", ["triton", "torch", pytest.param("fbgemm-cpu", marks=needs_fbgemm)])
def test_suts_agree_with_fp64(sut):
    spec = SHARED if sut != "fbgemm-cpu" else dataclasses.replace(SHARED, feature_table_map=(0, 0, 0, 1))
    for config in (KernelConfig(), SMALL):
        r = run_case(spec, config, sut=sut)
        assert r.error is None and r.ok, (r.error, [x for x in r.reports if not x.ok][:2])
        if sut != "triton":
            break


@needs_fbgemm
def test_fbgemm_cpu_adagrad_rejects_an_unsorted_map():
    """Pins the triaged FBGEMM finding: fails once FBGEMM trains here, so the FBGEMM sample can check it again."""
    assert fbgemm_feature_map_differences(SHARED.optimizer, torch.float32, SHARED.feature_table_map) == (
        FBGEMM_ADAGRAD_UNSORTED_FEATURE_MAP,)
    r = run_case(SHARED, KernelConfig(), sut="fbgemm-cpu")
    assert r.error is not None and "c_block size" in r.error, FBGEMM_ADAGRAD_UNSORTED_FEATURE_MAP
    assert run_case(SHARED.with_modes(optimizer="exact_sgd"), KernelConfig(), sut="fbgemm-cpu").ok


@needs_fbgemm
@pytest.mark.parametrize("fmap", [(1, 0), (0, 1, 0), (0, 0, 1)])
def test_fbgemm_cpu_fp16_output_rejects_an_unsorted_map(fmap):
    """Pins the triaged FBGEMM finding: its fp16-output forward raises on a map that is not non-decreasing (fails
    once FBGEMM runs it, so the FBGEMM sample can check it again); fp32 output runs."""
    unsorted = fmap != tuple(sorted(fmap))
    assert bool(fbgemm_feature_map_differences(Optimizer.EXACT_SGD, torch.float16, fmap)) is unsorted
    spec = CaseSpec(tables=((5, 4), (7, 4)), batch_size=2, feature_table_map=fmap, output_dtype="fp16", seed=2)
    r = run_case(spec, KernelConfig(), sut="fbgemm-cpu")
    assert (r.error is not None and "range 0 to -" in r.error) is unsorted, FBGEMM_FP16_OUTPUT_UNSORTED_FEATURE_MAP
    assert run_case(dataclasses.replace(spec, output_dtype="fp32"), KernelConfig(), sut="fbgemm-cpu").error is None


@needs_fbgemm
@pytest.mark.parametrize("fmap, split", [((0, 1, 0), True), ((0, 1, 2, 0), True), ((1, 0, 0), False),
                                         ((0, 0, 1), False)])
def test_fbgemm_cpu_sgd_steps_once_per_run_of_adjacent_features(fmap, split):
    """Pins the triaged FBGEMM finding: table 0's row 0, read once by each of its features, ends bit-exact at one fp32
    step per run of adjacent features (two roundings where the runs are split), and the split maps alone are
    triaged."""
    assert split_tables(fmap) is split
    assert (fbgemm_update_difference(Optimizer.EXACT_SGD, torch.float32, fmap) is not None) is split
    lr, D = 0.05, 4
    runs = [[0], [2]] if fmap == (0, 1, 0) else [[0], [3]] if split else [[f for f, t in enumerate(fmap) if t == 0]]
    gen = torch.Generator().manual_seed(0)
    twice = 0
    for _ in range(8):
        tbe = fbgemm_cpu.FbgemmTBE([(1, D)] * (max(fmap) + 1), Optimizer.EXACT_SGD, lr, 1e-4, torch.float32,
                                   torch.float32, Pooling.SUM, feature_table_map=fmap)
        w0 = [torch.randn(1, D, generator=gen) for _ in range(max(fmap) + 1)]
        tbe.load(w0)
        grad = torch.randn(1, len(fmap) * D, generator=gen).view(len(fmap), D)
        tbe.step(torch.zeros(len(fmap), dtype=torch.int64), torch.arange(len(fmap) + 1), None, grad.view(1, -1))
        want = w0[0][0]
        for run in runs:  # the run's gradient summed in fp32, then one fused multiply-add
            g = grad[run[0]].clone()
            for f in run[1:]:
                g = g + grad[f]
            want = (want.double() - torch.tensor(lr).double() * g.double()).float()
        got = tbe.weights()[0][0]
        assert torch.equal(got, want), (got, want, FBGEMM_SGD_SPLIT_FEATURE_RUNS)
        exact = (w0[0][0].double() - lr * sum(grad[f].double() for r in runs for f in r)).float()
        twice += not torch.equal(got, exact)
    assert twice > 0 or not split  # the second rounding shows


def test_capability_gates_shared_cases():
    caps = Capabilities()
    assert not caps.feature_table_map and fit_case(SHARED, caps) is None
    assert "feature_table_map=[0, 1, 0, 0]" in refusal(SHARED, caps)
    for name in ("triton", "torch", "fbgemm-cpu", "fbgemm-cuda"):
        assert get(name).capabilities.feature_table_map, name


@settings(max_examples=examples(60), suppress_health_check=list(HealthCheck), deadline=None)
@given(st.data())
def test_draws_include_shared_tables(data):
    spec = data.draw(case_specs(max_lookups=200, shared_tables=True))
    plain = data.draw(case_specs(max_lookups=200))
    assert plain.feature_table_map == ()
    assert spec.expected_lookups() <= 200 + sum(h.count for h in spec.hot_rows)
    materialize(spec)


def test_shared_draws_are_frequent():
    seen = []

    @settings(max_examples=60, database=None, derandomize=True, suppress_health_check=list(HealthCheck),
              deadline=None)
    @given(case_specs(max_lookups=200, shared_tables=True, hot_row_counts=st.integers(1, 50)))
    def draw(spec):
        seen.append(spec)

    draw()
    shared = [s for s in seen if s.feature_table_map]
    assert len(shared) >= 6
    assert any(max(s.feature_table_map.count(t) for t in set(s.feature_table_map)) >= 4 for s in shared)
    assert any(s.weighted for s in shared) and any(s.hot_rows for s in shared)


def test_campaign_runs_shared_tables(tmp_path):
    out = subprocess.run([sys.executable, "-m", "fuzz", "run", "--max-examples", "12", "--seed", "0",
                          "--artifacts", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
