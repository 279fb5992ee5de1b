"""Level (d) of the gate: is the candidate faster than the baseline, by at least gamma, and nowhere slower?

Every shape is timed for the forward and for a full iteration (forward, backward, optimizer),
candidate against baseline in one process (``fuzz.gate.timing``: interleaved A/B/A' rounds).
The candidate passes when the geometric mean of its speedups over every (shape, phase) is at
least ``gamma`` and no (shape, phase) is slower by more than the noise measured for it (the
largest A/A disagreement of its rounds). With ``gamma <= 1`` (a change made for correctness)
the geometric mean may fall short of gamma by at most its mean noise, so a change that costs
nothing measurable passes. Without a CUDA device the level is "not run", never passed.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Optional, Sequence

from fuzz.gate.timing import BaselineCache, Entry, time_shape, time_shape_suts
from fuzz.gate.shapes import PerfShape
from fuzz.status import Status

DEFAULT_GAMMA = 1.03


@dataclasses.dataclass
class PerfResult:
    gamma: float
    entries: list[Entry] = dataclasses.field(default_factory=list)
    status: Status = Status.NOT_RUN
    reasons: list[str] = dataclasses.field(default_factory=list)  # why it fails, or why it did not run
    notes: list[str] = dataclasses.field(default_factory=list)
    device: str = ""
    seconds: float = 0.0
    rounds: int = 0
    target_ms: float = 0.0

    @property
    def measured(self) -> list[Entry]:
        return [e for e in self.entries if e.ok]

    def geomean(self, phase: Optional[str] = None) -> float:
        es = [e for e in self.measured if phase is None or e.phase == phase]
        return math.exp(sum(math.log(e.speedup) for e in es) / len(es)) if es else float("nan")

    @property
    def mean_noise(self) -> float:
        es = self.measured
        return sum(e.noise for e in es) / len(es) if es else float("nan")

    @property
    def slower(self) -> list[Entry]:
        return [e for e in self.measured if e.slower]

    def to_dict(self) -> dict:
        return {
            "status": self.status, "gamma": self.gamma, "reasons": self.reasons, "notes": self.notes,
            "device": self.device, "seconds": round(self.seconds, 2), "rounds": self.rounds,
            "target_ms": self.target_ms,
            "geomean_speedup": None if not self.measured else self.geomean(),
            "geomean_forward": None if not self.measured else self.geomean("forward"),
            "geomean_iteration": None if not self.measured else self.geomean("iteration"),
            "mean_noise": None if not self.measured else self.mean_noise,
            "entries": [e.to_dict() for e in self.entries],
        }


def judge(res: PerfResult) -> None:
    """Set ``res.status`` and ``res.reasons`` from its entries (see the module docstring)."""
    res.reasons = []
    for e in res.entries:
        if not e.ok:
            res.reasons.append(f"{e.shape} {e.phase}: {e.error or 'not measured'}")
    if not res.measured:
        res.status = Status.FAIL if res.reasons else Status.NOT_RUN
        if not res.reasons:
            res.reasons.append("no shape was measured")
        return
    for e in res.slower:
        res.reasons.append(f"{e.shape} {e.phase}: {e.speedup:.3f}x, {100 * (1 / e.speedup - 1):.1f}% slower, "
                           f"beyond its noise of {100 * e.noise:.1f}%")
    g = res.geomean()
    allowance = math.exp(-res.mean_noise) if res.gamma <= 1 else 1.0
    if g < res.gamma * allowance:
        extra = f" less its mean noise {100 * res.mean_noise:.1f}%" if res.gamma <= 1 else ""
        res.reasons.append(f"geometric-mean speedup {g:.3f} over {len(res.measured)} measurements "
                           f"is below gamma {res.gamma:g}{extra}")
    res.status = Status.FAIL if res.reasons else Status.PASS


def gpu_unavailable() -> Optional[str]:
    """Why level (d) cannot run in this process, or None."""
    import torch

    from tbe.backend import INTERPRETED

    if not torch.cuda.is_available():
        return "no CUDA device: performance is measured on a GPU only"
    if INTERPRETED:
        return "TRITON_INTERPRET=1: kernels run in the interpreter, whose timings say nothing about the GPU"
    return None


def run_perf(
    baseline, candidate, shapes: Sequence[PerfShape], gamma: float = DEFAULT_GAMMA, rounds: int = 5,
    target_ms: float = 20.0, deadline: Optional[float] = None, progress: Optional[Callable[[str], None]] = None,
    cache: Optional[BaselineCache] = None, phases=("forward", "iteration"), device=None,
    suts: Optional[tuple[str, str]] = None,
) -> PerfResult:
    """Time every shape under both configs and judge. ``deadline`` (a ``time.monotonic()`` value)
    stops before a shape that would start after it; the unmeasured shapes make the level fail.
    ``device`` None means the GPU (the level is "not run" without one); tests pass "cpu". ``suts``: (baseline,
    candidate) SUT addresses to time instead of this project's modules (``fuzz.gate.timing.time_shape_suts``)."""
    import torch

    t0 = time.perf_counter()
    res = PerfResult(gamma, rounds=rounds, target_ms=target_ms)
    if device is None:
        why = gpu_unavailable()
        if why is not None:
            res.reasons.append(why)
            return res
        device = torch.device("cuda")
    device = torch.device(device)
    res.device = torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)
    for i, shape in enumerate(shapes):
        if deadline is not None and time.monotonic() > deadline:
            left = [s.name for s in shapes[i:]]
            res.entries += [Entry(n, p, error="not measured: out of time") for n in left for p in phases]
            res.notes.append(f"out of time before {len(left)} shape(s): {', '.join(left)}")
            break
        entries = (time_shape(shape, baseline, candidate, device, rounds, target_ms, cache, phases) if suts is None
                   else time_shape_suts(shape, suts, (baseline, candidate), device, rounds, target_ms, phases))
        res.entries += entries
        if progress is not None:
            progress("  " + "; ".join(f"{e.shape} {e.phase} "
                                      + (f"{e.speedup:.3f}x" if e.ok else "error") for e in entries))
    judge(res)
    res.seconds = time.perf_counter() - t0
    return res
