"""The fuzz driver: campaigns, artifacts, replay, the config gate, selftest and the CLI.

Campaign tests use tiny budgets (seconds, a handful of small examples) and are marked
``fuzz``; they run in CI like the rest. The planted faults used here are allowed by
tests/conftest.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fuzz.execution import artifacts
from fuzz.budgets import Budget
from fuzz.campaign import CampaignOptions, CampaignRunner
from cases import BadBatchSpec, BadId, BadIdCase, CaseKind, CaseSpec, HotRow, case_from_dict
from fuzz.judge.check import CaseResult, run_case
from fuzz.cli import main
from strategies.edges import edge_cases
from fuzz.campaign import campaign_json, campaign_text
from fuzz.gate.correctness import GateCase, GateResult, _judge
from fuzz.selftest.run import run_selftest
from oracles.compare import Check, Mismatch, Oracle, Report
from tbe import KernelConfig
from tests.paths import REPO

TINY = Budget("tiny", seconds=10.0, shrink_seconds=15.0, max_examples=8, max_lookups=300)
FAULT = "fwd_skip_last_id"  # found within a few examples: every bag of 2+ ids shows it


def write_config(path: Path, config: KernelConfig) -> str:
    config.save(path)
    return str(path)


# ----------------------------------------------------------------------------- campaigns
@pytest.mark.fuzz
def test_campaign_passes_on_default_config(tmp_path):
    res = CampaignRunner(KernelConfig(), TINY, 1, CampaignOptions(artifacts_dir=tmp_path)).run()
    assert res.ok, res.failure and res.failure.text()
    assert res.examples >= 1 and res.stopped_by in ("time", "examples")
    assert res.tiers, "a campaign must record the paths its cases took"
    assert all(0.0 <= r <= 1.0 for r in res.max_ratio.values()), res.max_ratio
    assert res.artifact is None
    assert not [p for p in tmp_path.iterdir() if not p.name.startswith(".")], "a passing campaign saves no failure"
    split = campaign_json(res)["time_split"]  # every checked case's time, split into its parts
    assert split["cases"] == res.examples
    assert split["worker"]["sut"] > 0 and split["worker"]["oracles"] > 0 and split["driver"] > 0
    parts = split["driver"] + split["supervision"] + sum(split["worker"].values())
    assert parts == pytest.approx(res.seconds, rel=0.05)
    assert "time per case" in campaign_text(res)


@pytest.fixture(scope="module")
def fault_artifact(tmp_path_factory):
    """A campaign with a planted forward fault: its shrunk failure saved as an artifact."""
    root = tmp_path_factory.mktemp("artifacts")
    res = CampaignRunner(KernelConfig(faults=(FAULT,)), TINY, 0, CampaignOptions(artifacts_dir=root)).run()
    return res


@pytest.mark.fuzz
def test_a_failing_runs_summary_lists_no_cells_at_zero(fault_artifact):
    """A search that stopped at its failure left most cells at zero by design: listing them is noise."""
    text = campaign_text(fault_artifact)
    (line,) = [l for l in text.splitlines() if l.startswith("  coverage:")]
    assert "at zero (the search stopped at its failure" in line, line
    assert "    zero: " not in text and "    ... and " not in text


@pytest.mark.fuzz
def test_planted_fault_produces_a_complete_artifact(fault_artifact):
    res = fault_artifact
    assert not res.ok and res.stopped_by == "failure"
    path = res.artifact
    assert path is not None and path.is_dir()
    assert sorted(p.name for p in path.iterdir()) == sorted(artifacts.FILES)
    assert artifacts.load_case(path / "case.json") == res.failure.case
    assert KernelConfig.load(path / "config.json").faults == (FAULT,)
    saved = artifacts.load_tensors(path)
    assert saved.indices.numel() == res.failure.lookups
    assert saved.initial_weights.numel() > 0 and len(saved.grad_outputs) >= 1
    assert "MISMATCH" in (path / "report.txt").read_text()
    env = json.loads((path / "environment.json").read_text())
    assert {"torch", "triton", "fbgemm_gpu", "device", "triton_interpreter"} <= set(env)
    assert "replay" in (path / "replay.txt").read_text() and str(path) in (path / "replay.txt").read_text()
    assert json.loads((path / "meta.json").read_text())["seed"] == 0


@pytest.mark.fuzz
def test_fault_shrinks_to_a_small_case(fault_artifact):
    tables, bags, _ = fault_artifact.failure.case.size()
    assert tables <= 2 and bags <= 8, fault_artifact.failure.case


@pytest.mark.fuzz
def test_replay_fails_on_fault_and_passes_on_clean_config(fault_artifact, tmp_path, capsys):
    path = fault_artifact.artifact
    assert main(["replay", str(path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "saved tensors" in out and "MISMATCH" in out
    clean = write_config(tmp_path / "clean.json", KernelConfig())
    assert main(["replay", str(path), "--config", clean]) == 0
    assert "PASS" in capsys.readouterr().out
    # a bare case.json re-materializes from the spec, under the config beside it unless told otherwise
    assert main(["replay", str(path / "case.json")]) == 1
    assert "re-materialized" in capsys.readouterr().out
    assert main(["replay", str(path / "case.json"), "--config", clean, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


@pytest.mark.fuzz
def test_replay_uses_saved_tensors_not_the_spec(fault_artifact, tmp_path):
    """Saved tensors win over re-materialization: emptying them changes the verdict to a pass."""
    src = fault_artifact.artifact
    dst = tmp_path / "edited"
    dst.mkdir()
    for name in artifacts.FILES:
        (dst / name).write_bytes((src / name).read_bytes())
    saved = artifacts.load_tensors(dst)
    saved.indices = saved.indices[:0]
    saved.offsets = torch.zeros_like(saved.offsets)
    saved.per_sample_weights = None if saved.per_sample_weights is None else saved.per_sample_weights[:0]
    torch.save(saved.to_dict(), dst / "tensors.pt")
    assert main(["replay", str(dst)]) == 0  # an all-empty batch cannot show a dropped id
    assert main(["replay", str(dst), "--rematerialize"]) == 1


# ----------------------------------------------------------------------------- gate
# the gate's end-to-end runs (the verification cascade) are in tests/fuzz/gate/test_cascade.py


def _result(what: str, ratio: float, ok: bool = True) -> CaseResult:
    report = Report(what, ok, Mismatch(0, 0, 0, 1.0, 1.0 + ratio, 1.0), 0 if ok else 1, 1)
    return CaseResult(CaseSpec(tables=((1, 1),), batch_size=1), [report], 1, frozenset(), 0.0)


@pytest.mark.parametrize("base, cand, regressed", [(0.1, 0.15, False), (0.1, 0.5, True), (0.5, 0.9, False),
                                                   (0.0, 0.2, False), (0.0, 0.3, True)])
def test_gate_judges_material_ratio_growth(base, cand, regressed):
    res = GateResult(KernelConfig(), KernelConfig(), {})
    res.cases = [GateCase("c", _result("step 0 forward vs fp64", base), _result("step 0 forward vs fp64", cand))]
    _judge(res, factor=2.0, floor=0.25)
    assert res.ok != regressed, res.reasons


def test_gate_fails_a_candidate_that_fails_a_case():
    res = GateResult(KernelConfig(), KernelConfig(), {})
    res.cases = [GateCase("c", _result("x", 0.1), _result("x", 5.0, ok=False))]
    _judge(res, factor=2.0, floor=0.25)
    assert not res.ok and "candidate fails c" in res.reasons[0]


def test_gate_targets_the_moved_edges():
    base = KernelConfig()
    cases, _ = edge_cases(base, base.replace(long_run_threshold=128), cap=4000)
    counts = {c.hot_rows[0].count for _, c in cases}
    assert {127, 128, 129, 255, 256, 257} <= counts
    cases, _ = edge_cases(base, base.replace(dim_buckets=(16, 32, 512)), cap=4000)
    dims = {c.tables[0][1] for _, c in cases if c.kind is CaseKind.SPEC and len(c.tables) == 1}
    assert {7, 8, 9, 255, 256, 257, 511, 512, 513} <= dims
    cases, _ = edge_cases(base, base.replace(fused_bounds_check=True), cap=4000)
    assert cases and all(c.bad is not None for _, c in cases)
    assert edge_cases(base, base, cap=4000)[0] == []


# ----------------------------------------------------------------------------- selftest
@pytest.mark.fuzz
def test_selftest_catches_a_fault_and_states_skips(capsys):
    results = run_selftest(TINY, only=[FAULT])
    (fr,) = results
    assert fr.caught and fr.first_catch.detector == "campaign" and fr.first_catch.shrunk[0] >= 1
    assert main(["selftest", "--fault", FAULT, "--time", "10", "--max-examples", "8"]) == 0
    out = capsys.readouterr().out
    assert FAULT in out and "1 caught" in out


@pytest.mark.fuzz
def test_selftest_without_the_tour_reports_what_the_search_alone_caught(capsys):
    assert main(["selftest", "--fault", FAULT, "--no-tour", "--time", "30", "--max-examples", "30", "--json"]) == 0
    (f,) = json.loads(capsys.readouterr().out)["faults"]
    campaign = f["detections"][0]
    assert f["caught"] and campaign["detector"] == "campaign" and "by the search alone" in campaign["detail"], f
    assert f["examples_to_catch"] >= 1 and f["seconds_to_catch"] is not None


def test_a_fault_s_later_detectors_wait_for_its_first_catch(monkeypatch):
    """After one detector caught the fault, the rest are 'skipped' (not run, never a catch) unless every detector
    is asked for; then they run, and one that misses does not undo the catch."""
    from fuzz.selftest import detectors
    from fuzz.selftest.detectors import CAUGHT, MISSED, Detection

    ran = []

    def second(fault, ctx):
        ran.append(fault)
        return Detection("second", MISSED, "saw nothing")

    monkeypatch.setattr(detectors, "CAMPAIGN", detectors.Detector(
        "campaign", lambda f, c: Detection("campaign", CAUGHT, "planted", 0.1, 1)))
    monkeypatch.setattr(detectors, "_EXTRA", {FAULT: [detectors.Detector("second", second)]})
    (fr,) = run_selftest(TINY, only=[FAULT])
    assert fr.caught and not ran and fr.detections[1].status == "skipped"
    assert "not run" in fr.detections[1].detail and "campaign caught" in fr.detections[1].detail
    (fr,) = run_selftest(TINY, only=[FAULT], every_detector=True)
    assert ran == [FAULT] and fr.caught and [d.status for d in fr.detections] == ["caught", "missed"]


@pytest.mark.fuzz
def test_selftest_jobs_check_faults_in_processes_and_keep_their_order():
    """Each fault's campaign ran in its own process and came back whole (its campaign, with the failing case)."""
    names = [FAULT, "fwd_mean_wrong_length"]  # the second may need more than TINY's 8 examples: caught or missed
    results = run_selftest(TINY, only=names, jobs=2)
    assert [r.fault for r in results] == names and results[0].caught, results
    assert results[0].first_catch.campaign.failure is not None
    second = results[1].detections[0]
    assert second.detector == "campaign" and second.status in ("caught", "missed") and second.campaign.examples > 0


