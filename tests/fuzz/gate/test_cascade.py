"""The gate cascade end to end on the CPU: base against base passes (a)-(c) and leaves (d) not run;
a planted fault fails at (b); a fused tier without its fence fails at (a); level (c) catches a
fault and keeps an untriaged oracle disagreement apart from the candidate's verdict.

Budgets are tiny (seconds per seed, a few matrix cases); level (a) compiles every reachable
specialization for sm_90 once and reads it from the compile cache afterwards.
"""

from __future__ import annotations

import json

import pytest
import torch

from fuzz.gate import oracle as oracle_level
from fuzz.cli import main
from fuzz.gate.oracle import run_oracle_level
from fuzz.gate.perf import run_perf
from fuzz.status import OracleVerdict
from fuzz.gate.timing import BaselineCache, time_shape
from fuzz.gate.shapes import PerfShape
from oracles import fbgemm_cpu
from cases import case_from_dict
from tbe import KernelConfig
from fuzz.execution.forced_crash import FORCE_CRASH

QUICK = ["--time", "3", "--max-examples", "2", "--oracle-cases", "3"]
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU expectations: level (d) must not run")


def gate(tmp_path, candidate: KernelConfig, *extra: str) -> tuple[int, dict, str]:
    base, cand = tmp_path / "base.json", tmp_path / "cand.json"
    KernelConfig().save(base)
    candidate.save(cand)
    rc = main(["gate", "--baseline", str(base), "--candidate", str(cand), "--report", str(tmp_path / "report"),
               "--artifacts", str(tmp_path / "art"), *QUICK, *extra])
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    return rc, report, (tmp_path / "report" / "report.md").read_text()


def statuses(report: dict) -> str:
    return "".join(report["levels"][k]["status"][0] for k in "abcd")  # p(ass), f(ail), n(ot run)


@pytest.mark.slow
@pytest.mark.fuzz
def test_base_against_base_passes_a_to_c_and_leaves_d_not_run(tmp_path, capsys):
    rc, report, md = gate(tmp_path, KernelConfig())
    out = capsys.readouterr().out
    assert rc == 0, out
    assert statuses(report) == "pppn" and report["verdict"] == "UNVERIFIED"
    assert "no CUDA device" in report["levels"]["d"]["reasons"][0]
    assert "performance unverified" in out and "exit code 0" in out
    steps = {s["check"]: s["status"] for s in report["levels"]["a"]["detail"]["steps"]}
    # the default config reaches no launch that synchronises: nothing checked is no pass
    assert steps == {"config validates": "pass", "synchronisation check": "not applicable",
                     "compiles for sm_90 within limits": "pass"}
    specs = report["levels"]["a"]["detail"]["specializations"]
    kernels = {s["kernel"].rsplit(".", 1)[1] for s in specs}
    assert {"_forward_kernel", "_short_kernel", "_chunk_kernel", "_apply_kernel"} <= kernels
    assert all(s["registers"] > 0 and not s["over_limits"] for s in specs)
    assert [s["seed"] for s in report["levels"]["b"]["seeds"]] == [0, 1, 2]
    assert all(s["cases"] >= 1 for s in report["levels"]["b"]["seeds"])
    assert len(report["levels"]["c"]["detail"]["cases"]) == 3
    assert "| (d) |" in md and "not run" in md


@pytest.mark.slow
@pytest.mark.fuzz
def test_planted_fault_fails_at_b(tmp_path, capsys):
    rc, report, md = gate(tmp_path, KernelConfig(faults=("fwd_skip_last_id",)))
    out = capsys.readouterr().out
    assert rc == 1, out
    assert statuses(report) == "pfnn" and report["first_failing_level"] == "b"
    assert report["verdict"] == "KEEP" and "KEEP the baseline" in out and "faults: [] -> ['fwd_skip_last_id']" in out
    assert report["levels"]["c"]["reasons"] == ["level (b) failed"]
    (seed,) = report["levels"]["b"]["seeds"]  # the first seed already fails
    assert not seed["ok"] and seed["failing_cases"] and seed["failing_cases"][0]["baseline_ok"]
    (art,) = [p for p in (tmp_path / "art").iterdir() if not p.name.startswith(".")]
    assert "**fail**" in md
    # the failing case is shrunk before it is saved, and its replay line is printed, fault opt-in and all
    drawn, saved = (case_from_dict(c).size()[2] for c in (seed["failing_cases"][0]["case"],
                                                                json.loads((art / "case.json").read_text())))
    assert saved < drawn, (saved, drawn)
    assert seed["replays"] == [f"TBE_FUZZ_ALLOW_FAULTS=1 tbe-fuzz replay {art}   (or: TBE_FUZZ_ALLOW_FAULTS=1 "
                               f"python -m fuzz replay {art})"]
    assert f"replay: {seed['replays'][0]}" in out


@pytest.mark.slow
def test_fused_tier_without_fence_fails_at_a(tmp_path, capsys):
    rc, report, _ = gate(tmp_path, KernelConfig(fused_long_tier=True, fence=False))
    out = capsys.readouterr().out
    assert rc == 1 and statuses(report) == "fnnn" and report["first_failing_level"] == "a", out
    a = report["levels"]["a"]
    assert "synchronisation check fails" in a["reasons"][0] and "fence" in a["reasons"][0]
    assert {s["check"] for s in a["detail"]["steps"]} == {"config validates", "synchronisation check"}
    print(f"level (a) failed in {a['seconds']:.1f}s")  # measured: see the gate section of README


