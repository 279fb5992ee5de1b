"""TorchRec's Triton TBE as a system under test, on the CPU: loading each version, the stand-ins, the CPU
transpose op, the switches, its known findings (each pinned to the case that shows it) and a campaign.

Every test needs the version snapshots (``TBE_FUZZ_TORCHREC_SNAPSHOTS``, default
``../shared/third_party/torchrec-triton-tbe`` beside the repository) and fbgemm_gpu; where either is absent
it is skipped with that reason.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz.errors import SUTError
from fuzz.judge import run_case
from fuzz.judge.differential import check_case, failures
from fuzz.judge.known import explain
from fuzz.profiles import examples
from fuzz.sut.protocol import address, get, require, split_address
from fuzz.sut.torchrec_triton import cpu_ops, interpreter_fixes, loader
from oracles import fbgemm_cpu
from oracles.bounds_backward import step_bounds
from oracles.compare import Check
from fuzz.status import FailureKind
from cases import BadBatchSpec, BadId, BadIdCase, CaseSpec, HotRow
from tbe import KernelConfig
from tbe.backend import INTERPRETED
from tests.paths import REPO

SNAPSHOTS = loader.snapshots()
BY_NAME = {p.name: p for p in SNAPSHOTS}
NEWEST = "3f2fe5f3"
BEFORE_PSW_FIX = "1fb0a9f9"

pytestmark = [
    pytest.mark.skipif(not fbgemm_cpu.available(), reason="fbgemm_gpu does not import (TorchRec's TBE needs its ops)"),
    pytest.mark.skipif(NEWEST not in BY_NAME, reason="no TorchRec Triton TBE snapshots (set "
                                                     "TBE_FUZZ_TORCHREC_SNAPSHOTS to their folder)"),
    pytest.mark.skipif(not INTERPRETED, reason="the CPU adapter runs TorchRec's kernels in Triton's interpreter"),
]


def sut(version: str = NEWEST) -> str:
    return address("torchrec-triton", str(BY_NAME[version]))


# ----------------------------------------------------------------------------- loading
def test_every_version_loads_and_names_its_commit():
    assert len(SNAPSHOTS) >= 2
    for folder in SNAPSHOTS:
        target = get(sut(folder.name))
        assert target.available() is None, target.available()
        assert target.version == folder.name
        assert target.name == "torchrec-triton" and target.source == str(folder.resolve())


def test_versions_live_side_by_side_and_leave_torchrec_unimported():
    """Two versions in one process are two modules (the gate runs a baseline and a candidate together), and
    neither is left importable as ``torchrec``."""
    a, b = loader.load(str(BY_NAME[BEFORE_PSW_FIX])), loader.load(str(BY_NAME[NEWEST]))
    assert a.module is not b.module and a.digest != b.digest
    assert not hasattr(a.module, "table_batched_embedding_bag_grad_per_sample_weights_kernel")
    assert hasattr(b.module, "table_batched_embedding_bag_grad_per_sample_weights_kernel")
    assert "torchrec" not in sys.modules


def test_switches_follow_each_versions_constructor():
    fields = {p.name: set(get(sut(p.name)).capabilities.config_fields) for p in SNAPSHOTS}
    assert fields["5ace9d68"] == {"stochastic_rounding"}
    assert fields["da52c2fe"] == {"hoist_transpose", "stochastic_rounding"}
    assert fields[NEWEST] == {"fused_bounds_check", "hoist_transpose", "small_table_path", "stochastic_rounding"}
    for name, fs in fields.items():  # every drawn profile names only what the version reads
        for _, overrides in get(sut(name)).capabilities.config_profiles:
            assert {f for f, _ in overrides} <= fs


def test_a_folder_without_the_module_is_refused_by_name(tmp_path):
    with pytest.raises(SUTError, match=str(tmp_path)):
        loader.module_folder(tmp_path)
    with pytest.raises(SUTError, match="no such folder"):
        loader.module_folder(tmp_path / "absent")
    assert loader.module_folder(BY_NAME[NEWEST].joinpath(*loader.PACKAGE)) == loader.module_folder(BY_NAME[NEWEST])


def test_address_round_trips_and_other_suts_take_no_source(tmp_path):
    assert split_address(sut()) == ("torchrec-triton", str(BY_NAME[NEWEST].resolve()))
    assert split_address("triton") == ("triton", None)
    with pytest.raises(SUTError, match="loads no source tree"):
        get(address("torch", str(tmp_path)))


def test_config_fields_it_does_not_read_are_refused():
    with pytest.raises(SUTError, match="chunk_size"):
        require(sut(), config=KernelConfig(chunk_size=8))
    require(sut(), config=KernelConfig(hoist_transpose=True, stochastic_rounding=True))
    require("triton", config=KernelConfig(stochastic_rounding=True))  # this project's TBE reads it too


def test_amd_stand_in_raises_if_called_and_hides_dunder_names():
    loader.load(str(BY_NAME[NEWEST]))
    amd = sys.modules[loader.AMD_MODULE]
    with pytest.raises(SUTError, match="only on AMD"):
        amd.triton_tbe_forward_weighted_kernel[(1,)](0)
    with pytest.raises(AttributeError):
        amd.__file__  # tools that walk sys.modules read it; a stand-in there hung Hypothesis's constant scan


def test_missing_feature_gates_read_as_off():
    gates = loader._Gates(type("Real", (), {"PRESENT": "real"}))
    assert gates.PRESENT == "real"
    assert gates.DISABLE_OFFSETS_ADJUSTMENT.is_enabled() is False
    assert gates.missing == {"DISABLE_OFFSETS_ADJUSTMENT"}


def test_the_interpreter_splats_a_scalar_mask_to_its_result_type():
    import triton
    import triton.language as tl

    @triton.jit
    def copy_rows(x_ptr, y_ptr, NUM_ROWS: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = (row < NUM_ROWS) & (cols < D)  # TorchRec's histogram Adagrad masks its rows so
        tl.store(y_ptr + row * D + cols, tl.load(x_ptr + row * D + cols, mask=mask, other=0.0), mask=mask)

    assert interpreter_fixes.install()
    x, y = torch.randn(3, 5), torch.zeros(3, 5)
    copy_rows[(3,)](x, y, 3, 5, 8)
    assert torch.equal(x, y)


def test_the_interpreters_bf16_casts_round_to_nearest_even():
    assert interpreter_fixes.install()
    x = torch.randn(20000) * 8
    x[:4] = torch.tensor([float("inf"), -float("inf"), 3.0e38, -0.0])
    got = torch.from_numpy(interpreter_fixes.round_to_nearest_even(x.numpy()).view(np.int16)).view(torch.bfloat16)
    assert torch.equal(got.view(torch.int16), x.to(torch.bfloat16).view(torch.int16))
    assert torch.isnan(torch.from_numpy(interpreter_fixes.round_to_nearest_even(np.array([np.nan], np.float32))
                                        .view(np.int16)).view(torch.bfloat16)).all()


# ----------------------------------------------------------------------------- the CPU transpose op
def _transpose_by_definition(hcs, bits, indices, offsets, b_t_map, info_bits):
    """FBGEMM's outputs computed lookup by lookup: every lookup's (key, info), sorted stably by the key's low
    ``bits`` bits (all of them: signed), then runs of equal linear index."""
    T, total_B = hcs.numel() - 1, offsets.numel() - 1
    rows = []
    for bag in range(total_B):
        if b_t_map is None:
            t, b = bag // (total_B // T), bag % (total_B // T)
            info = (t << info_bits) | b
        else:
            info = int(b_t_map[bag]) & 0xFFFFFFFF
            t = info >> info_bits
        for p in range(int(offsets[bag]), int(offsets[bag + 1])):
            rows.append((int(hcs[t]) + int(indices[p]), info))
    width = 8 * indices.element_size()
    key = (lambda v: v) if bits >= width else (lambda v: v & ((1 << bits) - 1))
    ordered = sorted(rows, key=lambda r: key(r[0]))  # Python's sort is stable
    runs: list[list[int]] = []
    for lin, _ in ordered:
        if runs and runs[-1][0] == lin:
            runs[-1][1] += 1
        else:
            runs.append([lin, 1])
    return [r[0] for r in rows], [r[0] for r in ordered], [r[1] for r in ordered], runs


@settings(max_examples=examples(25), deadline=None)
@given(st.data())
def test_cpu_transpose_op_matches_its_definition(data):
    T = data.draw(st.integers(1, 3), label="T")
    B = data.draw(st.integers(1, 4), label="B")
    rows = data.draw(st.lists(st.integers(1, 40), min_size=T, max_size=T), label="rows")
    dtype = data.draw(st.sampled_from([torch.int32, torch.int64]), label="dtype")
    vbe = data.draw(st.booleans(), label="vbe")
    lengths = data.draw(st.lists(st.integers(0, 5), min_size=T * B, max_size=T * B), label="lengths")
    hcs = torch.tensor([0] + list(np.cumsum(rows)), dtype=torch.int64)
    ids = [data.draw(st.integers(0, rows[bag // B] - 1)) for bag, n in enumerate(lengths) for _ in range(n)]
    indices = torch.tensor(ids, dtype=dtype)
    offsets = torch.tensor([0] + list(np.cumsum(lengths)), dtype=dtype)
    bits = data.draw(st.sampled_from([int(np.log2(max(1, int(hcs[-1])))) + 1, 8 * indices.element_size()]))
    info_bits = 26
    b_t_map = torch.tensor([(bag // B << info_bits) | (bag % B) for bag in range(T * B)],
                           dtype=torch.int64).to(torch.int32) if vbe else None
    out = cpu_ops.transpose_embedding_input(hcs, bits, indices, offsets, vbe_b_t_map=b_t_map,
                                                 info_B_num_bits=info_bits, info_B_mask=(1 << info_bits) - 1)
    linear, linear_sorted, infos_sorted, run, run_lengths, num_runs, cumulative = out
    want_linear, want_sorted, want_infos, want_runs = _transpose_by_definition(hcs, bits, indices, offsets, b_t_map,
                                                                               info_bits)
    n, k = len(ids), len(want_runs)
    assert linear.dtype == linear_sorted.dtype == run.dtype == dtype
    assert infos_sorted.dtype == run_lengths.dtype == num_runs.dtype == cumulative.dtype == torch.int32
    assert linear.tolist() == want_linear and linear_sorted.tolist() == want_sorted
    assert [v & 0xFFFFFFFF for v in infos_sorted.tolist()] == want_infos
    assert int(num_runs[0]) == k and run[:k].tolist() == [r[0] for r in want_runs]
    assert run_lengths.tolist() == [r[1] for r in want_runs] + [0] * (n - k)
    assert cumulative.tolist() == [0] + list(np.cumsum([r[1] for r in want_runs] + [0] * (n - k)))


def test_cpu_ops_are_registered_only_where_none_exists():
    served = cpu_ops.ensure_registered()
    assert cpu_ops.has_cpu_kernel(cpu_ops.OP) and cpu_ops.has_cpu_kernel(cpu_ops.MM_DTYPE)
    assert cpu_ops.ensure_registered() == served  # idempotent
    a, b = torch.randn(5, 7).half(), torch.randn(7, 3).half()
    got = torch.mm(a, b, out_dtype=torch.float32)
    assert got.dtype == torch.float32
    assert torch.allclose(got.double(), a.double() @ b.double(), rtol=0, atol=7 * 2.0 ** -24 * float(
        (a.double().abs() @ b.double().abs()).max()))
    with pytest.raises(ValueError, match="pooled form"):
        cpu_ops.transpose_embedding_input(torch.zeros(2, dtype=torch.int64), 4, torch.zeros(1, dtype=torch.int64),
                                               torch.tensor([0, 1]), nobag=True)


# ----------------------------------------------------------------------------- the judge and its findings
ONCE = CaseSpec(tables=((10, 8), (30, 5)), batch_size=3, length_profile="fixed", max_length=2, id_skew=0.0,
                optimizer="exact_rowwise_adagrad", seed=5)


def _checks(reports) -> set:
    return {r.check for r in failures(reports)}


@pytest.mark.parametrize("config", [KernelConfig(), KernelConfig(hoist_transpose=True),
                                    KernelConfig(fused_bounds_check=True)])
def test_a_plain_case_passes_under_each_switch(config):
    reports = check_case(dataclasses.replace(ONCE, weights_dtype="fp16", output_dtype="fp16", steps=2), config,
                         sut=sut())
    assert not failures(reports), "\n".join(map(str, failures(reports)))
    assert sum(r.check == Check.WEIGHTS for r in reports) == 4  # two tables, two steps: judged, not skipped


def test_histogram_path_and_its_saved_adagrad_pass_and_are_named():
    spec = CaseSpec(tables=((16, 64),), batch_size=17, weights_dtype="fp16", output_dtype="fp32",
                    length_profile="fixed", max_length=64, optimizer="exact_rowwise_adagrad", seed=9)
    result = run_case(spec, KernelConfig(), sut=sut())
    assert result.ok, result.text()
    assert {"fwd:small_table", "bwd:saved_histogram"} <= result.tiers


def test_the_psw_gradient_is_missing_before_the_fix_and_present_after():
    """Rows read once, so the weighted-sort finding cannot show: only the missing gradient differs."""
    spec = dataclasses.replace(ONCE, weighted=True, tables=((400, 8), (400, 5)), seed=7)
    before = run_case(spec, KernelConfig(), sut=sut(BEFORE_PSW_FIX))
    assert {r.check for r in before.reports if not r.ok} == {Check.MISSING_PSW_GRAD}
    assert [f.id for f in explain(sut(BEFORE_PSW_FIX), before)] == ["torchrec-missing-psw-grad"]
    after = run_case(spec, KernelConfig(), sut=sut(NEWEST))
    assert after.ok, after.text()


def test_weighted_duplicates_fail_because_of_the_unstable_argsort(monkeypatch):
    """The shrunk case of the finding fails; with torch.argsort made stable (what the fix would do) it passes."""
    spec = CaseSpec(tables=((7, 5), (64, 2)), batch_size=4, max_length=3, hot_rows=(HotRow(0, 6, 3),), id_skew=2.0,
                    weighted=True, seed=2)
    result = run_case(spec, KernelConfig(), sut=sut())
    assert {r.check for r in result.reports if not r.ok} == {Check.WEIGHTS}
    assert [f.id for f in explain(sut(), result)] == ["torchrec-weighted-unstable-argsort"]
    monkeypatch.setattr(torch, "argsort", lambda x, *a, **k: torch.sort(x, stable=True).indices)
    assert run_case(spec, KernelConfig(), sut=sut()).ok


def test_stochastic_rounding_rounds_fp32_weights_to_fp16():
    spec = dataclasses.replace(ONCE, optimizer="exact_sgd", learning_rate=0.1)
    on = run_case(spec, KernelConfig(stochastic_rounding=True), sut=sut())
    assert {r.check for r in on.reports if not r.ok} == {Check.WEIGHTS}
    assert [f.id for f in explain(sut(), on)] == ["torchrec-stochastic-rounding-through-fp16"]
    assert run_case(spec, KernelConfig(), sut=sut()).ok
    # fp16 weights under stochastic rounding: within one unit in the last place, as the bound allows
    half = run_case(dataclasses.replace(spec, weights_dtype="fp16"), KernelConfig(stochastic_rounding=True), sut=sut())
    assert half.ok, half.text()


def test_stochastic_rounding_puts_small_bf16_weights_on_fp16s_subnormal_grid():
    """The H100 campaign's case (three row-wise Adagrad steps on bf16 weights): one weight near 4e-7 comes back on
    fp16's subnormal grid, 2^-24 apart, not bf16's, 2^-29 apart there; without stochastic rounding it passes."""
    spec = CaseSpec(tables=((422, 8),), batch_size=84, max_length=25, length_profile="fixed", steps=3,
                    optimizer="exact_rowwise_adagrad", learning_rate=0.00012206844988327204, output_dtype="bf16",
                    weights_dtype="bf16", seed=1262)
    config = KernelConfig(stochastic_rounding=True, fused_bounds_check=True)
    on = run_case(spec, config, sut=sut())
    bad = [r for r in on.reports if not r.ok]
    assert bad and {r.check for r in bad} == {Check.WEIGHTS, Check.SR_NEIGHBOURS}, on.text()
    for r in bad:
        got = torch.tensor(r.worst.got, dtype=torch.float64)
        assert got.half().double() == got and abs(r.worst.expected) < 2.0 ** -14, str(r)
    assert [f.id for f in explain(sut(), on)] == ["torchrec-stochastic-rounding-through-fp16"]
    off = run_case(spec, dataclasses.replace(config, stochastic_rounding=False), sut=sut())
    assert off.ok, off.text()


def _no_bag_ids(bad_id: str, offsets: tuple[str, ...] = ("first_positive",)) -> BadIdCase:
    """Two tables of 2 rows, 3 bags, weighted, WARNING; ``bad_id`` as the last id of the first bag."""
    bad = BadBatchSpec(tables=((2, 9), (2, 5)), batch_size=3, max_length=0, index_dtype="int32", weighted=True,
                       bad_ids=(BadId(bad_id, "first", "first", "last"),), bad_offsets=offsets)
    return BadIdCase(CaseSpec(tables=bad.tables, batch_size=3, max_length=0, weighted=True, index_dtype="int32",
                              length_profile="uniform"), bad)


def test_ids_in_no_bag_go_unchecked_into_the_backward_and_read_outside_its_tensors(sanitized):
    """A positive first offset leaves the ids before it in no bag: no bounds check sees the out-of-range one, and the
    weighted backward then loads past the end of a tensor. The sanitizer stops it, and the finding explains it on that
    kind; with the offsets intact the same bad id is repaired, and only the warning-count difference is left."""
    broken = run_case(_no_bag_ids("rows_plus_one"), KernelConfig(), sut=sut())
    assert broken.kind == FailureKind.SANITIZER, broken.text()
    assert broken.error.startswith("triton_tbe_backward_short_run_weighted") and "past the end" in broken.error
    assert [f.id for f in explain(sut(), broken)] == ["torchrec-broken-offsets-out-of-bounds"]
    intact = run_case(_no_bag_ids("rows_plus_one", offsets=()), KernelConfig(), sut=sut())
    assert intact.error is None and not (explain(sut(), intact) or ()), intact.text()


def test_an_empty_batch_trains_in_the_forward_and_raises_in_the_backward():
    spec = CaseSpec(tables=((30, 16),), batch_size=0, seed=45)
    result = run_case(spec, KernelConfig(), sut=sut())
    assert "B must be positive" in (result.error or "")
    assert [f.id for f in explain(sut(), result)] == ["torchrec-empty-batch-backward-raises"]
    assert run_case(spec, KernelConfig(), steps=False, sut=sut()).ok  # the forward alone passes


def test_stochastic_bound_allows_one_unit_in_the_last_place_not_two():
    from oracles.reference_backward import reference_backward
    from oracles.elements import layout_tensors  # noqa: F401  (the reference's layout)
    from cases import initial_weights, materialize
    from tbe.modes import Optimizer, Pooling

    spec = CaseSpec(tables=((8, 16),), batch_size=4, length_profile="fixed", max_length=1, weights_dtype="fp16",
                    seed=3)
    case = materialize(spec)
    w = initial_weights(spec)
    ref = reference_backward(spec.layout, w, torch.zeros(8), case.indices, case.offsets, None, 4, Pooling.SUM,
                             Optimizer.EXACT_SGD, 0.05, 1e-4, case.grad_outputs[0])
    nearest = step_bounds(ref, torch.float16)
    stochastic = step_bounds(ref, torch.float16, stochastic=True)
    exact = ref.rows.w_new
    ulp = torch.tensor([float(np.spacing(np.float16(abs(v)))) for v in exact.tolist()], dtype=torch.float64)
    down, up = exact.to(torch.float16).to(torch.float64), exact.to(torch.float16).to(torch.float64)
    down = torch.where(down > exact, down - ulp, down)
    up = torch.where(up < exact, up + ulp, up)
    for neighbour in (down, up):  # either neighbour is a correct stochastic rounding
        assert bool(((neighbour - exact).abs() <= stochastic.w_bound).all())
    assert not bool(((up - exact).abs() <= nearest.w_bound).all() and ((down - exact).abs() <= nearest.w_bound).all())
    assert not bool(((up + 2 * ulp - exact).abs() <= stochastic.w_bound).any())  # past two units: never


# ----------------------------------------------------------------------------- a campaign, as a user runs it
def test_a_cpu_campaign_passes_or_reports_known_findings(tmp_path):
    """``tbe-fuzz run --sut torchrec-triton --sut-source <newest>`` on the CPU: it checks cases, names what it
    loaded, and every failure it meets is a triaged finding (exit 0), each saved whole. Bounded by examples, not
    time, so every machine draws the same ones (a slower machine once met a form of a finding a faster one had not)."""
    out = subprocess.run(
        [sys.executable, "-m", "fuzz", "run", "--sut", "torchrec-triton", "--sut-source", str(BY_NAME[NEWEST]),
         "--budget", "quick", "--max-examples", "60", "--seed", "0", "--artifacts", str(tmp_path), "--json",
         "--no-tour"],
        capture_output=True, text=True, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert data["ok"] and data["examples"] == 60
    assert "stand-in: ads_mkl" in out.stderr and "3f2fe5f3" in out.stderr
    for known in data["known"]:
        saved = Path(known["artifact"])
        meta = json.loads((saved / "meta.json").read_text())
        assert meta["sut_version"] == NEWEST and meta["sut_name"] == "torchrec-triton"
        assert (saved / "tensors.pt").is_file() and (saved / "config.json").is_file()


def test_the_gate_times_two_sources_side_by_side():
    """Level (d)'s timing of a code change, run on the CPU with plain callables: both versions build, run both
    phases and are measured (what the gate does on a GPU over upstream's commits)."""
    from fuzz.gate.perf import run_perf
    from fuzz.gate.shapes import PerfShape

    shape = PerfShape("tiny", 50, 8, bags=4, pooling=3)
    res = run_perf(KernelConfig(), KernelConfig(), [shape], gamma=1.0, rounds=2, target_ms=1.0, device="cpu",
                   suts=(sut("1d2986c9"), sut("170d6e4f")))
    assert [e.phase for e in res.entries] == ["forward", "iteration"]
    assert all(e.ok and e.base and e.cand for e in res.entries), [e.error for e in res.entries]


@pytest.mark.parametrize("version", [NEWEST, "5ace9d68"])
def test_the_findings_pages_standalone_repro_reproduces_each_finding_on_the_cpu(version):
    """docs/findings/torchrec_triton_repro.py needs only torch, triton, fbgemm_gpu and the snapshot: on the CPU
    every finding but the two GPU-only ones (the broken-offsets crash, the histogram backward's small gradients)
    reproduces, and those two say they were skipped."""
    if version not in BY_NAME:
        pytest.skip(f"no snapshot {version}")
    out = subprocess.run([sys.executable, str(REPO / "docs" / "findings" / "torchrec_triton_repro.py"),
                          str(BY_NAME[version]), "all"], capture_output=True, text=True, timeout=600)
    verdicts = [line.strip() for line in out.stdout.splitlines() if line.strip() in
                ("REPRODUCED", "not reproduced", "skipped")]
    assert out.returncode == 0 and verdicts == ["REPRODUCED"] * 4 + ["skipped"] * 2, out.stdout + out.stderr
