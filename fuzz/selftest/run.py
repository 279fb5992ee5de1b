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
from fuzz.selftest import hangs, int32_check  # noqa: F401  (register their detectors)
from fuzz.selftest import large_runs
from fuzz.selftest import oob as oob_detectors
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
) -> list[FaultResult]:
    """Every detector of every fault (``only`` narrows the list and marks those faults as named).
    ``sut`` must take planted faults through KernelConfig.faults (the campaign detector runs against it);
    ``tour_share`` is the campaign detector's opening tour (None: the search alone)."""
    names = list(only) if only else sorted(faults.KNOWN)
    for name in names:
        if name not in faults.KNOWN:
            raise ValueError(f"selftest: unknown fault {name!r} (known: {sorted(faults.KNOWN)})")
    ctx = Context(budget, seed, artifacts_dir, progress, sut=sut, tour_share=tour_share)
    results = []
    with faults.allow():
        for name in names:
            fr = FaultResult(name, faults.KNOWN[name], named=bool(only))
            for det in detectors_for(name):
                reason = det.skip_reason(name)
                if reason is not None:
                    fr.detections.append(Detection(det.name, SKIPPED, reason))
                    continue
                if progress is not None:
                    progress(f"fault {name}: {det.name}")
                fr.detections.append(det.run(name, ctx))
            results.append(fr)
    return results


def counts(results: Sequence[FaultResult]) -> dict[str, int]:
    """How many faults ended caught, masked, missed and skipped."""
    out = {s: 0 for s in (CAUGHT, MASKED, MISSED, SKIPPED)}
    for r in results:
        out[r.status] += 1
    return out


def all_ok(results: Sequence[FaultResult]) -> bool:
    """The exit status: no fault missed, and none asked for by name went unchecked."""
    return all(r.ok for r in results)
