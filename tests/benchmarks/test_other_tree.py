"""benchmarks.other_tree: a module of this checkout runs against another checkout's tbe package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from tests.paths import REPO


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_the_other_trees_tbe_is_the_one_imported(tmp_path):
    (tmp_path / "tbe").mkdir()
    (tmp_path / "tbe" / "__init__.py").write_text("WHICH = 'other'\n")
    (tmp_path / "probe_which_tbe.py").write_text("import sys, tbe\nprint(tbe.WHICH, sys.argv[1:])\n")
    out = _run("benchmarks.other_tree", str(tmp_path), "probe_which_tbe", "--flag", "x")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "other ['--flag', 'x']"


def test_a_folder_without_tbe_is_refused(tmp_path):
    out = _run("benchmarks.other_tree", str(tmp_path), "benchmarks.bench_tbe")
    assert out.returncode != 0 and "holds no tbe/ package" in out.stderr
