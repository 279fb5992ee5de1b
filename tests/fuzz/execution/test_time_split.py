"""The campaign's time split (fuzz.time_split): phases sum per case, merged across workers."""

from __future__ import annotations

import pytest

from fuzz import time_split
from fuzz.time_split import Phases, TimeSplit


class _Clock:
    """A fake perf_counter: each block below advances it by what the test says."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_phases_accumulate_and_the_split_accounts_for_the_wall(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(time_split.time, "perf_counter", clock)
    p = Phases()
    for _ in range(2):
        with p.timed("sut"):
            clock.now += 0.01
    with p.timed("oracles"):
        clock.now += 0.02
    assert p.to_dict() == {"sut": pytest.approx(0.02), "oracles": pytest.approx(0.02)}
    s = TimeSplit()
    s.add(p.to_dict(), round_trip=0.05)
    s.add({}, round_trip=0.01)  # a crash: the driver built its result, no phases
    d = s.to_json(wall=0.1)
    assert d["cases"] == 2 and d["driver"] == pytest.approx(0.04)
    assert d["supervision"] == pytest.approx(0.02)
    line = time_split.text(d)[0]
    assert "2 cases" in line and "SUT (kernels)" in line and "driver and Hypothesis 20.0" in line


def test_merge_sums_workers_and_an_empty_split_prints_nothing():
    a = {"cases": 3, "wall": 1.0, "driver": 0.2, "supervision": 0.1, "worker": {"sut": 0.5, "oracles": 0.2}}
    b = {"cases": 1, "wall": 1.0, "driver": 0.9, "supervision": 0.0, "worker": {"sut": 0.1}}
    m = TimeSplit.from_json(a)
    m.merge(TimeSplit.from_json(b))
    d = m.to_json(wall=2.0)  # the two walls summed
    assert d["cases"] == 4 and d["driver"] == pytest.approx(1.1) and d["worker"]["sut"] == pytest.approx(0.6)
    assert d["supervision"] == pytest.approx(0.1)
    assert TimeSplit.from_json(a).to_json(1.0) == {**a, "worker": {**{k: 0.0 for k in time_split.WORKER_PHASES},
                                                                  **a["worker"]}}
    assert time_split.text(TimeSplit().to_json(0.0)) == [] and TimeSplit().lines(1.0) == []


def test_a_failing_phase_is_still_timed_and_its_exception_kept(monkeypatch):
    synced = []
    monkeypatch.setattr(time_split, "_synchronize", lambda device: synced.append(device))
    clock = _Clock()
    monkeypatch.setattr(time_split.time, "perf_counter", clock)
    p = Phases()
    with p.timed("sut", "cuda"):
        clock.now += 1.0
    with pytest.raises(RuntimeError, match="kernel failed"):
        with p.timed("sut", "cuda"):
            clock.now += 2.0
            raise RuntimeError("kernel failed")
    assert synced == ["cuda"]  # no synchronization after the failure
    assert p.to_dict()["sut"] == pytest.approx(3.0)  # and the failing block's time still counted
