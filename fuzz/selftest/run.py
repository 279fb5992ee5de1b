"""Self-test: prove the harness catches every planted fault this backend can show.

For each fault in ``tbe.faults.KNOWN`` every detector registered for it runs with the fault
switched on (``fuzz.selftest.detectors``: a campaign always; other checks where a bug class needs
them). A fault's verdict is ``caught`` when some detector caught it, ``masked`` when none
did and a detector proved the compiled code cannot show it, ``missed`` when a detector
ran and saw nothing, ``skipped`` when no detector can run on this backend. Masked and
skipped faults are never counted as caught. Planted faults are allowed only inside
``run_selftest`` (``tbe.faults.allow``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional, Sequence

from fuzz.budgets import Budget
from fuzz.selftest import hangs, int32_check, large_runs, oob, stochastic  # noqa: F401  (register their detectors)
from fuzz.selftest.detectors import CAUGHT, MASKED, MISSED, SKIPPED, Context, Detection, detectors_for
from fuzz.status import DetectionStatus
from strategies.tour import ALL, TourShare
from tbe import faults

# modules that register detectors of their own
import fuzz.selftest.race_detectors  # noqa: E402,F401


@dataclasses.dataclass
class FaultResult:
    fault: str
    description: str
    detections: list[Detection] = dataclasses.field(default_factory=list)
    named: bool = False  # asked for with --fault

    @property
    def status(self) -> DetectionStatus:
        statuses = {d.status for d in self.detections}
        for s in (CAUGHT, MASKED, MISSED):  # a proof of masking explains a dynamic miss
            if s in statuses:
                return s
        return SKIPPED

    @property
    def caught(self) -> bool:
        return self.status == CAUGHT

    @property
    def first_catch(self) -> Optional[Detection]:
        return next((d for d in self.detections if d.status == CAUGHT), None)

    @property
    def ok(self) -> bool:
        """Caught, or masked with evidence; a skipped fault is fine only when it was not asked for by name."""
        return self.status in (CAUGHT, MASKED) or (self.status == SKIPPED and not self.named)


def run_selftest(
    budget: Budget,
    seed: int = 0,
    only: Optional[Sequence[str]] = None,
    artifacts_dir: Optional[Path] = None,
    progress: Any = None,
    sut: str = "triton",
    tour_share: Optional[TourShare] = ALL,
    shrink: bool = False,
    every_detector: bool = False,
    jobs: int = 1,
    fill: bool = True,
) -> list[FaultResult]:
    """The detectors of every fault (``only`` narrows the list and marks those faults as named), in order
    until one catches it (``every_detector``: all of them). ``sut`` must take planted faults through
    KernelConfig.faults (the campaign detector runs against it); ``tour_share`` is the campaign
    detector's opening tour (None: the search alone); ``shrink``: shrink each caught case (else it is
    kept as found); ``jobs``: faults checked at once, each in a process of its own."""
    names = list(only) if only else sorted(faults.KNOWN)
    for name in names:
        if name not in faults.KNOWN:
            raise ValueError(f"selftest: unknown fault {name!r} (known: {sorted(faults.KNOWN)})")
    ctx = Context(budget, seed, artifacts_dir, progress, sut=sut, tour_share=tour_share, shrink=shrink, fill=fill)
    if jobs > 1 and len(names) > 1:
        return _in_processes(names, ctx, bool(only), every_detector, jobs)
    with faults.allow():
        return [_one_fault(name, ctx, bool(only), every_detector) for name in names]


def _one_fault(name: str, ctx: Context, named: bool, every_detector: bool) -> FaultResult:
    fr = FaultResult(name, faults.KNOWN[name], named=named)
    for det in detectors_for(name):
        reason = det.skip_reason(name)
        caught = fr.first_catch
        if reason is None and caught is not None and not every_detector:
            reason = f"not run: {caught.detector} caught the fault first (--every-detector runs each one)"
        if reason is not None:
            fr.detections.append(Detection(det.name, SKIPPED, reason))
            continue
        if ctx.progress is not None:
            ctx.progress(f"fault {name}: {det.name}")
        fr.detections.append(det.run(name, ctx))
    return fr


def _in_processes(names: Sequence[str], ctx: Context, named: bool, every_detector: bool,
                  jobs: int) -> list[FaultResult]:
    """One fault per process (spawned: a fresh CUDA context each), ``jobs`` at a time, results in ``names``'
    order. Progress lines go to this process's stderr, each marked with its fault."""
    import concurrent.futures as cf
    import multiprocessing as mp

    with cf.ProcessPoolExecutor(max_workers=min(jobs, len(names)), mp_context=mp.get_context("spawn")) as pool:
        futures = {name: pool.submit(_fault_in_child, name, dataclasses.replace(ctx, progress=None), named,
                                     every_detector, ctx.progress is not None) for name in longest_first(names)}
        return [futures[name].result() for name in names]


def longest_first(names: Sequence[str]) -> list[str]:
    """The order faults start in when several run at once: a hang's detection waits out a timeout, so hanging
    faults start first and the others fill the remaining processes beside them."""
    return sorted(names, key=lambda name: name not in faults.HANGS)


def _fault_in_child(name: str, ctx: Context, named: bool, every_detector: bool, talk: bool) -> FaultResult:
    import sys

    if talk:
        ctx = dataclasses.replace(ctx, progress=lambda line: print(f"[{name}] {line}", file=sys.stderr, flush=True))
    if detectors_for(name)[0].skip_reason(name) is None:  # the campaign runs first: its worker starts now
        from fuzz.execution import shared

        shared().prestart()
    with faults.allow():
        fr = _one_fault(name, ctx, named, every_detector)
    return dataclasses.replace(fr, detections=[dataclasses.replace(d, campaign=_portable(d.campaign))
                                               for d in fr.detections])


def _portable(res: Any) -> Any:
    """A detection's campaign, if it pickles (what the report reads of it: the failing case); else None."""
    import pickle

    try:
        pickle.dumps(res)
        return res
    except Exception:  # noqa: BLE001  (anything a campaign result may hold that cannot cross processes)
        return None


def default_jobs() -> int:
    """Faults checked at once: on a GPU a quarter of the cores, at most 4 (each fault runs a driver and a worker
    process); under the interpreter one (its kernels take the cores)."""
    import os

    from tbe.backend import INTERPRETED

    return 1 if INTERPRETED else max(1, min(4, (os.cpu_count() or 1) // 4))


def counts(results: Sequence[FaultResult]) -> dict[str, int]:
    """How many faults ended caught, masked, missed and skipped."""
    out = {s: 0 for s in (CAUGHT, MASKED, MISSED, SKIPPED)}
    for r in results:
        out[r.status] += 1
    return out


def all_ok(results: Sequence[FaultResult]) -> bool:
    """The exit status: no fault missed, and none asked for by name went unchecked."""
    return all(r.ok for r in results)
