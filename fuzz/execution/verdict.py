"""The verdict of one case inside a test: run it supervised, steer Hypothesis, save the final failure.

``assert_passes`` runs the case in this process's shared supervised worker, so a kernel that
crashes fails the test instead of killing the pytest(-xdist) process (the case is written under
``$TBE_FUZZ_ARTIFACTS/.pending`` while it runs). Inside a Hypothesis test it
targets the normalized error (and whatever else the caller adds). A failure of the final example
(Hypothesis's shrunk one, or any failure outside Hypothesis) is saved whole under
``$TBE_FUZZ_ARTIFACTS`` (default ./fuzz-artifacts) and the AssertionError names the directory, so CI
can upload it and ``tbe-fuzz replay DIR`` runs it as it is. ``SESSION`` counts the coverage cells of
every case judged (tests/conftest.py prints them at the end of a pytest run). Under the weak-memory mode
(``fuzz.memcheck.weak_memory``, an interpreter mode of this process) the case runs in this process.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from hypothesis import currently_in_test_context, target
from hypothesis.control import current_build_context

from fuzz.execution.artifacts import save_result
from cases import AnyCase
from fuzz.judge import CaseResult, Coverage, reachable
from fuzz.execution.supervisor import shared
from tbe import KernelConfig
from tbe.env import Kind, register

ARTIFACTS = register(
    "TBE_FUZZ_ARTIFACTS", Kind.PATH, "fuzz-artifacts",
    "where the test suite's property tests save a failing case's artifact directory")

RATIO_CAP = 1e12  # hypothesis.target needs a finite score; inf (NaN out, bound 0, a crash) is capped


class SessionCoverage:
    """The coverage (``fuzz.judge.coverage``) of every case this process judged, and the configs they ran
    under (planted faults aside: they move no path), for a test session's summary."""

    def __init__(self) -> None:
        self.coverage = Coverage()
        self.configs: set[KernelConfig] = set()

    def add(self, result: CaseResult, config: KernelConfig) -> None:
        self.coverage.add(result.cells)
        self.configs.add(config.replace(faults=()))

    def to_json(self) -> Optional[dict[str, Any]]:
        """None before any case; else the coverage JSON with the cells these configs reach (a test session
        also checks forward-only cases)."""
        if not self.coverage.examples:
            return None
        return self.coverage.to_json(frozenset().union(*(reachable(c, search_config=False, forward_only=True)
                                                         for c in self.configs)))


SESSION = SessionCoverage()


def artifacts_dir() -> Path:
    return ARTIFACTS.path()


def failing_text(result: CaseResult) -> str:
    """The failing Reports and the error (crash, finding, traceback) of a failed result."""
    lines = [str(r) for r in result.reports if not r.ok]
    return "\n".join(lines + [line for line in result.text().splitlines()
                              if result.error is not None and not line.startswith("step ")])


def assert_passes(case: AnyCase, config: KernelConfig, label: str = "", test: Optional[str] = None) -> CaseResult:
    """The case's CaseResult when it passes; else AssertionError with its failure, the case JSON and the
    saved artifact (final examples only: shrink candidates are not saved)."""
    from fuzz.memcheck import weak_memory

    if weak_memory.active() is not None:  # an interpreter mode of this process: the case runs here, in it
        from fuzz.judge import run_case

        result = run_case(case, config)
    else:
        result = shared().run(case, config, pending=artifacts_dir() / ".pending")
    SESSION.add(result, config)
    in_hypothesis = currently_in_test_context()
    if in_hypothesis:
        target(min(result.max_ratio, RATIO_CAP), label="max error / bound")
    if result.ok:
        return result
    where = "not saved (an intermediate example; the final one is)"
    if not in_hypothesis or current_build_context().is_final:
        sup = shared()
        path = save_result(artifacts_dir(), result, config, {
            "source": "pytest", "test": test or os.environ.get("PYTEST_CURRENT_TEST"), "label": label,
        }, sup.environment)
        where = f"{path}\nreplay: {(path / 'replay.txt').read_text().strip()}"  # the one replay command, prefix and all
    raise AssertionError(f"{label}: {result.kind}\n{failing_text(result)}\n"
                         f"case: {json.dumps(case.to_dict(), sort_keys=True)}\nartifact: {where}")
