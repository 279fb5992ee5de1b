"""The minimum-examples rule (``tests.min_examples``) fails an emptied fuzz test and passes a full one."""

from __future__ import annotations

import pytest

from tests.min_examples import ran_examples, required_examples

pytest_plugins = ["pytester"]

_TESTS = '''
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

@pytest.mark.fuzz
@settings(max_examples=10, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 10**9))
def test_emptied_by_assume(x):
    assume(x == 0)  # one distinct draw passes; the suppressed health check no longer says so

@pytest.mark.fuzz
@settings(max_examples=10, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.tuples(st.integers(0, 10**9), st.integers(0, 10**9)).filter(lambda t: t[0] == t[1] == 0))
def test_emptied_by_filter(x):
    pass

@pytest.mark.fuzz
@settings(max_examples=10, database=None, derandomize=True)
@given(st.integers())
def test_full(x):
    pass

@settings(max_examples=10, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 10**9))
def test_not_fuzz_is_not_counted(x):
    assume(x == 0)

@pytest.mark.fuzz
@settings(max_examples=10, database=None, derandomize=True)
@given(st.integers())
def test_failing_keeps_its_own_failure(x):
    assert x < 5
'''


def test_an_emptied_fuzz_test_fails_and_a_full_one_passes(pytester):
    pytester.makeini("[pytest]\nmarkers =\n    fuzz: differential fuzz tests\n")
    pytester.makepyfile(test_props=_TESTS)
    res = pytester.runpytest("-p", "tests.min_examples", "-p", "no:randomly", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=2, failed=3)
    out = res.stdout.str()
    for name in ("test_emptied_by_assume", "test_emptied_by_filter"):
        assert f"test_props.py::{name}: Hypothesis ran" in out and "fewer than 5" in out, out
    assert "test_failing_keeps_its_own_failure" in out and "assert" in out
    assert "test_full: Hypothesis ran" not in out and "test_not_fuzz_is_not_counted: Hypothesis ran" not in out


def test_counting_reads_every_phase_but_shrinking():
    stats = {"generate-phase": {"test-cases": [{"status": "valid"}, {"status": "invalid"}, {"status": "overrun"}]},
             "target-phase": {"test-cases": [{"status": "valid"}, {"status": "interesting"}]},
             "shrink-phase": {"test-cases": [{"status": "valid"}] * 5}, "stopped-because": "x"}
    assert ran_examples(stats) == 3
    assert [required_examples(n) for n in (1, 2, 3, 40)] == [1, 1, 2, 20]
