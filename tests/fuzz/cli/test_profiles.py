"""Hypothesis profiles load on request only: importing the project leaves Hypothesis' settings as they were."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz.profiles import HYPOTHESIS_PROFILE
from fuzz import profiles
from tests.paths import REPO
# Imports every module of the four packages (``__main__`` modules excepted) and says whether Hypothesis'
# default settings changed; then loads the ci profile and says so again, to show the comparison sees a load.
_IMPORT_ALL = """
import importlib, os, pkgutil
import hypothesis
before = repr(hypothesis.settings.default)
seen = []
for top in ("tbe", "cases", "oracles", "strategies", "fuzz"):
    package = importlib.import_module(top)
    seen.append(top)
    for info in pkgutil.walk_packages(package.__path__, top + "."):
        if info.name.rsplit(".", 1)[-1] != "__main__":
            importlib.import_module(info.name)
            seen.append(info.name)
print(len(seen), repr(hypothesis.settings.default) == before)
from fuzz import profiles
os.environ["HYPOTHESIS_PROFILE"] = "ci"
profiles.load()
print(repr(hypothesis.settings.default) == before)
"""


def test_importing_every_module_leaves_hypothesis_settings_unchanged():
    out = subprocess.run([sys.executable, "-c", _IMPORT_ALL], cwd=REPO, capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-3000:]
    count, unchanged_after_imports, unchanged_after_load = out.stdout.split()
    assert int(count) > 100, "the walk should have imported every module of the four packages"
    assert unchanged_after_imports == "True"
    assert unchanged_after_load == "False", "loading a profile must show as a change, or the check proves nothing"


def test_unknown_profile_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(HYPOTHESIS_PROFILE.name, "weekly")
    with pytest.raises(ValueError, match="HYPOTHESIS_PROFILE must be one of .*, got 'weekly'"):
        profiles.load()
