"""Self-test detectors beyond the campaign: every fault in the catalog has a check that can run here."""

from __future__ import annotations

import pytest

from fuzz.budgets import Budget
from fuzz.selftest import Context, detectors_for, run_selftest
from tbe import faults
from tbe.backend import INTERPRETED

# Races need the GPU's concurrency: the interpreter runs programs one after another.
NO_DETECTOR_HERE = {"no_fence", "no_barrier"} if INTERPRETED else set()


def test_every_fault_has_a_detector_that_runs_on_this_backend():
    for fault in sorted(set(faults.KNOWN) - NO_DETECTOR_HERE):
        runnable = [d.name for d in detectors_for(fault) if d.skip_reason(fault) is None]
        assert runnable, f"{fault}: every detector skips on this backend"


@pytest.mark.fuzz
def test_int32_fault_is_caught_at_the_transpose():
    (fr,) = run_selftest(Budget("t", 5.0, 5.0, 4, 300), only=["int32_linearize_past_limit"])
    assert fr.caught and fr.first_catch.detector == "int32_transpose", fr.detections
    assert "passes without the fault" in fr.first_catch.detail and "linear index" in fr.first_catch.detail
    assert fr.first_catch.shrunk[2] <= 4, "the shrunk layout reads a few ids"


@pytest.mark.fuzz
def test_a_hanging_kernel_ends_as_hang_and_the_case_passes_without_it():
    """The supervisor's timeout (floor + slack x predicted cost) ends the planted endless loop as ``hang``."""
    (det,) = [d for d in detectors_for("hang_narrow_long_run") if d.name == "supervised hang"]
    with faults.allow():
        found = det.run("hang_narrow_long_run", Context(Budget("t", 5.0, 5.0, 4, 300)))
    assert found.status == "caught" and "passes without the fault" in found.detail, found


def test_hanging_faults_start_first_when_faults_run_at_once():
    from fuzz.selftest.run import longest_first

    names = sorted(faults.KNOWN)
    order = longest_first(names)
    assert sorted(order) == names and faults.HANGS
    assert set(order[:len(faults.HANGS)]) == faults.HANGS
    rest = [n for n in names if n not in faults.HANGS]
    assert order[len(faults.HANGS):] == rest
