"""``tbe-fuzz tune --storage``: processes that tune one baseline share one Optuna study.

Two processes search side by side against a real redis-server (``tests/redis_server.py``) with
the stand-in measurement of tests/fuzz/tune/test_tune.py; afterwards the study holds the trials of both,
each once, and a later process sees them all. A journal file or an SQLite database on disk works the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tbe import KernelConfig
from tests.redis_server import redis_url  # noqa: F401  (fixture)

optuna = pytest.importorskip("optuna", reason="optuna==5.0.0 (requirements) is not installed")
from fuzz.tune import search as tune  # noqa: E402
from fuzz.tune import report as tune_report  # noqa: E402
from fuzz.tune.space import searched_fields  # noqa: E402
from fuzz.tune.storage import check_url, open_storage, study_name  # noqa: E402
from fuzz.status import Decision  # noqa: E402
from tests.fuzz.tune.test_tune import SHAPES, fake_gate, fake_measure  # noqa: E402
from tests.paths import REPO


PER_PROCESS = 3

# one tuning process: PER_PROCESS trials of the stand-in measurement, its trials printed as JSON
TUNE_PROCESS = textwrap.dedent("""
    import json, sys, time
    from fuzz.tune import search as tune
    from tests.fuzz.tune.test_tune import SHAPES, fake_measure
    from tbe import KernelConfig
    opts = tune.TuneOptions(shapes=SHAPES, trials={n}, seed=0, storage=sys.argv[1])
    trials = tune.search(KernelConfig(), opts, fake_measure(delay=0.3), time.monotonic() + 120)
    print(json.dumps([[t.number, t.worker, t.origin, t.value] for t in trials]))
""").format(n=PER_PROCESS)


def _finished(study):
    return [t for t in study.get_trials() if t.state != optuna.trial.TrialState.WAITING]


def test_two_processes_share_one_study_in_redis(redis_url):
    url, client = redis_url
    procs = [subprocess.Popen([sys.executable, "-c", TUNE_PROCESS, url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=REPO) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    name = study_name(KernelConfig(), SHAPES, searched_fields(SHAPES))
    study = optuna.load_study(study_name=name, storage=open_storage(url))
    done = _finished(study)
    assert len(done) == 2 * PER_PROCESS  # one study with the trials of both
    workers = [t.user_attrs[tune.ATTR]["worker"] for t in done]
    assert len(set(workers)) == 2 and all(workers.count(w) == PER_PROCESS for w in set(workers))
    origins = [t.user_attrs[tune.ATTR]["origin"] for t in done]
    assert origins.count("baseline") == 1  # the baseline and the hints were enqueued once, by the study's creator
    configs = [t.user_attrs[tune.ATTR]["config"] for t in done if t.user_attrs[tune.ATTR]["origin"] != "repeat"]
    assert len(set(configs)) == len(configs)  # no config was timed twice
    assert client.keys(b"tbe-fuzz-tune:*")  # the journal lives under the tune prefix
    # a third process joining later sees every finished trial, the other processes' ones marked by worker
    opts = tune.TuneOptions(shapes=SHAPES, trials=1, seed=0, storage=url)
    trials = tune.search(KernelConfig(), opts, fake_measure(), time.monotonic() + 60)
    assert len(trials) == 2 * PER_PROCESS + 1
    assert sum(t.worker is None for t in trials) == 1
    assert {t.worker for t in trials if t.worker is not None} == set(workers)
    for out, _ in outs:  # each process returned its own trials and those others had finished by then
        seen = json.loads(out)
        assert sum(w is None for _, w, _, _ in seen) == PER_PROCESS


@pytest.mark.parametrize("kind", ["journal file", "sqlite"])
def test_study_on_disk_is_joined_and_ranked_as_one(tmp_path, kind):
    path = str(tmp_path / "tune.journal") if kind == "journal file" else f"sqlite:///{tmp_path / 'tune.db'}"
    opts = tune.TuneOptions(shapes=SHAPES, seconds=60.0, trials=4, seed=0, storage=check_url(path), out=tmp_path)
    first = tune.search(KernelConfig(), opts, fake_measure(), time.monotonic() + 60)
    assert [t.origin for t in first][:1] == ["baseline"] and all(t.worker is None for t in first)
    res = tune.run_tune(KernelConfig(), opts, measure=fake_measure(), verify=fake_gate(Decision.KEEP))
    assert len(res.trials) == 8  # the earlier search's trials count as another worker's (same host and pid)
    assert [t.worker for t in res.trials] == [tune.worker_id()] * 4 + [None] * 4
    assert [t.number for t in res.trials] == list(range(8))
    assert res.trials[4].origin == "hint"  # the joining search took up the enqueued hints, not a second baseline
    assert res.study_name == study_name(KernelConfig(), SHAPES, searched_fields(SHAPES))
    data = tune_report.to_json(res)
    assert data["study"] == res.study_name and data["storage"] == path


def test_study_name_follows_the_baseline_shapes_and_fields():
    fields = searched_fields(SHAPES)
    name = study_name(KernelConfig(), SHAPES, fields)
    assert name == study_name(KernelConfig(), SHAPES, list(reversed(fields)))
    assert name != study_name(KernelConfig(chunk_size=512), SHAPES, fields)
    assert name != study_name(KernelConfig(), SHAPES[:1], fields)
    assert name != study_name(KernelConfig(), SHAPES, fields[:3])


def test_storage_argument_errors_name_the_value(tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        check_url(str(tmp_path))
    with pytest.raises(ValueError, match="no such directory"):
        check_url(str(tmp_path / "missing" / "tune.journal"))
    assert check_url("sqlite:///tune.db") == "sqlite:///tune.db"
    assert check_url("redis://127.0.0.1:1/0") == "redis://127.0.0.1:1/0"


def test_unreachable_storage_stops_tune_before_any_trial(monkeypatch, capsys):
    import socket

    from fuzz.cli import main
    from fuzz.gate import perf

    monkeypatch.setattr(perf, "gpu_unavailable", lambda: None)  # as on a GPU host: only the storage is wrong
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens on this port now
    rc = main(["tune", "--storage", f"redis://127.0.0.1:{port}/0"])
    err = capsys.readouterr().err
    assert rc == 2 and f"--storage redis://127.0.0.1:{port}/0" in err and "ConnectionError" in err
