"""The SUT registry and --sut on every command: the documented own-SUT example, entry points, module:factory.

The example is extracted from docs/guides/sut.md and run as written, so the documentation
cannot drift from the protocol.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from fuzz.sut import protocol as sut_mod
from fuzz.budgets import Budget
from fuzz.cli import main
from fuzz.errors import SUTError
from fuzz.campaign.triage import run_triaged
from tbe import KernelConfig
from tests.paths import REPO

SUT_GUIDE = REPO / "docs" / "guides" / "sut.md"
SHORT = ["--time", "6", "--max-examples", "12"]


def guide_example() -> str:
    text = SUT_GUIDE.read_text()
    m = re.search(r"```python\n(# my_tbe\.py.*?)```", text, re.S)
    assert m, "docs/guides/sut.md lost its my_tbe.py example"
    return m.group(1)


@pytest.fixture
def user_sut(tmp_path, monkeypatch):
    """The guide's my_tbe.py importable from a temporary directory (and a broken twin, my_tbe_bad)."""
    code = guide_example()
    (tmp_path / "my_tbe.py").write_text(code)
    broken = code.replace("w -= self.lr * leaf.grad", "w -= 2 * self.lr * leaf.grad")
    assert broken != code
    (tmp_path / "my_tbe_bad.py").write_text(broken)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("my_tbe", "my_tbe_bad"):
        sys.modules.pop(name, None)
    sut_mod.get.cache_clear()
    yield tmp_path
    sut_mod.get.cache_clear()