@pytest.mark.slow
def test_static_level_runs_in_a_child_when_this_process_compiles(monkeypatch):
    """On a GPU host the launches are recorded in a child under the interpreter; the verdict comes back."""
    import tbe.backend
    from fuzz.gate.static import run_static_level

    monkeypatch.setattr(tbe.backend, "INTERPRETED", False)
    res = run_static_level(KernelConfig(fused_long_tier=True, fence=False))
    assert res.status == "fail" and "synchronisation check fails" in res.reasons[0], res.to_dict()


@pytest.mark.fuzz
def test_oracle_level_catches_a_fault_and_names_the_baseline():
    res = run_oracle_level(KernelConfig(), KernelConfig(faults=("fwd_skip_last_id",)), max_cases=2)
    assert res.status == "fail" and len(res.cases) == 1
    assert not res.cases[0].ok and res.cases[0].baseline_ok is True
    assert "disagrees with FP64" in res.reasons[0] and "the baseline fails" not in res.reasons[0]
    if fbgemm_cpu.available():
        assert "FBGEMM agrees with FP64" in res.reasons[0]  # the reference is corroborated: a kernel bug


@pytest.mark.fuzz
def test_oracle_level_runs_its_cases_supervised_so_a_crash_is_a_finding(monkeypatch):
    """A kernel that kills its process fails level (c) on that case, named as a crash; the gate lives on."""
    from fuzz.execution.supervisor import Supervisor

    monkeypatch.setenv(FORCE_CRASH.name, "segv:lookups>=1")
    monkeypatch.setenv("TBE_FUZZ_ALLOW_FAULTS", "1")
    sup = Supervisor()
    try:
        res = run_oracle_level(KernelConfig(), KernelConfig(), max_cases=2, supervisor=sup)
    finally:
        sup.close()
    assert res.status == "fail" and len(res.cases) == 1, res.to_dict()
    kernel = res.cases[0].kernel
    assert kernel.kind == "crash" and "SIGSEGV" in kernel.error and res.cases[0].baseline_ok is False
    assert "candidate fails (crash: " in res.reasons[0] and "the baseline fails it too" in res.reasons[0]


@pytest.mark.fuzz
@pytest.mark.skipif(not fbgemm_cpu.available(), reason="fbgemm_gpu CPU ops did not load")
def test_untriaged_oracle_disagreement_fails_c_as_an_oracle_finding(monkeypatch):
    """Un-triaging FBGEMM's fp16 SGD update (oracles/findings.py) makes it disagree with FP64 on the
    matrix's fp16 SGD case: level (c) fails, naming FBGEMM, with the kernel itself passing."""
    from fuzz.judge import fbgemm_sample

    monkeypatch.setattr(fbgemm_sample, "fbgemm_update_difference", lambda *args: None)
    monkeypatch.setattr(oracle_level, "fbgemm_update_difference", lambda *args: None)
    res = run_oracle_level(KernelConfig(), KernelConfig(), max_cases=2)
    assert res.status == "fail" and [c.fbgemm for c in res.cases] == ["agrees", OracleVerdict.DISAGREES]
    assert all(c.ok for c in res.cases) and res.cases[1].baseline_ok is None
    assert len(res.reasons) == 1 and "FBGEMM disagrees with FP64" in res.reasons[0] and "oracle" in res.reasons[0]
    assert "fbgemm" in res.findings[0]


def test_timing_path_runs_both_configs_on_one_batch(monkeypatch):
    """The GPU timing code on the interpreter with a tiny shape: both phases measured, one weight storage."""
    from fuzz.gate import timing

    built = []
    build = timing.build_module
    monkeypatch.setattr(timing, "build_module", lambda *a: built.append(build(*a)) or built[-1])
    shape = PerfShape("tiny", 500, 8, bags=3, pooling=2, band=(1, 3))
    cache = BaselineCache(KernelConfig(), "cpu")
    entries = time_shape(shape, KernelConfig(), KernelConfig(fwd_gather_unweighted=2), "cpu", rounds=1,
                         target_ms=1.0, cache=cache)
    assert [e.phase for e in entries] == ["forward", "iteration"] and all(e.ok for e in entries), entries
    assert all(e.calls >= 1 and e.speedup > 0 for e in entries)
    assert cache.get(shape)[0].indices.numel() == 6  # the cached workload is the one timed
    base, cand = built
    assert cand.config.fwd_gather_unweighted == 2
    assert cand.weights.data_ptr() == base.weights.data_ptr() and cand.momentum.data_ptr() == base.momentum.data_ptr()


def test_perf_level_loop_on_the_interpreter():
    """run_perf's loop and judgement end to end (timings on the interpreter mean nothing: only the
    bookkeeping is checked); past the deadline the remaining shapes are unmeasured and fail the level."""
    shapes = [PerfShape("tiny-a", 400, 8, bags=2, pooling=2), PerfShape("tiny-b", 400, 4, bags=2, pooling=2)]
    res = run_perf(KernelConfig(), KernelConfig(fwd_num_warps=2), shapes, rounds=1, target_ms=1.0, device="cpu")
    assert [(e.shape, e.phase) for e in res.entries] == [(s.name, p) for s in shapes
                                                          for p in ("forward", "iteration")]
    assert all(e.ok for e in res.entries) and res.status in ("pass", "fail") and res.device == "cpu"
    late = run_perf(KernelConfig(), KernelConfig(), shapes, rounds=1, target_ms=1.0, device="cpu", deadline=0.0)
    assert late.status == "fail" and "out of time" in late.reasons[0] and not late.measured
