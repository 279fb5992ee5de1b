"""Detectors: the ways the self-test can show that a planted fault is caught.

A detector runs one kind of check with a fault switched on and returns a ``Detection``:
caught, missed, masked (proven unable to occur in the compiled code, with the evidence)
or skipped (cannot run on this backend, with the reason). Every fault gets the campaign
detector; modules that add a check for a bug class register it here with ``register``
(``fuzz.selftest.run`` imports them), so each fault lists every check that applies to it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Optional

from fuzz.budgets import Budget
from fuzz.campaign import CampaignResult, CampaignOptions, CampaignRunner
from fuzz.profiles import MAX_LOOKUPS
from fuzz.status import DetectionStatus
from strategies.tour import ALL, TourShare
from tbe import KernelConfig
from tbe.backend import INTERPRETED

CAUGHT, MISSED, MASKED, SKIPPED = (DetectionStatus.CAUGHT, DetectionStatus.MISSED, DetectionStatus.MASKED,
                                   DetectionStatus.SKIPPED)


@dataclasses.dataclass
class Detection:
    detector: str
    status: DetectionStatus
    detail: str = ""                  # why skipped, the masking evidence, or what was seen
    seconds: Optional[float] = None   # to the first failure (caught) or spent (missed)
    examples: Optional[int] = None    # examples or trials to the first failure, or run
    shrunk: Optional[tuple[int, int, int]] = None  # (tables, bags, lookups) of the shrunk case
    artifact: Optional[Path] = None
    campaign: Optional[CampaignResult] = None

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in ("detector", "status", "detail", "seconds", "examples")}
        d["shrunk"] = None if self.shrunk is None else dict(zip(("tables", "bags", "lookups"), self.shrunk))
        d["artifact"] = None if self.artifact is None else str(self.artifact)
        return d


@dataclasses.dataclass
class Context:
    """What every detector run gets: the budget per fault, the seed, where to save caught cases."""

    budget: Budget
    seed: int = 0
    artifacts_dir: Optional[Path] = None
    progress: Optional[Callable[[str], None]] = None
    sut: str = "triton"  # the system under test (fuzz.sut.protocol name); one that takes KernelConfig.faults
    tour_share: Optional[TourShare] = ALL  # the campaign detector's opening tour (None: the search alone)
    shrink: bool = False  # shrink a caught case (the budget's shrink time); else it is kept as found
    fill: bool = True  # aimed cases for the coverage cells the campaign's draws left at zero


@dataclasses.dataclass(frozen=True)
class Detector:
    name: str
    run: Callable[[str, Context], Detection]
    # None when the detector can run on this backend, else why not
    skip_reason: Callable[[str], Optional[str]] = lambda fault: None


def _who(res: CampaignResult) -> str:
    """Which part of the campaign found the first failure: a tour case or the search (tour off or not)."""
    if res.fill_examples and (res.first_failure_examples or 0) > res.examples - res.fill_examples:
        return "by an aimed case for a coverage cell the draws left at zero" + (
            " (no opening tour)" if res.tour is None else "")
    if res.tour is None:
        return "by the search alone (no opening tour)"
    if (res.first_failure_examples or 0) <= res.tour_examples:
        return f"by opening-tour case {res.first_failure_examples} of {res.tour_examples}"
    return f"by the search, after {res.tour_examples} opening-tour case(s)"


def campaign_detection(name: str, res: CampaignResult, wall: Optional[float] = None) -> Detection:
    """A Detection from a campaign that ran with a fault switched on."""
    if res.ok:
        alone = " (search alone, no opening tour)" if res.tour is None else ""
        return Detection(name, MISSED, f"no failure in {res.examples} examples{alone}", res.seconds, res.examples,
                         campaign=res)
    tables, bags, _ = res.failure.case.size()
    return Detection(name, CAUGHT, f"{_who(res)}; {res.first_failure_headline}", res.first_failure_seconds,
                     res.first_failure_examples, (tables, bags, res.failure.lookups), res.artifact, res)


# ----------------------------------------------------------------------------- the campaign detector
_RACE = ("a race in the fused long tier: the Triton interpreter runs programs one after another, so a "
         "missing {what} never loses a partial sum there in a plain campaign")
_INT32 = ("needs tables totalling >= 2^31 rows, whose weights the module allocates whole; a campaign "
          "example cannot hold them")

_LARGE = ("needs one run of more than 4,096 chunks (over 2^20 lookups at the shipped chunk size); the "
          "interpreter's campaign examples hold at most {} lookups")

# fault -> why a campaign on this backend cannot observe it (absent = observable)
CAMPAIGN_BLIND_INTERPRETED = {
    "no_fence": _RACE.format(what="device-scope fence"),
    "no_barrier": _RACE.format(what="CTA barrier"),
    "int32_linearize_past_limit": _INT32,
    "drop_chunk_past_4096": _LARGE.format(MAX_LOOKUPS),
    "zero_update_past_2p20": _LARGE.format(MAX_LOOKUPS),
}
CAMPAIGN_BLIND_GPU = {
    "no_fence": "needs the race stress batch (thousands of long runs), not a campaign example",
    "no_barrier": "needs the race stress batch (thousands of long runs), not a campaign example",
    "int32_linearize_past_limit": _INT32,
}


def _campaign_skip(fault: str) -> Optional[str]:
    return (CAMPAIGN_BLIND_INTERPRETED if INTERPRETED else CAMPAIGN_BLIND_GPU).get(fault)


def campaign_config(fault: str, base: Optional[KernelConfig] = None) -> KernelConfig:
    """The config the campaign detector searches with ``fault`` planted (``base``: the defaults); the
    warm-up builds it (``tbe-fuzz warmup --faults``). Needs planted faults allowed."""
    return (base or KernelConfig()).replace(faults=(fault,))


def _campaign_run(fault: str, ctx: Context) -> Detection:
    config = campaign_config(fault)
    res = CampaignRunner(config, ctx.budget, ctx.seed, CampaignOptions(
        artifacts_dir=ctx.artifacts_dir, use_database=False, meta={"source": "selftest", "fault": fault},
        sut=ctx.sut, announce=ctx.progress, tour_share=ctx.tour_share, shrink=ctx.shrink, fill=ctx.fill)).run()
    return campaign_detection("campaign", res)


CAMPAIGN = Detector("campaign", _campaign_run, _campaign_skip)

# fault -> extra detectors beyond the campaign, in registration order
_EXTRA: dict[str, list[Detector]] = {}


def register(fault: str, detector: Detector) -> None:
    """Add ``detector`` to the checks the self-test runs for ``fault``."""
    _EXTRA.setdefault(fault, []).append(detector)


def detectors_for(fault: str) -> list[Detector]:
    return [CAMPAIGN] + _EXTRA.get(fault, [])