@pytest.mark.fuzz
def test_guide_example_runs_a_campaign_and_can_fail(user_sut, capsys):
    art = user_sut / "art"
    assert main(["run", "--sut", "my_tbe:factory", *SHORT, "--artifacts", str(art)]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "SUT my_tbe:factory" in out and "weights after update" in out
    # the same campaign catches a wrong update in the user's code, saves it and names the SUT
    assert main(["run", "--sut", "my_tbe_bad:factory", *SHORT, "--artifacts", str(art)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "weights after update" in out and "MISMATCH" in out
    (artifact,) = [p for p in art.iterdir() if (p / "case.json").is_file()]
    assert json.loads((artifact / "meta.json").read_text())["sut"] == "my_tbe_bad:factory"
    # replay uses the recorded SUT; --sut replays the same case against another
    assert main(["replay", str(artifact)]) == 1
    assert "SUT my_tbe_bad:factory" in capsys.readouterr().out
    assert main(["replay", str(artifact), "--sut", "my_tbe:factory"]) == 0
    assert "SUT my_tbe:factory" in capsys.readouterr().out


def test_entry_point_group_registers_a_sut(user_sut, monkeypatch):
    dist = user_sut / "my_tbe_pkg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-tbe-pkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[tbe_fuzz.suts]\nmy-tbe = my_tbe:factory\n")
    assert "my-tbe" in sut_mod.names()
    resolved = sut_mod.get("my-tbe")
    assert resolved.name == "my-tbe" and resolved.capabilities.optimizers == ("exact_sgd",)
    res = run_triaged(KernelConfig(), Budget("t", 4.0, 4.0, 5, 300), artifacts_dir=None, sut="my-tbe")
    assert res.ok and res.examples >= 1 and res.sut == "my-tbe"


def test_builtin_suts_are_declared_as_entry_points():
    """pyproject declares every built-in under the group, pointing where the registry does."""
    text = (REPO / "pyproject.toml").read_text()
    section = text.split('[project.entry-points."tbe_fuzz.suts"]', 1)[1]
    for name, target in sut_mod.BUILTIN.items():
        assert f'{name} = "{target}"' in section


@pytest.mark.parametrize("name, needle", [
    ("nope", "unknown SUT 'nope'"),
    ("no_such_module_xyz:factory", "cannot import 'no_such_module_xyz'"),
    ("fuzz.sut.protocol:no_factory", "has no 'no_factory'"),
    ("fuzz.sut.protocol:DEFAULT", "not a fuzz.sut.protocol.SUT"),
    ("", "non-empty"),
])
def test_bad_sut_names_are_clear_errors(name, needle):
    with pytest.raises(SUTError, match=re.escape(needle)):
        sut_mod.get(name)


def test_broken_entry_point_is_reported(user_sut):
    (user_sut / "broken_tbe.py").write_text("raise RuntimeError('plug-in exploded')\n")
    dist = user_sut / "broken_pkg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-pkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[tbe_fuzz.suts]\nbroken = broken_tbe:factory\n")
    with pytest.raises(SUTError, match="entry point 'broken'.*plug-in exploded"):
        sut_mod.get("broken")


@pytest.mark.parametrize("argv, needle", [
    (["run", "--sut", "nope"], "unknown SUT 'nope'"),
    (["replay", "/no/such", "--sut", "nope"], "unknown SUT 'nope'"),
    (["gate", "--sut", "torch", "--baseline", "B", "--candidate", "C"], "--sut"),
    (["selftest", "--sut", "torch"], "has no planted faults"),
    (["selftest", "--sut", "fbgemm-cpu"], "has no planted faults"),
])
def test_every_command_takes_sut(argv, needle, tmp_path, capsys):
    if argv[0] == "gate":  # two valid config files, so only --sut can be wrong
        for i, flag in ((3, "B"), (5, "C")):
            KernelConfig().save(tmp_path / f"{flag}.json")
            argv[i + 1] = str(tmp_path / f"{flag}.json")
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--sut" in err and "Traceback" not in err
    if argv[0] == "gate":
        assert "no KernelConfig" in err
    else:
        assert needle in err


def test_a_sut_that_is_not_available_here_is_refused(capsys):
    from fuzz.sut import fbgemm_cuda as sut_fbgemm_cuda

    if sut_fbgemm_cuda.unavailable_reason() is None:
        pytest.skip("FBGEMM's CUDA TBE is available here")
    with pytest.raises(SystemExit) as exc:
        main(["run", "--sut", "fbgemm-cuda"])
    assert exc.value.code == 2
    assert "not available here" in capsys.readouterr().err


def test_config_is_refused_for_a_sut_without_kernel_config(tmp_path, capsys):
    cfg = tmp_path / "c.json"
    KernelConfig().save(cfg)
    with pytest.raises(SystemExit) as exc:
        main(["run", "--sut", "torch", "--config", str(cfg)])
    assert exc.value.code == 2 and "no KernelConfig" in capsys.readouterr().err


@pytest.mark.fuzz
def test_gate_and_selftest_accept_the_default_sut_by_name(tmp_path, capsys, monkeypatch, user_sut):
    base = tmp_path / "base.json"
    KernelConfig().save(base)
    # level (b) alone: it passes, and the cascade is UNVERIFIED (exit 1) because (a), (c), (d) were not asked for
    assert main(["gate", "--sut", "triton", "--levels", "b", "--seeds", "1", "--baseline", str(base),
                 "--candidate", str(base), "--time", "3", "--max-examples", "2", "--artifacts", str(tmp_path / "a")]) == 1
    out = capsys.readouterr().out
    assert "UNVERIFIED" in out and "(b)" in out and "FAIL" not in out, out
    # the self-test hands --sut to its detectors (a stand-in campaign detector records it)
    from fuzz.selftest import detectors

    seen = []
    monkeypatch.setattr(detectors, "_EXTRA", {})
    monkeypatch.setattr(detectors, "CAMPAIGN", detectors.Detector(
        "campaign", lambda f, ctx: seen.append(ctx.sut) or detectors.Detection("campaign", detectors.CAUGHT)))
    (user_sut / "planted_tbe.py").write_text("from fuzz.sut.triton_tbe import factory\n")  # a fork, by module:factory
    assert main(["selftest", "--sut", "planted_tbe:factory", "--fault", "fwd_skip_last_id"]) == 0
    assert seen == ["planted_tbe:factory"] and "1 caught" in capsys.readouterr().out


def test_help_lists_the_builtin_suts():
    import subprocess

    out = subprocess.run([sys.executable, "-m", "fuzz", "run", "--help"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0
    assert all(n in out.stdout for n in ("triton", "fbgemm-cpu", "fbgemm-cuda", "torch", "module:factory"))


def test_guide_documents_every_protocol_method():
    text = SUT_GUIDE.read_text()
    for method in ("forward(", "backward(", "weights()", "momentum()", "bounds_check_warnings()"):
        assert method in text
