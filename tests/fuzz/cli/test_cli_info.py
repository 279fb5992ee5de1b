"""What the command line says about itself: --version, selftest --list, config --defaults, the fault
paragraph of --help, and replay on an artifacts root (a listing instead of an error)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from fuzz.execution import save_result
from fuzz.cli import main
from fuzz.judge.check import CaseResult
from oracles.compare import Check, Mismatch, Report
from cases import CaseSpec, HotRow
from tbe import KernelConfig, faults
from tests.paths import REPO


def test_version_is_the_package_version(capsys):
    import tomllib
    from pathlib import Path

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    want = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert capsys.readouterr().out.strip() == f"tbe-fuzz {want}"


def test_version_answers_through_the_installed_entry_point():
    out = subprocess.run([sys.executable, "-m", "fuzz", "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("tbe-fuzz "), out


def test_selftest_list_names_every_registered_fault_and_what_it_plants(capsys, monkeypatch):
    faults.register("a_fault_registered_late", "a bug only this test plants")  # the list reads the registry
    try:
        assert main(["selftest", "--list"]) == 0
        text = capsys.readouterr().out
        assert main(["selftest", "--list", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
    finally:
        del faults.KNOWN["a_fault_registered_late"]
    assert "a_fault_registered_late" in text and "a bug only this test plants" in text
    assert "TBE_FUZZ_ALLOW_FAULTS=1" in text
    assert data["a_fault_registered_late"] == "a bug only this test plants"
    for name, what in faults.KNOWN.items():
        line = next(line for line in text.splitlines() if line.split()[:1] == [name])
        assert what in line


@pytest.mark.parametrize("command", ["run", "selftest"])
def test_help_names_the_faults_and_the_variable_that_allows_them(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines anywhere
    assert "TBE_FUZZ_ALLOW_FAULTS=1" in text
    assert all(name in text for name in faults.KNOWN), [n for n in faults.KNOWN if n not in text]


def test_config_defaults_json_loads_back_as_the_default_config(capsys, tmp_path):
    assert main(["config", "--defaults", "--json"]) == 0
    out = capsys.readouterr().out
    assert KernelConfig.from_json(out) == KernelConfig()
    path = tmp_path / "config.json"
    path.write_text(out)  # usable as a --config file as printed
    assert KernelConfig.load(path) == KernelConfig()


def test_config_defaults_text_shows_every_field(capsys):
    assert main(["config", "--defaults"]) == 0
    lines = capsys.readouterr().out.splitlines()
    shown = {line.split("=")[0].strip(): json.loads(line.split("=", 1)[1]) for line in lines if " = " in line}
    assert shown == json.loads(KernelConfig().to_json())


def _failure(spec: CaseSpec, what: str, check: Check) -> CaseResult:
    bad = Report(what, False, Mismatch(0, 1, 0, 1.0, 2.0, 1e-6), 1, 10, check=check, step=0)
    ok = Report("step 0 forward vs fp64", True, None, 0, 10, check=Check.FORWARD, step=0)
    return CaseResult(spec, [ok, bad], 0, frozenset(), 0.1)


def test_replay_on_an_artifacts_root_lists_its_cases(tmp_path, capsys):
    root = tmp_path / "fuzz-artifacts"
    small = CaseSpec(tables=((20, 3), (5, 4)), batch_size=4, max_length=3, hot_rows=(HotRow(0, 1, 10),), seed=1)
    big = CaseSpec(tables=((30, 2),), batch_size=7, max_length=5, seed=2)
    a = save_result(root, _failure(small, "step 0 table 1 weights after update (sample = row)", Check.WEIGHTS), KernelConfig(),
                    {"sut": "triton"})
    b = save_result(root, _failure(big, "step 0 forward vs fp64", Check.FORWARD), KernelConfig(), {"sut": "torch"})
    pending = root / ".pending" / "999999-1"
    pending.mkdir(parents=True)
    shutil.copy(b / "case.json", pending / "case.json")
    (root / "report").mkdir()  # pictures beside the cases: not a case

    assert main(["replay", str(root)]) == 0
    text = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in text.splitlines()[2:]}
    assert set(rows) == {a.name, b.name, ".pending/999999-1"}
    # id, kind, sut, tables, bags, lookups (upper estimate: bags x max_length + hot lookups), check
    assert rows[a.name][1:6] == ["mismatch", "triton", "2", "8", str(2 * 4 * 3 + 10)]
    assert " ".join(rows[a.name][6:]) == "weights after update"
    assert rows[b.name][1:] == ["mismatch", "torch", "1", "7", "35", "forward", "vs", "fp64"]
    assert rows[".pending/999999-1"][1] == "pending"

    assert main(["replay", str(root), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    by_id = {c["id"]: c for c in data["cases"]}
    assert by_id[a.name]["check"] == "weights after update" and by_id[a.name]["lookups"] == 34
    assert by_id["999999-1"]["kind"] == "pending"


def test_replay_on_a_directory_without_cases_is_still_an_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as e:
        main(["replay", str(tmp_path / "empty")])
    assert e.value.code == 2 and "no case.json" in capsys.readouterr().err
