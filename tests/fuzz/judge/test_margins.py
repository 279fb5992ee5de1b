"""Passing checks counted by decade of error / bound, merged across workers, yes/no checks left out."""

from fuzz.judge.margins import LABELS, Margins, decade_bin
from oracles.compare import Check, Mismatch, Report


def _report(what: str, err: float, bound: float, check: Check, step: int, table=None) -> Report:
    ok = err <= bound
    return Report(what, ok, Mismatch(0, 0, 0, 1.0, 1.0 + err, bound), 0 if ok else 1, 4, check=check, step=step,
                  table=table)


def test_decade_bins():
    assert [LABELS[decade_bin(r)] for r in (0.0, 3e-9, 1e-6, 2.5e-4, 0.05, 0.99, 1.0)] == \
        ["0", "<1e-6", "1e-6", "1e-4", "1e-2", "0.1-1", "0.1-1"]


def test_counts_passing_bounded_checks_and_merges():
    a, b = Margins(), Margins()
    a.add([_report("step 0 forward vs fp64", 0.0, 1e-6, Check.FORWARD, 0),
           _report("step 1 forward vs fp64", 5e-7, 1e-6, Check.FORWARD, 1),
           _report("step 0 table 2 weights after update (sample = row)", 3e-9, 1e-6, Check.WEIGHTS, 0, 2),
           _report("step 0 forward vs fp64", 2e-6, 1e-6, Check.FORWARD, 0),  # failing: not a clean check
           Report("step 0 FATAL bounds check raised (x)", True, None, 0, 1, graded=False,  # yes/no: no bound
                  check=Check.FATAL_RAISED, step=0),
           Report("step 0 bounds-check warnings", True, Mismatch(-1, -1, -1, 3.0, 3.0, 0.0), 0, 1, graded=False,
                  check=Check.WARNINGS, step=0)])
    b.add([_report("step 0 forward vs fp64", 5e-7, 1e-6, Check.FORWARD, 0)])
    a.merge(b)
    assert a.counts == {"forward vs fp64": [1, 0, 0, 0, 0, 0, 0, 2],
                        "weights after update": [0, 0, 0, 0, 0, 1, 0, 0]}
    assert a.to_json()["bins"] == list(LABELS)
    assert "weights after update" in "\n".join(a.lines())


def test_margins_survive_a_workers_json_summary():
    a = Margins()
    a.add([_report("step 0 forward vs fp64", 5e-7, 1e-6, Check.FORWARD, 0)])
    assert Margins.from_json(a.to_json()).counts == a.counts
    assert Margins.from_json({}).counts == {}


def test_a_passing_ratio_never_prints_as_one():
    """0.99993 rounded to three digits reads "1", at the bound, and 1.00004 reads as not over it."""
    from fuzz.judge import ratio_text

    assert [ratio_text(v) for v in (0.99993, 0.9995, 0.996, 1.0, 1.00004, 2.5e6, 1.234e-5)] == \
        ["0.999", "0.999", "0.996", "1", "1.00004", "2.5e+06", "1.23e-05"]


def test_the_summary_says_why_a_correct_kernel_sits_near_one():
    from fuzz.campaign.report import _ratios
    from fuzz.judge import RATIO_NOTE

    assert _ratios({"forward vs fp64": 0.99993}) == ["    forward vs fp64                  0.999"]
    assert "correct kernel" in RATIO_NOTE and "concepts.md#ratio-error--bound" in RATIO_NOTE
