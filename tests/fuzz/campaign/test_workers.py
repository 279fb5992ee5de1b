"""``tbe-fuzz run --workers N`` and the Redis example database, against a real redis-server.

The server comes from ``tests/redis_server.py``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from fuzz.execution import workers
from fuzz.budgets import Budget
from fuzz.campaign import CampaignOptions, CampaignRunner
from fuzz.cli import main
from fuzz.campaign import open_database
from fuzz.budgets import get
from strategies.tour import tour
from tbe import KernelConfig
from tests.redis_server import redis_url  # noqa: F401  (fixture)

TINY = Budget("tiny", seconds=10.0, shrink_seconds=15.0, max_examples=6, max_lookups=300)
FAULT = "fwd_skip_last_id"


@pytest.mark.fuzz
def test_two_workers_merge_into_one_summary(tmp_path, capsys):
    # --time counts from each worker's start, whose imports take 10 s or more on a loaded machine
    rc = main(["run", "--workers", "2", "--time", "30", "--max-examples", "2", "--seed", "5",
               "--artifacts", str(tmp_path / "art"), "--json"])
    merged = json.loads(capsys.readouterr().out)
    assert rc == 0, merged
    assert merged["workers"] == 2 and merged["workers_finished"] == 2 and not merged["crashed"]
    assert [w["seed"] for w in merged["per_worker"]] == [5, 6]
    assert merged["examples"] == sum(w["examples"] for w in merged["per_worker"]) >= 2
    cov = merged["coverage"]  # fuzz.judge.coverage, summed over the workers, drawn once
    assert cov["examples"] == merged["examples"] and 0 < cov["covered"] <= cov["reachable"]
    assert Path(merged["coverage_map"]).name == "coverage.png"
    # the workers split the opening tour between them instead of each running all of it
    assert merged["tour"]["shares"] == [{"index": 0, "of": 2}, {"index": 1, "of": 2}]
    shares = [w["tour"]["cases"] for w in merged["per_worker"]]
    assert merged["tour"]["cases"] == sum(shares) <= len(tour(KernelConfig(), get("quick").max_lookups))
    assert (tmp_path / "art" / ".workers" / "worker-1.log").read_text().startswith("$ ")


def test_a_crashed_worker_fails_the_run(tmp_path, monkeypatch, capsys):
    real = workers.worker_argv

    def argv(args, index, report_dir):
        if index == 1:
            return [sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"]
        return real(args, index, report_dir)

    monkeypatch.setattr(workers, "worker_argv", argv)
    rc = main(["run", "--workers", "2", "--time", "30", "--max-examples", "1", "--no-tour", "--artifacts",
               str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "2 workers ran, 1 finished, 1 crashed" in out and "exit code 3" in out and "boom" in out


@pytest.mark.fuzz
def test_redis_database_shares_a_failure_between_campaigns(redis_url, tmp_path):
    url, client = redis_url
    config = KernelConfig(faults=(FAULT,))
    # the search alone (no opening tour): a failure found by the tour has no choice sequence to save
    first = CampaignRunner(config, TINY, 0, CampaignOptions(
        artifacts_dir=tmp_path / "a", database=open_database(url, config), tour_share=None)).run()
    assert not first.ok
    assert client.keys(b"tbe-fuzz:*"), "the failure was not saved in Redis"
    # another campaign (another seed, another artifact dir: another host) replays it first
    second = CampaignRunner(config, TINY, 99, CampaignOptions(
        artifacts_dir=tmp_path / "b", database=open_database(url, config), tour_share=None, reuse=True)).run()
    assert not second.ok and second.first_failure_examples <= 2, second.first_failure_examples
    assert client.keys(b"tbe-fuzz:*") and not client.keys(b"hypothesis-example:*")


@pytest.mark.fuzz
def test_hosts_share_failures_through_one_redis_server(redis_url, tmp_path):
    """The several-hosts recipe with real processes: host A (two workers) saves its failure to the server,
    host B (another seed, another artifact directory) replays it before anything else."""
    import subprocess

    from tbe import faults

    url, client = redis_url
    with faults.allow():
        (tmp_path / "faulty.json").write_text(KernelConfig(faults=(FAULT,)).to_json())

    def host(name: str, seed: int, *extra: str):
        cmd = [sys.executable, "-m", "fuzz", "run", "--config", str(tmp_path / "faulty.json"), "--database", url,
               "--no-tour", "--time", "20", "--max-examples", "6", "--seed", str(seed),
               "--artifacts", str(tmp_path / name), "--json", *extra]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                              env={**os.environ, "TBE_FUZZ_ALLOW_FAULTS": "1"})
        return done.returncode, json.loads(done.stdout), done.stderr

    rc, a, err = host("a", 0, "--workers", "2")
    assert rc == 1 and a["workers"] == 2, err[-2000:]
    assert client.keys(b"tbe-fuzz:*"), "host A saved no failure in Redis"
    rc, b, err = host("b", 99)  # measured: seed 99 without the server first fails at example 3
    first = (b.get("failure") or {}).get("examples_to_first_failure")
    assert rc == 1 and first is not None and first <= 2, (first, err[-2000:])


def test_workers_get_their_gpu_and_a_few_of_the_cores(monkeypatch):
    from fuzz.execution.workers import worker_env

    monkeypatch.setattr("os.cpu_count", lambda: 32)
    a, b = (worker_env(i, 2, ["0", "1"], base={}) for i in (0, 1))
    assert (a["CUDA_VISIBLE_DEVICES"], b["CUDA_VISIBLE_DEVICES"]) == ("0", "1")
    assert a["OMP_NUM_THREADS"] == b["OMP_NUM_THREADS"] == "4"  # a GPU campaign's CPU side: a few threads
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    assert [worker_env(i, 4, ["0", "1"], base={})["OMP_NUM_THREADS"] for i in range(4)] == ["1"] * 4
    assert worker_env(0, 1, ["0"], base={})["OMP_NUM_THREADS"] == "4"
    assert worker_env(3, 4, [], base={})["OMP_NUM_THREADS"] == "1"  # interpreter workers: one thread each
    assert worker_env(0, 2, ["0"], base={"OMP_NUM_THREADS": "3"})["OMP_NUM_THREADS"] == "3"  # the user's wins


def test_bad_database_urls_are_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", "--database", str(Path(__file__))])
    assert exc.value.code == 2 and "not a directory" in capsys.readouterr().err


def test_a_gpu_campaigns_supervised_worker_runs_few_cpu_threads(monkeypatch):
    import fuzz.execution.supervisor as sup

    monkeypatch.setattr("os.cpu_count", lambda: 32)
    monkeypatch.setattr(sup, "INTERPRETED", False)
    gpu = sup.Supervisor(env={})
    assert gpu.env["OMP_NUM_THREADS"] == "4"
    assert sup.Supervisor(env={"OMP_NUM_THREADS": "7"}).env["OMP_NUM_THREADS"] == "7"  # the user's wins
    monkeypatch.setattr(sup, "INTERPRETED", True)
    cpu = sup.Supervisor(env={})
    assert "OMP_NUM_THREADS" not in cpu.env  # interpreter: torch's default, as measured
    gpu.close()
    cpu.close()


def test_the_merged_summary_lists_every_workers_stopped_cases():
    """A case a worker's budget cut before it was judged is saved by that worker; the merged summary names each."""
    from fuzz.execution.stats import CampaignStats
    from fuzz.execution.workers import merge, merged_text

    base = {**CampaignStats().to_state(), "crashed": False, "ok": True, "exit_code": 0, "log": "w.log",
            "seconds": 1.0, "coverage": None}
    results = [dict(base, worker=0, seed=0, stopped_artifacts=["art/stopped/a"]),
               dict(base, worker=1, seed=1, stopped_artifacts=["art/stopped/b"])]
    merged = merge(results, 1.0, "quick")
    assert merged["stopped_artifacts"] == ["art/stopped/a", "art/stopped/b"]
    text = merged_text(merged)
    assert "saved to judge: art/stopped/a" in text and "saved to judge: art/stopped/b" in text
