"""Where a campaign's time goes: each case's phases as the worker measured them, the supervisor's
round trip around them, and what is left to the driver (Hypothesis' generation and targeting,
the example database, the progress line).

The worker times its phases with ``Phases`` (a device synchronization closes each SUT phase, so
asynchronous kernels are charged to the SUT and not to the oracle that waits for them); a
campaign adds every case to a ``TimeSplit``, which prints the split per case. Hand-made: it is a
handful of counters, and a profiler would cost more than the cases it measures.
"""

from __future__ import annotations

import collections
import contextlib
import time
from typing import Any, Iterator, Optional

# the worker's phases, in the order a case goes through them
WORKER_PHASES = ("materialize", "sut", "oracles", "fbgemm", "bookkeeping")
_LABELS = {"materialize": "materialize", "sut": "SUT (kernels)", "oracles": "oracles (FP64 references, bounds)",
           "fbgemm": "FBGEMM sample", "bookkeeping": "tiers and counts"}


class Phases:
    """Seconds per phase of one case, measured in the process that runs it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)

    @contextlib.contextmanager
    def timed(self, phase: str, device: Any = None) -> Iterator[None]:
        """Charge the block to ``phase``; with a CUDA ``device``, after the work queued on it is done."""
        t0 = time.perf_counter()
        try:
            yield
            _synchronize(device)  # not after an exception: a CUDA error would raise again and hide it
        finally:
            self.seconds[phase] += time.perf_counter() - t0

    def to_dict(self) -> dict[str, float]:
        return dict(self.seconds)


def _synchronize(device: Any) -> None:
    if device is None or getattr(device, "type", str(device)) != "cuda":
        return
    import torch

    torch.cuda.synchronize(device)


class TimeSplit:
    """A campaign's time per case: worker phases, round trips (driver to worker and back), cases."""

    def __init__(self) -> None:
        self.worker: dict[str, float] = collections.defaultdict(float)
        self.round_trip = 0.0
        self.cases = 0

    def add(self, phases: Optional[dict[str, float]], round_trip: float) -> None:
        self.cases += 1
        self.round_trip += round_trip
        for k, v in (phases or {}).items():
            self.worker[k] += v

    def merge(self, other: "TimeSplit") -> None:
        """Add another campaign's split (another round, another worker)."""
        self.cases += other.cases
        self.round_trip += other.round_trip
        for k, v in other.worker.items():
            self.worker[k] += v

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "TimeSplit":
        """The split a ``to_json`` dict describes (its round trips are its wall less the driver's share)."""
        out = cls()
        out.cases = int(d.get("cases", 0))
        out.round_trip = max(0.0, float(d.get("wall", 0.0)) - float(d.get("driver", 0.0)))
        for k, v in d.get("worker", {}).items():
            out.worker[k] += float(v)
        return out

    def to_json(self, wall: float) -> dict[str, Any]:
        """Seconds per part of ``wall``: driver (all but the round trips), supervision (the round trips
        less the worker's phases: pipe, pending files, worker upkeep), and each worker phase."""
        in_worker = sum(self.worker.values())
        return {"cases": self.cases, "wall": round(wall, 3),
                "driver": round(max(0.0, wall - self.round_trip), 3),
                "supervision": round(max(0.0, self.round_trip - in_worker), 3),
                "worker": {k: round(self.worker.get(k, 0.0), 3) for k in WORKER_PHASES}}

    def lines(self, wall: float) -> list[str]:
        return text(self.to_json(wall))


def text(d: dict[str, Any]) -> list[str]:
    """The summary line of a ``TimeSplit.to_json`` dict: milliseconds per case."""
    if not d.get("cases"):
        return []
    ms = 1000.0 / d["cases"]
    worker = ", ".join(f"{_LABELS.get(k, k)} {v * ms:.1f}" for k, v in d["worker"].items() if v)
    return [f"  time per case (ms, {d['cases']} cases, {d['wall']:.1f}s): driver and Hypothesis {d['driver'] * ms:.1f}, "
            f"supervision {d['supervision'] * ms:.1f}; in the worker: {worker or 'not measured'}"]
