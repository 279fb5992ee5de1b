"""The spec reducer (``fuzz.campaign.reduce``): its candidates are valid, smaller cases, and with a planted
fault on it cuts a failing case of several tables and dozens of bags down to at most 2 tables, 8 bags
and 64 lookups that still fail the same way (and pass with the fault off)."""

from __future__ import annotations

import pytest

from fuzz.campaign.reduce import candidates, reduce_failure, signature
from fuzz.execution.supervisor import Supervisor
from fuzz.judge.check import CaseResult
from fuzz.status import FailureKind
from cases import BadBatchSpec, BadId, BadIdCase, CaseSpec, HotRow
from tbe import KernelConfig
from tests.fuzz.campaign.test_fuzz_driver import FAULT

BIG = CaseSpec(tables=((40, 4), (30, 3), (50, 2), (20, 5)), batch_size=12, max_length=6, seed=5,
               hot_rows=(HotRow(2, 7, 9), HotRow(3, 1, 4)))


def test_candidates_are_smaller_and_keep_hot_rows_on_their_tables():
    cands = list(candidates(BIG))
    assert cands and all(c.size() < BIG.size() or c.steps < BIG.steps for c in cands)
    first_half, second_half = cands[0], cands[1]
    assert first_half.tables == BIG.tables[:2] and first_half.hot_rows == ()
    assert second_half.tables == BIG.tables[2:]
    assert second_half.hot_rows == (HotRow(0, 7, 9), HotRow(1, 1, 4)), "hot rows follow their tables"
    assert {c.batch_size for c in cands} >= {6, 11} and {c.max_length for c in cands} >= {3, 5}
    assert any(len(c.hot_rows) == 1 for c in cands) and any(HotRow(2, 7, 4) in c.hot_rows for c in cands)


def test_bad_id_candidates_cut_both_halves_alike():
    tables = ((10, 4), (12, 3))
    case = BadIdCase(CaseSpec(tables=tables, batch_size=4), BadBatchSpec(tables=tables, batch_size=4,
                                                                         bad_ids=(BadId("rows"),)))
    cands = list(candidates(case))  # BadIdCase checks that the two halves agree
    assert {c.spec.num_tables for c in cands} == {1, 2} and {c.bad.batch_size for c in cands} >= {2, 3}


def test_a_failure_past_a_size_is_cut_to_that_size_in_few_checks():
    """A failure that needs more than 2^15 lookups: the ladder of cuts lands just past the edge in a few dozen
    checks. Halving and then stepping the batch down by one bag took more than 200."""
    limit = 2**15 - 1

    def check(case):
        n = case.size()[2]
        return CaseResult(case, [], n, frozenset(), 0.0, error=None if n <= limit else "lost lookups",
                          error_kind=FailureKind.CRASH)

    start = CaseSpec(tables=((100, 4),), batch_size=625, length_profile="fixed", max_length=64, seed=1)
    red = reduce_failure(check(start), check, stop=lambda: False)
    spec = red.result.case
    assert red.finished and red.result.lookups > limit
    assert (spec.batch_size - 1) * spec.max_length <= limit and spec.batch_size * (spec.max_length - 1) <= limit
    assert red.tried <= 60, red.tried


@pytest.mark.fuzz
def test_a_planted_fault_reduces_to_a_small_case_that_still_fails():
    config = KernelConfig(faults=(FAULT,))
    s = Supervisor()
    try:
        start = s.run(BIG, config)
        assert not start.ok, "the starting case must show the fault"
        steps: list[str] = []
        red = reduce_failure(start, lambda c: s.run(c, config), stop=lambda: False, progress=steps.append)
        tables, bags, _ = red.result.case.size()
        assert red.finished and tables <= 2 and bags <= 8 and red.result.lookups <= 64, red.result.case
        assert steps and all("now" in line for line in steps)
        again = s.run(red.result.case, config)
        assert signature(again) == signature(start), "the reduced case fails the same way"
        assert s.run(red.result.case, KernelConfig()).ok, "and it is the fault that fails it"
    finally:
        s.close()


def test_selftest_reports_each_shrunk_size():
    from fuzz.selftest.report import selftest_json, selftest_text
    from fuzz.selftest.detectors import CAUGHT, Detection
    from fuzz.selftest.run import FaultResult

    fr = FaultResult(FAULT, "a planted fault", [Detection("campaign", CAUGHT, "", 1.5, 3, (1, 2, 5))])
    (entry,) = selftest_json([fr])["faults"]
    assert entry["shrunk"] == {"tables": 1, "bags": 2, "lookups": 5}
    assert "shrunk to 1 table(s), 2 bag(s), 5 lookups" in selftest_text([fr])
