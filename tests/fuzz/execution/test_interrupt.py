"""Ctrl-C keeps the find: a first SIGINT after a planted fault was found stops the search, saves the
smallest failure so far as an artifact, prints the JSON summary marked interrupted and exits 130; a
second SIGINT exits at once and leaves the running case under ``.pending/``. Each runs ``tbe-fuzz run``
in a subprocess, as a person at a terminal would."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fuzz.execution.forced_crash import FORCE_CRASH
from tbe import KernelConfig
from tests.fuzz.campaign.test_fuzz_driver import FAULT, REPO

START_S = 240.0  # imports, the worker's start-up and the first failure, on two busy cores


def _start(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, queue.Queue]:
    config = tmp_path / "fault.json"
    KernelConfig(faults=(FAULT,)).save(config)
    proc = subprocess.Popen(
        [sys.executable, "-m", "fuzz", "run", "--time", "300", "--no-warmup", "--json", "--config", str(config),
         "--artifacts", str(tmp_path / "art"), *extra],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "TBE_FUZZ_ALLOW_FAULTS": "1", **(env or {})})
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stderr, lines), daemon=True).start()
    return proc, lines


def _pump(stream, lines: queue.Queue) -> None:
    """Stderr's lines into the queue until the stream ends or the test closes it (communicate, kill)."""
    try:
        for line in stream:
            lines.put(line)
    except ValueError:  # closed under the reader by the test
        pass


def _wait_for(lines: queue.Queue, needle: str, seen: list[str]) -> None:
    end = time.monotonic() + START_S
    while time.monotonic() < end:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            continue
        seen.append(line)
        if needle in line:
            return
    raise AssertionError(f"no {needle!r} within {START_S:.0f}s:\n{''.join(seen)}")


@pytest.mark.fuzz
def test_first_sigint_saves_the_failure_and_a_json_summary(tmp_path):
    proc, lines = _start(tmp_path)
    seen: list[str] = []
    try:
        _wait_for(lines, "failure at example", seen)  # found; shrinking has started
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, "".join(seen)
    data = json.loads(out)
    assert data["interrupted"] and data["stopped_by"] == "interrupted" and not data["ok"]
    artifact = Path(data["artifact"])
    assert (artifact / "case.json").is_file() and (artifact / "report.txt").is_file()
    assert "MISMATCH" in (artifact / "report.txt").read_text()
    assert json.loads((artifact / "case.json").read_text()) == data["failure"]["case"]


@pytest.mark.fuzz
def test_second_sigint_exits_at_once_and_leaves_the_case_pending(tmp_path):
    # every case hangs, so one is always running when the signals come
    proc, lines = _start(tmp_path, env={FORCE_CRASH.name: "hang:lookups>=0"})
    pending = tmp_path / "art" / ".pending"
    try:
        end = time.monotonic() + START_S
        while not list(pending.glob("*/case.json")) and time.monotonic() < end:
            time.sleep(0.5)
        assert list(pending.glob("*/case.json")), "no case started"
        proc.send_signal(signal.SIGINT)
        time.sleep(0.01)  # two signals at once would be delivered as one
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        proc.wait(timeout=30)
        waited = time.monotonic() - t0
    finally:
        proc.kill()
    time.sleep(0.5)  # the reader thread drains what stderr held
    err = "".join(lines.get() for _ in range(lines.qsize()))
    assert proc.returncode == 130 and "interrupted twice" in err, err
    assert waited < 10.0, waited
    assert list(pending.glob("*/case.json")), "the running case stays pending for replay"
