"""The quick selection: HYPOTHESIS_PROFILE=smoke runs two examples per property test (the simplest and a drawn
one, which has lookups in it), and the
``property`` marker (added by conftest to every Hypothesis test) selects exactly those."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO


def _python(code: str, profile: str) -> str:
    env = {**os.environ, "HYPOTHESIS_PROFILE": profile}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_smoke_profile_draws_two_examples_where_ci_draws_the_stated_count():
    code = ("import fuzz.profiles as p; p.load(); from hypothesis import settings; "
            "print(p.examples(300), settings.default.max_examples, settings.default.derandomize)")
    assert _python(code, "smoke") == ["2", "2", "True"]
    assert _python(code, "ci")[0] == "300"


SMOKE_DRAWS = """
import fuzz.profiles as p; p.load()
from hypothesis import given, settings
from strategies.adversarial import fuzz_cases
from cases import materialize
from tests.strategies.test_strategies import DEFAULT_CASES
seen = []
@settings(max_examples=p.examples(300))
@given(fuzz_cases(**DEFAULT_CASES))
def t(fc):
    seen.append(int(materialize(fc.spec).indices.numel()))
t()
print(len(seen), max(seen))
"""


def test_smoke_checks_a_case_with_lookups_in_it():
    """Hypothesis's first example is the simplest (an empty batch here): smoke must not stop at it."""
    runs, most = map(int, _python(SMOKE_DRAWS, "smoke"))
    assert runs == 2 and most > 0, f"smoke ran {runs} example(s), the largest with {most} lookups"


def test_property_marker_selects_the_hypothesis_tests_and_nothing_else():
    env = {**os.environ, "HYPOTHESIS_PROFILE": "smoke"}
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", "-m", "property",
                          "tests/fuzz/judge/test_teeth.py", "tests/tbe/test_transpose.py"],
                         capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    picked = {line.split("::")[1] for line in out.stdout.splitlines() if "::" in line}
    # the @given tests of test_transpose.py, by Hypothesis's own mark on them; test_teeth.py has none
    import tests.fuzz.judge.test_teeth
    import tests.tbe.test_transpose

    tests_of = {name: fn for mod in (tests.fuzz.judge.test_teeth, tests.tbe.test_transpose) for name, fn in vars(mod).items()
                if name.startswith("test_") and callable(fn)}
    given = {name for name, fn in tests_of.items() if getattr(fn, "is_hypothesis_test", False)}
    assert given and len(given) < len(tests_of)  # both kinds are there to tell apart
    assert picked == given, out.stdout + out.stderr