def test_selftest_fails_when_a_fault_asked_for_by_name_is_skipped(monkeypatch, capsys):
    """A fault no detector can check here is 'skipped', never caught; naming it makes the exit non-zero."""
    from fuzz.selftest import detectors

    monkeypatch.setattr(detectors, "_EXTRA", {})
    monkeypatch.setattr(detectors, "CAMPAIGN", detectors.Detector(
        "campaign", lambda f, c: pytest.fail("a skipped detector must not run"), lambda f: "not here"))
    results = run_selftest(TINY, only=[FAULT])
    assert results[0].status == "skipped" and not results[0].caught and not results[0].ok
    assert main(["selftest", "--fault", FAULT]) == 1
    out = capsys.readouterr().out
    assert "SKIPPED" in out and "not here" in out and "0 caught" in out and "1 skipped" in out


# ----------------------------------------------------------------------------- cases and checks
def test_case_json_round_trip():
    spec = CaseSpec(tables=((5, 3), (7, 2)), batch_size=2, hot_rows=(HotRow(1, 6, 4),), seed=9)
    bad = BadBatchSpec(((5, 3), (7, 2)), 2, bad_ids=(BadId("rows"),), bad_offsets=("last_long",), seed=9)
    both = BadIdCase(CaseSpec(tables=((5, 3), (7, 2)), batch_size=2, pooling="mean"), bad)
    for case in (spec, both):
        assert case_from_dict(json.loads(json.dumps(case.to_dict()))) == case
    with pytest.raises(ValueError, match="same tables"):
        BadIdCase(CaseSpec(tables=((5, 3),), batch_size=2), bad)


