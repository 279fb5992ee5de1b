"""What a newcomer meets in the first hour: one-line usage errors with exit 2, messages that say what a file
is and what was meant, checks that had nothing to check never shown as passes, reports without placeholders."""

from __future__ import annotations

import json

import pytest

from fuzz.cli import main
from fuzz.gate.static import StaticResult
from fuzz.status import Status
from oracles.compare import Check, Mismatch, Report
from tbe import KernelConfig
from tbe.env import ALLOW_FAULTS


def _exit(argv: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        main(argv)
    return e.value.code, capsys.readouterr().err


def test_an_artifacts_directory_that_cannot_be_made_is_a_usage_error(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, err = _exit(["run", "--artifacts", str(blocker / "sub"), "--max-examples", "1"], capsys)
    assert code == 2 and "cannot create" in err and "Traceback" not in err


def test_replaying_a_config_file_says_it_is_a_config(tmp_path, capsys):
    path = tmp_path / "base.json"
    KernelConfig().save(path)
    code, err = _exit(["replay", str(path)], capsys)
    assert code == 2 and "is not a case: it is a KernelConfig" in err and "__init__" not in err


def test_a_mistyped_config_field_gets_a_suggestion():
    with pytest.raises(ValueError, match="did you mean 'chunk_size'"):
        KernelConfig.from_dict({"chunksize": 8})
    with pytest.raises(ValueError, match="known: "):
        KernelConfig.from_dict({"zzz": 1})


def test_config_prints_the_defaults_without_options(capsys):
    assert main(["config", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == KernelConfig().to_dict()


def test_a_gate_candidate_planting_a_fault_needs_the_opt_in(tmp_path, capsys, monkeypatch):
    base, cand = tmp_path / "base.json", tmp_path / "cand.json"
    KernelConfig().save(base)
    cand.write_text(json.dumps({"faults": ["no_fence"]}))
    monkeypatch.setenv(ALLOW_FAULTS.name, "0")
    code, err = _exit(["gate", "--baseline", str(base), "--candidate", str(cand), "--levels", "b"], capsys)
    assert code == 2 and ALLOW_FAULTS.name in err


def test_a_step_with_nothing_to_check_is_no_pass_and_no_failure():
    res = StaticResult()
    res.step("synchronisation check", Status.NOT_APPLICABLE, "no launch synchronises")
    assert res.status == Status.PASS  # neither makes the level fail nor pretends to have checked
    assert res.to_dict()["steps"][0]["status"] == "not applicable"


def test_a_count_check_names_no_table_sample_or_column():
    warnings = Report("step 0 bounds-check warnings", False, Mismatch(-1, -1, -1, 3.0, 1.0, 0.0), 1, 1,
                      graded=False, check=Check.WARNINGS)
    assert "table -1" not in str(warnings) and "expected 3.0, got 1.0" in str(warnings)
    weights = Report("w", False, Mismatch(0, 5, 2, 1.0, 2.0, 0.1), 1, 1)
    assert "worst at table 0, sample 5, column 2" in str(weights)
