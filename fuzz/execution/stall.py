"""A program watchdog under Triton's interpreter: one kernel program that runs past its limit is a hang.

The interpreter runs a launch's programs one after another in the worker. A case's timeout
(``fuzz.execution.envelope.timeout_for``) is a floor plus ten times the upper envelope of the whole case's
cost, so a loop that never advances was declared a hang only minutes in on a 2-core CPU, past a quick
campaign's budget. One program does a fraction of its case's work, so a program is allowed the case's envelope
once, plus the floor (``fuzz.execution.envelope.stall_for``): over 300 drawn campaign cases the limit was at
least ten times the case's longest program, a wider margin than the case timeout's over the case's wall time
(``benchmarks.program_times``; ``benchmarks/results/README.md``, "The interpreter's program watch").
Written here because the interpreter has no per-program hook; its builder's ``set_grid_idx``, called before
each program, and the launch's ``GridExecutor.__call__`` mark where programs start and launches end.

The check runs in the worker's main thread, from an interval timer's signal (``SIGALRM``), and a stalled
program is ended there by raising ``ProgramStalled``: a watch thread is starved of the GIL by the interpreter's
main thread, so its checks come seconds late (``benchmarks/results/README.md``, "The program watch ticks in the
kernels' thread").
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any, Callable, Optional

CHECK_S = 0.25  # how often the watch looks, while armed


class ProgramStalled(BaseException):
    """Raised in the worker's main thread when a program runs past its limit. A BaseException, so that no
    ``except Exception`` on its way out (the interpreter's own, a SUT's) takes it for the kernel's error."""

    def __init__(self, stalled: dict[str, Any]) -> None:
        super().__init__(f"program {stalled['program']} of {stalled['kernel']} stalled")
        self.stalled = stalled


class ProgramWatch:
    """Times each interpreter program of the armed case; ``report`` gets what stalled, once per arming."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: Optional[float] = None  # when the running program started
        self._where: tuple = ()  # (kernel, program index, programs in the launch)
        self._limit: Optional[float] = None
        self._report: Optional[Callable[[dict[str, Any]], None]] = None
        self.longest = 0.0  # the longest finished program since arming
        self.ticking = False  # set by ``install``: arming starts the timer whose signal checks

    def arm(self, limit_s: float, report: Optional[Callable[[dict[str, Any]], None]] = None) -> None:
        with self._lock:
            self._limit, self._report, self.longest = limit_s, report, 0.0
        if self.ticking:
            signal.setitimer(signal.ITIMER_REAL, CHECK_S, CHECK_S)

    def disarm(self) -> None:
        with self._lock:  # first, so a signal still pending finds nothing armed
            self._limit = self._report = None
        if self.ticking:
            signal.setitimer(signal.ITIMER_REAL, 0.0)

    def program(self, kernel: str, index: int, programs: int) -> None:
        now = time.monotonic()
        with self._lock:
            self._finish(now)
            self._started, self._where = now, (kernel, index, programs)

    def launch_ended(self) -> None:
        with self._lock:
            self._finish(time.monotonic())
            self._started = None

    def _finish(self, now: float) -> None:
        if self._started is not None:
            self.longest = max(self.longest, now - self._started)

    def check(self, now: Optional[float] = None, blocking: bool = True) -> Optional[dict[str, Any]]:
        """What stalled (once per arming; ``report``, if any, is told), or None. ``blocking=False``: None at once
        when the lock is held (a signal that interrupted ``program`` must not wait for it). ``report`` runs under
        the lock, so once ``disarm`` returns nothing more is told: a late report would answer the next case."""
        now = time.monotonic() if now is None else now
        if not self._lock.acquire(blocking=blocking):
            return None
        try:
            if self._limit is None or self._started is None or now - self._started <= self._limit:
                return None
            kernel, index, programs = self._where
            stalled = {"kernel": kernel, "program": index, "programs": programs, "seconds": now - self._started,
                       "limit": self._limit, "longest_finished": self.longest}
            report, self._report, self._limit = self._report, None, None
            if report is not None:
                report(stalled)
            return stalled
        finally:
            self._lock.release()


def install() -> Optional[ProgramWatch]:
    """Hook the interpreter and the timer's signal (call it from the main thread); None where this is not the
    interpreter these hooks were written against, or there is no SIGALRM (the case's own timeout still applies)."""
    from tbe.backend import INTERPRETED

    if not INTERPRETED or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return None
    from triton.runtime import interpreter as itp

    builder = getattr(itp, "interpreter_builder", None)
    executor = getattr(itp, "GridExecutor", None)
    if builder is None or executor is None or not hasattr(builder, "set_grid_idx"):
        return None
    watch = ProgramWatch()
    set_idx, launch_call = builder.set_grid_idx, executor.__call__
    current = ["?"]  # the kernel of the launch in progress

    def set_grid_idx(x: int, y: int, z: int) -> None:
        dims = getattr(builder, "grid_dim", (1, 1, 1))  # set by the launch before its first program
        watch.program(current[0], (x * dims[1] + y) * dims[2] + z, dims[0] * dims[1] * dims[2])
        return set_idx(x, y, z)

    def launch(self: Any, *args: Any, **kwargs: Any) -> Any:
        current[0] = getattr(self.fn, "__name__", "?")
        try:
            return launch_call(self, *args, **kwargs)
        finally:
            watch.launch_ended()

    builder.set_grid_idx = set_grid_idx
    executor.__call__ = launch

    def on_alarm(signum: int, frame: Any) -> None:
        stalled = watch.check(blocking=False)
        if stalled is not None:
            raise ProgramStalled(stalled)

    signal.signal(signal.SIGALRM, on_alarm)
    watch.ticking = True
    return watch

