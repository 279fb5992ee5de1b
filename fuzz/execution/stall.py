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
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

CHECK_S = 0.25  # how often the watch thread looks


class ProgramWatch:
    """Times each interpreter program of the armed case; ``report`` gets what stalled, once per arming."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: Optional[float] = None  # when the running program started
        self._where: tuple = ()  # (kernel, program index, programs in the launch)
        self._limit: Optional[float] = None
        self._report: Optional[Callable[[dict[str, Any]], None]] = None
        self.longest = 0.0  # the longest finished program since arming

    def arm(self, limit_s: float, report: Callable[[dict[str, Any]], None]) -> None:
        with self._lock:
            self._limit, self._report, self.longest = limit_s, report, 0.0

    def disarm(self) -> None:
        with self._lock:
            self._limit = self._report = None

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

    def check(self, now: Optional[float] = None) -> Optional[dict[str, Any]]:
        """What stalled (and tell ``report`` once), or None. ``report`` runs under the lock, so once ``disarm``
        returns nothing more is told: a late report would answer the worker's next case."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if self._limit is None or self._started is None or now - self._started <= self._limit:
                return None
            kernel, index, programs = self._where
            stalled = {"kernel": kernel, "program": index, "programs": programs, "seconds": now - self._started,
                       "limit": self._limit, "longest_finished": self.longest}
            report, self._report, self._limit = self._report, None, None
            if report is not None:
                report(stalled)
        return stalled


def install() -> Optional[ProgramWatch]:
    """Hook the interpreter and start the watch thread; None where this is not the interpreter these hooks were
    written against (the case's own timeout still applies)."""
    from tbe.backend import INTERPRETED

    if not INTERPRETED:
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

    def loop() -> None:
        while True:
            time.sleep(CHECK_S)
            watch.check()

    threading.Thread(target=loop, name="tbe-fuzz-program-watch", daemon=True).start()
    return watch

