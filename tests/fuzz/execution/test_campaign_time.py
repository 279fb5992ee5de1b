"""A campaign's budget holds: an example still running EXAMPLE_CAP_S past the search's end is stopped
and counted as stopped for time (not judged, not a failure), and one whose expected cost exceeds the
time left is not started. The slow case is a forced hang (``fuzz.execution.forced_crash``), and the cap
is lowered so the test takes seconds rather than the 45 s a real campaign allows."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from fuzz.budgets import Budget
from fuzz.campaign import search
from fuzz.campaign.report import campaign_text
from fuzz.campaign.search import CampaignOptions, CampaignRunner
from fuzz.cli import main
from fuzz.execution import envelope
from fuzz.execution.artifacts import load_case
from fuzz.execution.supervisor import CaseTimedOut, Supervisor
from fuzz.status import FailureKind
from cases import CaseSpec
from tbe import KernelConfig
from fuzz.execution.forced_crash import FORCE_CRASH

CAP_S = 6.0
# --time counts from the command's start: on a loaded machine the imports and the first worker's start take
# several seconds of it, and the forced hang must still have begun before the search's end
SEARCH_S = 12.0
# beyond search + cap: starting the first worker (its start-up wait is not cut by the limit) and writing
# the summary; measured at 15-20 s on two cores at load average 8
SLACK_S = 40.0


@pytest.fixture
def hang_everything(monkeypatch):
    monkeypatch.setenv(FORCE_CRASH.name, "hang:tables>=1")  # every case, an empty batch too
    monkeypatch.setattr(search, "EXAMPLE_CAP_S", CAP_S)


def test_an_overlong_example_is_stopped_at_the_cap_and_not_judged(hang_everything, tmp_path, capsys):
    t0 = time.perf_counter()
    rc = main(["run", "--time", str(SEARCH_S), "--no-warmup", "--json", "--artifacts", str(tmp_path)])
    wall = time.perf_counter() - t0
    data = json.loads(capsys.readouterr().out)
    assert wall < SEARCH_S + CAP_S + SLACK_S, wall
    assert data["stopped_for_time"] >= 1 and data["failure"] is None, data
    assert data["stopped_by"] == "time" and data["time_bound"]
    assert data["examples"] == 0 and data["not_run"] and not data["ok"]
    assert rc == 2, "a campaign that judged nothing is not a pass"
    assert not list((tmp_path / ".pending").glob("*/case.json")), "a stopped case leaves nothing pending"
    # ... but it is kept whole to be judged by a replay: it may be a hang the budget did not wait out
    saved = [Path(p) for p in data["stopped_artifacts"]]
    assert len(saved) == data["stopped_for_time"] and all(p.parent == tmp_path / "stopped" for p in saved)
    for p in saved:
        assert {f.name for f in p.iterdir()} >= {"case.json", "config.json", "tensors.pt", "replay.txt"}
        assert "not judged: stopped after" in (p / "report.txt").read_text()
        meta = json.loads((p / "meta.json").read_text())
        assert meta["stopped_for_time"] and meta["seconds_ran"] < meta["own_timeout"]
        assert load_case(p / "case.json") is not None


def test_a_case_past_the_callers_limit_raises_and_the_worker_is_replaced(monkeypatch):
    monkeypatch.setenv(FORCE_CRASH.name, "hang:tables>=2")
    s = Supervisor()
    try:
        small = CaseSpec(tables=((5, 4),), batch_size=2, seed=1)
        assert s.run(small, KernelConfig()).ok  # the worker is up
        t0 = time.perf_counter()
        with pytest.raises(CaseTimedOut):
            s.run(CaseSpec(tables=((5, 4), (6, 3)), batch_size=2, seed=1), KernelConfig(), limit_s=2.0)
        assert time.perf_counter() - t0 < 2.0 + 5.0, "stopped at the limit, not at the hang timeout"
        assert s.run(small, KernelConfig()).ok, "a fresh worker takes the next case"
    finally:
        s.close()


def test_an_example_expected_to_outlast_the_time_left_is_not_started(monkeypatch, tmp_path):
    costly = {k: dataclasses.replace(e, per_case_s=1e3) for k, e in envelope.ENVELOPES.items()}
    monkeypatch.setattr(envelope, "ENVELOPES", costly)  # every case, even an empty one, "costs" hours
    budget = Budget("t", seconds=2.0, shrink_seconds=0.0, max_examples=20, max_lookups=300)
    res = CampaignRunner(KernelConfig(), budget, options=CampaignOptions(artifacts_dir=None)).run()
    assert res.ok and res.skipped_for_time >= 1 and res.stopped_for_time == 0
    assert res.examples == 0 and not res.judged and res.stopped_by == "time"
    assert res.seconds < 2.0 + SLACK_S
    text = campaign_text(res)
    assert "NOT RUN" in text and "PASS" not in text, text
    assert f"{res.skipped_for_time} drawn example(s) not started" in text and "time-bound: 0 examples" in text


def hanging_sut():
    """``module:factory`` for the test below: PyTorch's TBE, except that a forward of more than 300 lookups never
    returns (a SUT on the CPU, without the project's kernels)."""
    from fuzz.sut.torch_tbe import TorchInstance, factory

    class Hangs(TorchInstance):
        def forward(self, indices, offsets, per_sample_weights=None):
            while indices.numel() > 300:
                time.sleep(0.5)
            return super().forward(indices, offsets, per_sample_weights)

    return dataclasses.replace(factory(), name="hangs", build=Hangs)


def test_a_cpu_suts_hang_is_judged_a_hang_within_the_time_a_campaign_gives_a_case():
    """A SUT running natively on the CPU gets the CPU's cost envelope, not the interpreter's: its hang ends as
    ``hang`` before the time left runs out. Under the interpreter's envelope the same case's timeout came minutes
    later, so a campaign stopped it for time and passed."""
    name = "tests.fuzz.execution.test_campaign_time:hanging_sut"
    case = CaseSpec(tables=((50, 8),), batch_size=20, length_profile="fixed", max_length=20, seed=2)
    s = Supervisor(sanitize=False, timeout_scale=0.5)
    try:
        assert s.run(CaseSpec(tables=((5, 4),), batch_size=2, seed=1), sut=name).ok  # small: it answers
        result = s.run(case, sut=name, limit_s=30.0)  # the limit first would raise CaseTimedOut: not judged
        assert result.error_kind == FailureKind.HANG, result.error
    finally:
        s.close()


class _Clock:
    """``fuzz.campaign.search``'s clock, moved on by each supervised case alone: the campaign's time is a count of
    cases, the same on any machine."""

    def __init__(self):
        self.now = 1000.0

    def perf_counter(self):
        return self.now


def test_the_shrink_time_counts_from_the_first_failure(monkeypatch):
    """A failure found early is shrunk for the shrink time from then, not until the search's end plus it: with
    every case costing 5 s of a 1,000 s search, a failure found in the first examples ends the campaign within
    the 20 s of shrinking after it (plus the case then running). Counted from the search's end, the same run
    shrank for 29 steps (155 s) before the reducer (tried)."""
    from hypothesis import strategies as st

    from fuzz.execution.supervisor import shared
    from cases import Drawn

    clock = _Clock()
    monkeypatch.setattr(search, "time", clock)
    cost = 5.0

    class Ticking:
        """The shared supervisor; every case costs ``cost`` seconds of the campaign's clock."""

        def run(self, *args, **kwargs):
            clock.now += cost
            return shared().run(*args, **kwargs)

        @property
        def environment(self):
            return shared().environment

    # fwd_skip_last_id fails wherever a bag holds two ids: here from b = 3,000 up, which Hypothesis shrinks to in
    # a dozen steps or more
    cases = st.integers(1, 4000).map(lambda b: Drawn(CaseSpec(tables=((20, 4),), batch_size=1 + b % 64,
                                                              max_length=2 if b >= 3000 else 1,
                                                              length_profile="fixed", seed=b)))
    budget = Budget("fake", seconds=1000.0, shrink_seconds=20.0, max_examples=1000, max_lookups=2000)
    res = CampaignRunner(KernelConfig(faults=("fwd_skip_last_id",)), budget, options=CampaignOptions(
        artifacts_dir=None, strategy=cases, supervisor=Ticking(), use_database=False, tour_share=None,
        fill=False)).run()
    assert not res.ok and res.stopped_by == "failure" and res.first_failure_seconds < budget.seconds
    shrink_checks = res.shrink_examples + res.reduce_steps
    assert shrink_checks >= 1, "the failure was shrunk at all"
    assert res.seconds <= res.first_failure_seconds + budget.shrink_seconds + cost, (
        res.first_failure_seconds, res.seconds, res.shrink_examples, res.reduce_steps)
