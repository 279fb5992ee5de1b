"""The driver's handle on one worker process (``fuzz.execution.worker``), and a worker started before the driver's imports.

Imports nothing heavy: ``start_early`` runs first thing in ``tbe-fuzz run``, so that the worker's own imports (torch,
Triton, the kernels) and on a GPU its CUDA context overlap the driver's. A worker reads its environment from the
``Setup`` message its supervisor sends first (``apply_setup``): one started early runs with the settings
the driver made afterwards (the kernel cache, the sanitizer, thread counts), as one started later would.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Optional

from fuzz.execution import interrupt
from fuzz.execution.messages import Compile, Hello, Setup, Waited
from fuzz.errors import WorkerError

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 300.0  # imports, and on a GPU the CUDA context
# One build is credited for at most this (a build waiting on another process's lock waits up to the lock's 600 s
# timeout; a longer one is itself a hang).
BUILD_CREDIT_S = 900.0


LOGS_NAME = re.compile(r"tbe-fuzz-(?:early|workers)-(\d+)-")  # a worker log directory, and the driver's pid
STALE_LOGS_S = 3600.0  # a log directory older than this, whose driver is gone, is swept up


def log_dir(kind: str) -> Path:
    """A new directory for worker logs, named for this process (``kind``: early or workers), after sweeping up the
    stale ones that a hard exit (a second Ctrl-C, a kill) left behind."""
    sweep_stale_logs()
    return Path(tempfile.mkdtemp(prefix=f"tbe-fuzz-{kind}-{os.getpid()}-"))


def sweep_stale_logs(root: Optional[Path] = None, older_than_s: float = STALE_LOGS_S) -> list[Path]:
    """Remove the worker log directories under ``root`` (the temporary directory) whose driver process is gone and
    that are older than ``older_than_s``; returns them. Another user's, or a live driver's, stay."""
    removed = []
    now = time.time()
    for d in Path(root or tempfile.gettempdir()).glob("tbe-fuzz-*"):
        m = LOGS_NAME.match(d.name)
        try:
            if m is None or not d.is_dir() or now - d.stat().st_mtime < older_than_s or _alive(int(m.group(1))):
                continue
        except OSError:
            continue
        shutil.rmtree(d, ignore_errors=True)
        if not d.exists():
            removed.append(d)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def worker_env(base: dict[str, str]) -> dict[str, str]:
    """A worker's environment from ``base``: this project importable from any directory."""
    env = dict(base)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