def test_bad_id_case_is_checked_against_the_repaired_reference():
    bad = BadBatchSpec(((6, 4),), 2, max_length=3, bad_ids=(BadId("rows_plus_one", "first", "last", "last"),), seed=4)
    case = BadIdCase(CaseSpec(tables=((6, 4),), batch_size=2, pooling="mean", max_length=3), bad)
    res = run_case(case)
    assert res.ok, res.text()
    assert any("warnings" in r.what for r in res.reports) and "bounds:standalone" in res.tiers


def test_reports_carry_step_table_check_and_oracle():
    """Each Report says what it checked where; its key groups it across steps and tables."""
    spec = CaseSpec(tables=((5, 3), (4, 2)), batch_size=2, max_length=2, steps=2, weighted=True)
    res = run_case(spec)
    assert res.ok, res.text()
    fields = {(r.step, r.table, r.check, r.oracle) for r in res.reports if r.oracle == Oracle.FP64}
    assert {(s, t, Check.WEIGHTS, Oracle.FP64) for s in (0, 1) for t in (0, 1)} <= fields
    assert {(s, None, Check.FORWARD, Oracle.FP64) for s in (0, 1)} <= fields
    assert all(r.check is not None for r in res.reports)
    assert {"weights after update", "forward vs fp64"} <= set(res.ratios_by_check())
    fb = Report("step 0 fbgemm forward vs fp64", True, None, 0, 1, check=Check.FORWARD, step=0, oracle=Oracle.FBGEMM)
    assert fb.key == "fbgemm forward vs fp64"


