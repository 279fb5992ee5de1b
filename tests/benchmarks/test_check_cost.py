"""benchmarks.check_cost: the parts it times on the CPU (draws alone, FBGEMM's sample check alone)."""

from __future__ import annotations

import sys

import pytest

from benchmarks import check_cost
from fuzz.judge import fbgemm_sample
from oracles import fbgemm_cpu


@pytest.mark.skipif(not fbgemm_cpu.available(), reason="fbgemm_gpu's CPU TBE is not installed")
def test_fbgemm_only_times_the_sample_check_of_every_case_whatever_its_size(monkeypatch, capsys):
    """It runs FBGEMM's check on each large case even past the sample's cap (the cost the cap is set by), and
    reports its rate in lookup columns."""
    ran = []
    original = fbgemm_sample.run
    monkeypatch.setattr(fbgemm_sample, "run", lambda case, t: ran.append(int(t.indices.numel())) or original(case, t))
    monkeypatch.setattr(fbgemm_sample, "MAX_COLUMNS", 16)  # every case is past the cap
    monkeypatch.setattr(sys, "argv", ["check_cost", "--cases", "2", "--large", "600", "--seed", "1", "--fbgemm-only"])
    assert check_cost.main() == 0
    out = capsys.readouterr().out
    assert len(ran) == 4 and min(ran) >= 512  # two cases, two passes
    assert "FBGEMM's sample check, second pass" in out and "lookup columns/s" in out


def test_draws_only_and_fbgemm_only_exclude_each_other(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["check_cost", "--draws-only", "--fbgemm-only"])
    with pytest.raises(SystemExit):
        check_cost.main()


def test_oracles_only_times_the_references_of_every_case_and_never_the_sut(monkeypatch, capsys):
    """Two passes over the large cases' references and bounds, each case's lookups counted, no SUT run; without
    --large it refuses (drawn cases may hold bad ids that only a check repairs)."""
    from oracles import reference_backward as rb

    called = []
    original = rb.reference_backward
    monkeypatch.setattr(rb, "reference_backward", lambda *a, **k: called.append(a[3].numel()) or original(*a, **k))
    monkeypatch.setattr(check_cost, "run_case", lambda *a, **k: pytest.fail("--oracles-only ran the SUT"))
    monkeypatch.setattr(sys, "argv", ["check_cost", "--cases", "2", "--large", "600", "--seed", "1",
                                      "--oracles-only", "--sut", "torch"])
    assert check_cost.main() == 0
    out = capsys.readouterr().out
    assert len(called) == 4 and min(called) >= 512
    passes = [line for line in out.splitlines() if line.startswith("the FP64 references and bounds")]
    assert len(passes) == 2 and all(f"{sum(called[:2])} lookups" in line for line in passes), out
    monkeypatch.setattr(sys, "argv", ["check_cost", "--oracles-only"])
    with pytest.raises(SystemExit):
        check_cost.main()
