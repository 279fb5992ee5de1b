"""The first answer: a run's worker starts before the driver's imports and takes the driver's later settings, and the
run says where the time before its first checked case went."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fuzz.memcheck.sanitizer import SANITIZE
from fuzz.cli.parser import _cases_here
from fuzz.execution import Supervisor
from fuzz.execution import worker_process
from fuzz.execution.first_answer import FirstAnswer
from fuzz.execution.worker_process import apply_setup, start_early
from cases import CaseSpec
from tbe.backend import INTERPRETED
from tests.fuzz.campaign.test_fuzz_driver import REPO

SPEC = CaseSpec(tables=((5, 4),), batch_size=2, seed=1)


@pytest.fixture
def early():
    """A fresh early-worker slot for one test; whatever it left is ended after."""
    worker_process.end_early()
    worker_process._EARLY.clear()
    yield
    worker_process.end_early()
    worker_process._EARLY.clear()


@pytest.mark.parametrize("argv, here", [
    (["run"], True), (["run", "--budget", "ci", "--workers", "1"], True), (["run", "--workers=1"], True),
    (["run", "--workers", "2"], False), (["run", "--seed", "3", "--workers=4"], False),
    (["replay", "x"], True), (["selftest"], False), (["gate", "--shapes", "quick"], False), ([], False),
])
def test_only_a_run_of_one_campaign_or_a_replay_starts_its_worker_early(argv, here):
    assert _cases_here(argv) is here


@pytest.mark.skipif(not INTERPRETED, reason="the sanitizer checks the interpreter's accesses; compiled kernels have none")
@pytest.mark.parametrize("sanitize", [False, True])
def test_a_worker_started_early_runs_with_the_settings_its_supervisor_chose_later(early, sanitize):
    """The early worker is started with the opposite sanitizer setting; the supervisor that takes it chooses the other,
    and the worker's hello reports the supervisor's choice (its setup came after its imports)."""
    os.environ[SANITIZE.name] = "0" if sanitize else "1"
    try:
        start_early()
        pid = worker_process._EARLY["worker"].proc.pid
        sup = Supervisor(sanitize=sanitize)
        try:
            result = sup.run(SPEC)
            assert result.ok
            assert sup._worker.proc.pid == pid  # the early worker ran the case
            assert bool(sup._worker.hello["sanitizer"]) is sanitize
            assert sup.started == 1
        finally:
            sup.close()
    finally:
        os.environ.pop(SANITIZE.name, None)


def test_a_worker_started_early_is_not_taken_where_an_import_time_setting_differs(early):
    """A variable a worker reads at its imports (here one the driver set after the early start) cannot come with the
    setup: the supervisor ends the early worker and starts its own, which runs the case."""
    start_early()
    first = worker_process._EARLY["worker"]
    sup = Supervisor(env=dict(os.environ, SETUP_TEST_AT_IMPORT="1"))
    try:
        assert sup.run(SPEC).ok
        assert sup._worker.proc.pid != first.proc.pid
        assert first.proc.poll() is not None  # ended, not left running
    finally:
        sup.close()


def test_setup_adds_and_changes_variables_and_removes_none(monkeypatch):
    monkeypatch.setenv("SETUP_TEST_KEEP", "kept")
    monkeypatch.setenv("SETUP_TEST_CHANGE", "old")
    monkeypatch.delenv("SETUP_TEST_ADD", raising=False)
    apply_setup({"SETUP_TEST_CHANGE": "new", "SETUP_TEST_ADD": "added"})
    assert os.environ["SETUP_TEST_KEEP"] == "kept"
    assert os.environ["SETUP_TEST_CHANGE"] == "new"
    assert os.environ["SETUP_TEST_ADD"] == "added"
    monkeypatch.delenv("SETUP_TEST_ADD")


def test_setup_gives_torch_a_changed_thread_count(monkeypatch):
    import torch

    before = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", str(before))
    try:
        apply_setup({"OMP_NUM_THREADS": "1"})
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_the_first_answer_puts_every_mark_on_the_runs_clock_and_says_what_waited():
    fa = FirstAnswer()
    fa.worker(100.0, {"main": 100.1, "imported": 101.3, "device": 101.3, "setup": 102.0, "hello": 102.1}, early=True)
    fa.answer(101.9, 102.2, 104.0, builds=3, build_seconds=1.2, compiles=None, phases={"sut": 0.51234})
    d = fa.to_dict(since=99.5)
    assert [d[m] for m in ("worker_started", "worker_imported", "worker_setup", "worker_ready", "case_ready",
                           "case_sent", "answered")] == [0.5, 1.8, 2.5, 2.6, 2.4, 2.7, 4.5]
    assert (d["builds"], d["build_seconds"], d["compiled"], d["phases"], d["early"]) == (3, 1.2, None, {"sut": 0.512},
                                                                                         True)
    fa.driver.update(parsed=101.0, search_started=101.9)
    assert (fa.to_dict(since=99.5)["driver_parsed"], fa.to_dict(since=99.5)["search_started"]) == (1.5, 2.4)
    text = fa.text(since=99.5)
    assert "the search began at 2.4 s (imports and arguments done at 1.5 s)" in text
    assert "first answer at 4.5 s" in text and "imports 1.2 s" in text and "waited 0.3 s for the worker" in text
    assert "3 kernel builds or loads taking 1.2 s" in text
    fa.answer(0.0, 0.0, 1e9, 0, 0.0, None, {})  # only the first case counts
    assert fa.to_dict(since=99.5)["answered"] == 4.5
    assert FirstAnswer().text(0.0) == "first answer: no case was answered"
    bare = FirstAnswer()  # a worker whose hello had no clock: the line says what it knows
    bare.worker(1.0, {})
    bare.answer(2.0, 2.0, 3.0, 0, 0.0, None, {})
    assert bare.text(0.0) == "first answer at 3.0 s from the start: the first case was ready at 2.0 s and ran 1.0 s"


def test_a_run_reports_its_first_answer_from_a_worker_started_before_its_imports(tmp_path):
    """Through the command line: the run's JSON holds the first answer's marks in the order they must come, and the
    worker that answered is the one started before the driver built its parser (``early``)."""
    out = subprocess.run([sys.executable, "-m", "fuzz", "run", "--budget", "quick", "--time", "60", "--max-examples",
                          "3", "--no-tour", "--no-fill", "--json", "--artifacts", str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    fa = json.loads(out.stdout)["first_answer"]
    marks = [fa[m] for m in ("worker_started", "worker_main", "worker_imported", "worker_setup", "worker_ready",
                             "case_sent", "answered")]
    assert None not in marks and marks == sorted(marks), fa
    assert fa["case_ready"] <= fa["case_sent"] and fa["search_started"] <= fa["case_ready"]
    assert 0 <= fa["driver_parsed"] <= fa["driver_warmup_started"] <= fa["search_started"]
    assert fa["early"] is True
