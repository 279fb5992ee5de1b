"""The ratio picture's data preparation (fuzz.campaign.pictures.plan): which panel each check lands in,
how many points the clip hides, which are marked failing; and the outcomes a CaseResult hands it."""

from __future__ import annotations

import pytest

from fuzz.campaign.pictures import CLIP, Collector, Panel, Point, nudged_x, panel_of, plan, write
from fuzz.judge.check import RAN, CaseResult
from oracles.compare import Check, Mismatch, Oracle, Report
from cases import CaseSpec
from tbe import KernelConfig


def test_each_point_lands_in_its_panel():
    assert panel_of(Point(4, "forward vs fp64", 0.3, True, True)) == Panel.RATIO
    assert panel_of(Point(4, "forward vs fp64", 0.0, True, True)) == Panel.ZERO  # no error: no place on a log axis
    assert panel_of(Point(4, "weights after update", CLIP, True, False)) == Panel.RATIO  # on the edge, still shown
    assert panel_of(Point(4, "weights after update", CLIP * 1.01, True, False)) == Panel.CLIPPED
    assert panel_of(Point(4, "momentum", float("inf"), True, False)) == Panel.CLIPPED
    assert panel_of(Point(4, "momentum", float("nan"), True, False)) == Panel.CLIPPED
    # yes/no checks have no bound: never on the ratio axis, whatever ratio they carry
    assert panel_of(Point(4, "FATAL bounds check raised", 0.0, False, True)) == Panel.YES_NO
    assert panel_of(Point(4, "bounds-check warnings", 5.0, False, False)) == Panel.YES_NO


def test_plan_counts_clipped_and_failing_points():
    pts = [Point(1, "forward vs fp64", 0.2, True, True), Point(1, "forward vs fp64", 0.0, True, True),
           Point(300, "weights after update", 4.19e6, True, False), Point(300, "momentum", 2.17e30, True, False),
           Point(40, "weights after update", 3.0, True, False), Point(40, "bounds-check warnings", 0.0, False, False),
           Point(40, "fbgemm update vs fp64", 0.0, False, True)]
    pl = plan(pts, clip=1e3)
    assert pl.clipped == 2
    assert sorted((p.sl, p.check) for p in pl.failing) == [(40, "weights after update"), (300, "momentum"),
                                                           (300, "weights after update")]
    assert pl.graded_checks() == ["forward vs fp64", "momentum", "weights after update"]
    assert pl.yes_no_checks() == ["bounds-check warnings", "fbgemm update vs fp64"]
    assert [p.sl for p in pl.points(Panel.ZERO)] == [1]
    assert sum(len(pl.points(panel)) for panel in Panel) == len(pts)  # every point drawn somewhere
    assert plan(pts, clip=1e31).clipped == 0


def _result(reports, error=None, kind=None):
    return CaseResult(CaseSpec(tables=((5, 4),), batch_size=2), reports, 4, frozenset(), 0.0, error, 7,
                      error_kind=kind)


def test_outcomes_keep_yes_no_checks_apart_and_drop_empty_comparisons():
    r = _result([
        Report("step 0 forward vs fp64", True, Mismatch(0, 0, 0, 1.0, 1.0, 0.5), 0, 8, check=Check.FORWARD, step=0),
        Report("step 1 forward vs fp64", True, Mismatch(0, 0, 0, 1.0, 1.25, 0.5), 0, 8, check=Check.FORWARD, step=1),
        Report("step 0 table 0 weights after update (sample = row)", True, None, 0, 0,  # compared nothing
               check=Check.WEIGHTS, step=0, table=0),
        Report("step 0 bounds-check warnings", False, Mismatch(-1, -1, -1, 2.0, 3.0, 0.0), 1, 1, graded=False,
               check=Check.WARNINGS, step=0),
        Report("step 0 fbgemm update vs fp64", True, None, 0, 1, graded=False, check=Check.UPDATE, step=0,
               oracle=Oracle.FBGEMM),
    ])
    o = r.outcomes_by_check()
    assert set(o) == {"forward vs fp64", "bounds-check warnings", "fbgemm update vs fp64"}
    assert o["forward vs fp64"].graded and o["forward vs fp64"].ratio == 0.5 and o["forward vs fp64"].ok
    assert not o["bounds-check warnings"].graded and not o["bounds-check warnings"].ok
    assert o["bounds-check warnings"].ratio == 0.0  # a count that differs by one is no error / bound
    assert not o["fbgemm update vs fp64"].graded
    # the summary's per-check ratios (and the gate's) hold graded checks only: a count has no error / bound
    assert set(r.ratios_by_check()) == {"forward vs fp64", "weights after update"}
    assert r.ratios_by_check()["forward vs fp64"] == 0.5


def test_a_crash_fails_the_ran_check(tmp_path):
    r = _result([], error="Traceback ...\nRuntimeError: boom", kind="crash")
    assert r.outcomes_by_check() == {RAN: r.outcomes_by_check()[RAN]}
    assert not r.outcomes_by_check()[RAN].ok and not r.outcomes_by_check()[RAN].graded
    c = Collector()
    c(None, r)
    assert c.points == [Point(7, RAN, 0.0, False, False)]


def test_pictures_are_written_with_every_panel(tmp_path):
    pytest.importorskip("matplotlib")
    c = Collector()
    c.runs.update({1: 3, 300: 1})
    c.points += [Point(1, "forward vs fp64", 0.2, True, True), Point(1, "forward vs fp64", 0.0, True, True),
                 Point(300, "weights after update", 4e6, True, False), Point(300, RAN, 0.0, False, False)]
    drawn, why = write(c, KernelConfig(), tmp_path)
    assert why is None and [p.name for p in drawn] == ["segment_lengths.png", "ratio_vs_segment.png"]
    assert all(p.stat().st_size > 1000 for p in drawn)


def test_series_with_equal_points_are_drawn_apart_but_near_their_segment_length():
    # FBGEMM's forward and ours often have the very same ratio in one example: drawn at one x, the
    # series drawn last hid the other (its legend entry had no visible point)
    xs = [nudged_x(300, i, 5) for i in range(5)]
    assert len(set(xs)) == 5 and xs == sorted(xs)
    assert all(300 / 1.2 < x < 300 * 1.2 for x in xs)  # well within a quarter octave of the true length
    assert nudged_x(300, 0, 1) == 300


def test_failures_of_known_findings_are_drawn_apart_from_failures():
    pts = [Point(3, "forward vs fp64", 0.5, True, True), Point(3, "weights after update", 40.0, True, False, True),
           Point(9, "weights after update", 7.0, True, False), Point(9, "bounds-check warnings", 0.0, False, False, True)]
    pl = plan(pts)
    assert [(p.sl, p.ratio) for p in pl.failing] == [(9, 7.0)]
    assert [(p.sl, p.ratio) for p in pl.triaged] == [(3, 40.0)]


def test_the_collector_marks_what_the_triage_list_explains(tmp_path):
    bad = _result([Report("weights after update", False, Mismatch(0, 0, 0, 1.0, 2.0, 1e-7), 1, 4,
                                check=Check.WEIGHTS, step=0)])
    for explained in (True, False):
        c = Collector(known=lambda r: explained)
        c(None, bad)
        assert [p.known for p in c.points if not p.ok] == [explained]
    pytest.importorskip("matplotlib", reason="the pictures need matplotlib (an optional dependency)")
    drawn, why = write(c, None, tmp_path)  # no KernelConfig: a SUT whose routing is not this project's
    assert why is None and all(p.stat().st_size > 1000 for p in drawn)
