"""Where the time before a campaign's first answer went: the worker's start, its imports and device, the first case.

A fresh GPU machine answers its first case 10-25 s after the command starts while a warm one takes 8-13 s; this
record says which part waited. Marks are wall-clock times (``time.time()``) so that the worker's own marks (sent in
its hello) and the driver's lie on one clock; ``to_dict(since)`` gives seconds from the command's start.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

_MARKS = ("worker_started", "worker_main", "worker_imported", "worker_device", "worker_setup", "worker_ready",
          "case_ready", "case_sent", "answered")


@dataclasses.dataclass
class FirstAnswer:
    """The marks of the first case a supervisor answered; None until it happened."""

    worker_started: Optional[float] = None   # the driver started the process of the worker that ran it
    worker_main: Optional[float] = None      # that worker's Python reached its main
    worker_imported: Optional[float] = None  # its imports done
    worker_device: Optional[float] = None    # on a GPU its CUDA context made
    worker_setup: Optional[float] = None     # its settings came from the driver (``WorkerProcess.setup``)
    worker_ready: Optional[float] = None     # its hello: environment known and, on a GPU, its context made
    case_ready: Optional[float] = None       # the driver had the case and asked for its worker
    case_sent: Optional[float] = None        # the case went to the worker (once it had said hello)
    answered: Optional[float] = None
    builds: int = 0                 # kernel builds (or disk-cache loads) the worker reported during the case
    build_seconds: float = 0.0      # how long they took
    compiled: Optional[int] = None  # of those, built now (None under the interpreter, which builds nothing)
    loaded: Optional[int] = None    # taken from Triton's disk cache
    phases: dict = dataclasses.field(default_factory=dict)  # the case's own phases (seconds)
    early: bool = False             # its worker was started before the driver's imports (``start_early``)
    driver: dict = dataclasses.field(default_factory=dict)  # the driver's own marks: ``parsed`` (imports and
    # arguments done), ``warmup_started`` (warm-up planned), ``search_started`` (ready to send its first case)

    def worker(self, started: float, clock: dict[str, float], early: bool = False) -> None:
        """The worker that answered the first case: its start, the clock marks of its hello, whether it started
        early."""
        self.worker_started, self.early = started, early
        self.worker_main, self.worker_imported, self.worker_device, self.worker_setup, self.worker_ready = (
            clock.get("main"), clock.get("imported"), clock.get("device"), clock.get("setup"), clock.get("hello"))

    def answer(self, ready: float, sent: float, at: float, builds: int, build_seconds: float, compiles: Any,
               phases: dict) -> None:
        """The first case, ready at ``ready`` and sent at ``sent``, came back at ``at``: ``compiles`` is its
        CompileCounts (or None)."""
        if self.answered is not None:
            return
        self.case_ready, self.case_sent, self.answered = ready, sent, at
        self.builds, self.build_seconds = builds, build_seconds
        if compiles is not None and not getattr(compiles, "interpreted", True):
            self.compiled, self.loaded = compiles.compiled, compiles.loaded
        self.phases = {k: round(v, 3) for k, v in phases.items()}

    def to_dict(self, since: float) -> dict[str, Any]:
        """Seconds from ``since`` (the command's start, wall clock) to each mark, and the first case's builds."""
        out: dict[str, Any] = {m: None if getattr(self, m) is None else round(getattr(self, m) - since, 2)
                               for m in _MARKS}
        out.update(builds=self.builds, build_seconds=round(self.build_seconds, 2), compiled=self.compiled,
                   loaded=self.loaded, phases=self.phases, early=self.early)
        for name, at in self.driver.items():
            out[name if name == "search_started" else f"driver_{name}"] = round(at - since, 2)
        return out

    def text(self, since: float) -> str:
        """One line: when the first answer came and what it waited for."""
        d = self.to_dict(since)
        if d["answered"] is None:
            return "first answer: no case was answered"
        parts = []
        if d.get("search_started") is not None:
            names = {"driver_parsed": "imports and arguments done", "driver_warmup_started": "warm-up planned"}
            said = ", ".join(f"{text} at {d[key]:.1f} s" for key, text in names.items() if key in d)
            parts.append(f"the search began at {d['search_started']:.1f} s" + (f" ({said})" if said else ""))
        if d["worker_ready"] is not None and d["worker_started"] is not None:
            imports, device = _span(d, "worker_main", "worker_imported"), _span(d, "worker_imported", "worker_device")
            said = ", ".join(x for x in (None if imports is None else f"imports {imports:.1f} s",
                                         None if device is None else f"device {device:.1f} s",
                                         None if d["worker_setup"] is None else
                                         f"its settings came at {d['worker_setup']:.1f} s") if x)
            parts.append(f"the worker, started {'early ' if self.early else ''}at {d['worker_started']:.1f} s, was "
                         f"ready at {d['worker_ready']:.1f} s" + (f" ({said})" if said else ""))
        if d["case_sent"] is not None:
            waited = _span(d, "case_ready", "case_sent") or 0.0
            builds = f", {self.builds} kernel builds or loads taking {self.build_seconds:.1f} s" if self.builds else ""
            ready = "" if d["case_ready"] is None else f" was ready at {d['case_ready']:.1f} s"
            parts.append(f"the first case{ready}" + (f", waited {waited:.1f} s for the worker" if waited >= 0.05 else "")
                         + f" and ran {d['answered'] - d['case_sent']:.1f} s{builds}")
        return f"first answer at {d['answered']:.1f} s from the start: " + "; ".join(parts)


def _span(d: dict[str, Any], a: str, b: str) -> Optional[float]:
    """Seconds from mark ``a`` to mark ``b`` of ``d``; None where either is missing."""
    return None if d[a] is None or d[b] is None else d[b] - d[a]