# ----------------------------------------------------------------------------- CLI input errors
@pytest.mark.parametrize("argv, needle", [
    (["run", "--budget", "huge"], "--budget"),
    (["run", "--seed", "-1"], "--seed"),
    (["run", "--seed", "x"], "'x'"),
    (["run", "--max-examples", "0"], "--max-examples"),
    (["run", "--time", "abc"], "'abc'"),
    (["run", "--time", "-5"], "--time"),
    (["run", "--config", "/no/such/cfg.json"], "/no/such/cfg.json"),
    (["gate", "--baseline", "/no/such/base.json"], "--baseline"),
    (["replay", "/no/such/artifact"], "/no/such/artifact"),
    (["selftest", "--fault", "not_a_fault"], "not_a_fault"),
    (["frobnicate"], "frobnicate"),
    ([], "required"),
])
def test_cli_rejects_bad_input_cleanly(argv, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


@pytest.mark.parametrize("content, needle", [
    ("{not json", "not valid JSON"),
    ('{"chunk_size": 0}', "chunk_size"),
    ('{"no_such_field": 1}', "no_such_field"),
    ("[1, 2]", "must be an object"),
])
def test_cli_rejects_bad_config_files(tmp_path, content, needle, capsys):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(content)
    with pytest.raises(SystemExit) as exc:
        main(["run", "--config", str(cfg)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--config" in err and needle in err


def test_cli_refuses_planted_faults_outside_the_selftest(tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "faulty.json"
    cfg.write_text(json.dumps({"faults": [FAULT]}))
    monkeypatch.delenv("TBE_FUZZ_ALLOW_FAULTS", raising=False)
    with pytest.raises(SystemExit) as exc:
        main(["run", "--config", str(cfg)])
    assert exc.value.code == 2 and "TBE_FUZZ_ALLOW_FAULTS" in capsys.readouterr().err


def test_python_dash_m_fuzz_is_the_cli():
    ok = subprocess.run([sys.executable, "-m", "fuzz", "--help"], cwd=REPO, capture_output=True, text=True)
    assert ok.returncode == 0 and all(c in ok.stdout for c in ("run", "replay", "gate", "selftest"))
    bad = subprocess.run([sys.executable, "-m", "fuzz", "run", "--budget", "forever"], cwd=REPO,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--budget" in bad.stderr and "Traceback" not in bad.stderr


def test_a_summary_states_facts_of_the_sut_that_ran_only(tmp_path, capsys):
    """torch's adapter runs no Triton kernel: nothing about compiling or the interpreter is its fact."""
    assert main(["run", "--sut", "torch", "--max-examples", "1", "--artifacts", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "SUT torch" in out and "kernel compilations" not in out and "interpreter" not in out, out
