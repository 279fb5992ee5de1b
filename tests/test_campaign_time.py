"""A campaign's budget holds: an example still running EXAMPLE_CAP_S past the search's end is stopped
and counted as stopped for time (not judged, not a failure), and one whose expected cost exceeds the
time left is not started. The slow case is a forced hang (``fuzz.execution.forced_crash``), and the cap
is lowered so the test takes seconds rather than the 45 s a real campaign allows."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fuzz.budgets import Budget
from fuzz.campaign import search
from fuzz.campaign.report import campaign_text
from fuzz.campaign.search import run_campaign
from fuzz.cli import main
from fuzz.execution import supervisor
from fuzz.execution.artifacts import load_case
from fuzz.execution.supervisor import CaseTimedOut, Supervisor
from strategies.case import CaseSpec
from tbe import KernelConfig
from tbe.env import FORCE_CRASH

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
    monkeypatch.setattr(supervisor, "PER_CASE_S", 1e3)  # every case, even an empty one, "costs" hours
    res = run_campaign(KernelConfig(), Budget("t", seconds=2.0, shrink_seconds=0.0, max_examples=20,
                                              max_lookups=300), artifacts_dir=None)
    assert res.ok and res.skipped_for_time >= 1 and res.stopped_for_time == 0
    assert res.examples == 0 and not res.judged and res.stopped_by == "time"
    assert res.seconds < 2.0 + SLACK_S
    text = campaign_text(res)
    assert "NOT RUN" in text and "PASS" not in text, text
    assert f"{res.skipped_for_time} drawn example(s) not started" in text and "time-bound: 0 examples" in text