class WorkerProcess:
    """One worker process and its two pipes: requests to it, replies (its hello, results, build events) from it."""

    builds, build_seconds = 0, 0.0  # kernel builds it reported (``("compile", ...)`` events) and their time
    early = False                   # started by ``start_early``

    def __init__(self, env: dict[str, str], logdir: Path) -> None:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        self.env = env
        self.log_path = logdir / f"worker-{time.time_ns()}.log"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fuzz.execution.worker", str(req_r), str(rep_w)], pass_fds=(req_r, rep_w),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=os.getcwd(),
                start_new_session=True,  # a Ctrl-C at the terminal reaches the driver, which ends the worker
            )
        os.close(req_r)
        os.close(rep_w)
        self.requests, self.replies = Connection(req_w, readable=False), Connection(rep_r, writable=False)
        self.hello: Optional[dict[str, Any]] = None
        self.cases = 0
        self.started_at = time.time()

    def setup(self, env: dict[str, str]) -> None:
        """Send the environment its run uses, which the worker reads after its imports and before its hello (a
        worker started early, before the driver chose its settings, is set up like one started with them)."""
        try:
            self.requests.send(Setup(env))
        except OSError:  # it died already; ``ready`` reports how
            pass

    def ready(self) -> dict[str, Any]:
        if self.hello is None:
            msg = self.wait(START_TIMEOUT_S)
            if msg is Waited.TIMED_OUT:
                self.stop(kill=True)
            if not isinstance(msg, Hello):
                raise WorkerError(f"the worker did not start ({self.describe_exit()}):\n{self.tail(0)}")
            self.hello = msg.info
        return self.hello

    def wait(self, timeout: float, cancellable: bool = False, limit: Optional[float] = None) -> Any:
        """The next message (``fuzz.execution.messages``), or how the wait ended without one (``Waited``):
        EXITED when the process ended; TIMED_OUT after ``timeout`` seconds, not counting the worker's kernel
        builds (its ``Compile`` events); LIMIT at ``limit`` (a time.monotonic() deadline); with
        ``cancellable``, INTERRUPTED as soon as a Ctrl-C was requested."""
        deadline = time.monotonic() + timeout
        building: Optional[float] = None  # when the build in progress started
        while True:
            if cancellable and interrupt.requested():
                return Waited.INTERRUPTED
            now = time.monotonic()
            end = deadline if building is None else max(deadline, building + BUILD_CREDIT_S)
            end = end if limit is None else min(end, limit)
            if self.replies.poll(max(0.0, min(1.0, end - now))):
                try:
                    msg = self.replies.recv()
                except (EOFError, OSError):
                    return Waited.EXITED
                if isinstance(msg, Compile):
                    now = time.monotonic()
                    if building is not None:  # an end, or a start after a build that raised (no end came)
                        deadline += min(now - building, BUILD_CREDIT_S)
                        self.build_seconds += now - building
                    building = now if msg.started else None
                    self.builds += msg.started
                    continue
                return msg
            if self.proc.poll() is not None and not self.replies.poll(0):
                return Waited.EXITED
            if time.monotonic() >= end:
                return Waited.LIMIT if limit is not None and end >= limit else Waited.TIMED_OUT

    def describe_exit(self) -> str:
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return "no answer and no exit"
        if rc < 0:
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = f"signal {-rc}"
            return f"killed by {name} (signal {-rc}, exit status {128 - rc} in a shell)"
        return f"exited with status {rc} without answering"

    def tail(self, since: int, limit: int = 6000) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(since)
            text = f.read().decode("utf-8", "replace")
        text = "\n".join(line for line in text.splitlines() if not line.startswith("Extension modules:"))
        return text[-limit:] if text.strip() else "(no output)"

    def stop(self, kill: bool = False) -> None:
        if self.proc.poll() is None and not kill:
            try:
                self.requests.send(None)
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for c in (self.requests, self.replies):
            c.close()


_EARLY: dict[str, Any] = {}  # "worker": the worker started early, until a supervisor takes it; "logs": its log dir


def start_early() -> None:
    """Start a worker now, with this process's environment, for the first supervisor to take (``take_early``);
    one left untaken is ended at exit."""
    if "logs" in _EARLY:
        return
    _EARLY["logs"] = log_dir("early")
    _EARLY["worker"] = WorkerProcess(worker_env(dict(os.environ)), _EARLY["logs"])
    _EARLY["worker"].early = True
    atexit.register(end_early)


def take_early() -> Optional[WorkerProcess]:
    """The worker ``start_early`` started, once; None when there is none (or it was taken)."""
    return _EARLY.pop("worker", None)


def end_early() -> None:
    """End the worker ``start_early`` started, if no supervisor took it (a run across several GPUs does not)."""
    w = _EARLY.pop("worker", None)
    if w is not None:
        w.stop(kill=True)
    if "logs" in _EARLY:
        shutil.rmtree(_EARLY["logs"], ignore_errors=True)


def apply_setup(env: dict[str, str]) -> None:
    """In the worker: add or change the variables ``env`` sets differently (none is removed: a library may have
    set its own); torch, already imported, takes a changed OMP_NUM_THREADS as its thread count."""
    changed = {k: v for k, v in env.items() if os.environ.get(k) != v}
    os.environ.update(changed)
    if "OMP_NUM_THREADS" in changed and "torch" in sys.modules:
        try:
            sys.modules["torch"].set_num_threads(max(1, int(changed["OMP_NUM_THREADS"])))
        except ValueError:
            pass
