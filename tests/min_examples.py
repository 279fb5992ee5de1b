"""A pytest plugin: a ``fuzz`` test that ran too few valid Hypothesis examples fails.

A health check Hypothesis was told to suppress, a filter or ``assume`` that rejects nearly every
draw, or a strategy that overruns can leave a property test with almost nothing checked while
it still passes. After a passing ``fuzz`` test this counts the examples Hypothesis ran to
completion (its statistics: valid or failing test cases of every phase but shrinking) and
fails the test when fewer than ``MIN_SHARE`` of its ``max_examples`` ran. Only tests with the
``fuzz`` marker are held to it: their search spaces are effectively endless, while a small
property test over a finite space may end early by exhausting it. The statistics arrive through
``hypothesis.statistics.collector``, the hook Hypothesis's own pytest plugin uses; this wrapper
sits inside that plugin's and hands every report on to it.
"""

from __future__ import annotations

import math

import pytest

MIN_SHARE = 0.5  # of the test's max_examples
_COUNTED = ("valid", "interesting")
_SKIPPED_PHASES = ("shrink",)


def ran_examples(stats: dict) -> int:
    """Test cases that ran to completion (passing or failing) in a statistics dict, shrinking left out."""
    total = 0
    for key, phase in stats.items():
        if not key.endswith("-phase") or key[: -len("-phase")] in _SKIPPED_PHASES or not isinstance(phase, dict):
            continue
        total += sum(1 for case in phase.get("test-cases", ()) if case.get("status") in _COUNTED)
    return total


def required_examples(max_examples: int) -> int:
    return max(1, math.ceil(MIN_SHARE * max_examples))


def _settings(item: pytest.Item):
    from hypothesis import Phase

    obj = getattr(item, "obj", None)
    if obj is None or not getattr(obj, "is_hypothesis_test", False):
        return None
    fn = getattr(obj, "__func__", obj)
    s = getattr(fn, "_hypothesis_internal_use_settings", None)
    if s is None or Phase.generate not in s.phases:
        return None
    return s


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item):
    settings = _settings(item) if item.get_closest_marker("fuzz") is not None else None
    if settings is None:
        return (yield)
    from hypothesis.statistics import collector

    reports: list[dict] = []
    outer = collector.value

    def note(stats: dict) -> None:
        reports.append(stats)
        if outer is not None:
            outer(stats)

    with collector.with_value(note):
        result = yield  # a failing test raises here and is judged by its own failure
    need = required_examples(settings.max_examples)
    if not reports:
        pytest.fail(f"{item.nodeid}: no Hypothesis statistics arrived, so the examples it ran could not be "
                    f"counted (at least {need} are required)", pytrace=False)
    ran = sum(ran_examples(r) for r in reports)
    if ran < need:
        pytest.fail(f"{item.nodeid}: Hypothesis ran {ran} valid example(s), fewer than {need} "
                    f"({MIN_SHARE:.0%} of max_examples={settings.max_examples}): a suppressed health check, a "
                    f"filter or assume() emptied the test (pytest --hypothesis-show-statistics shows how)",
                    pytrace=False)
    return result
