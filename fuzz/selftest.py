"""Self-test: prove the campaign catches every planted fault this backend can show.

For each fault in ``tbe.faults.KNOWN`` a short campaign runs with the fault switched on and
must fail (examples and seconds to the first failure, and the shrunk case's size, are
reported). Faults that cannot be observed on this backend are skipped with the reason.
Planted faults are allowed only inside ``run_selftest`` (``tbe.faults.allow``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional, Sequence

from fuzz.budgets import Budget
from fuzz.campaign import CampaignResult, run_campaign
from fuzz.cases import case_size
from tbe import KernelConfig, faults
from tbe.backend import INTERPRETED

_RACE = ("a race in the fused long tier: the Triton interpreter runs programs one after another, so a "
         "missing {what} never loses a partial sum there (tests/test_races.py checks it on a GPU)")
_INT32 = ("needs tables totalling >= 2^31 rows, whose weights the module allocates whole; "
          "tests/test_transpose.py catches it at the transpose with the touched-rows reference")

# fault -> why a campaign on this backend cannot observe it (absent = observable)
UNOBSERVABLE_INTERPRETED = {
    "no_fence": _RACE.format(what="device-scope fence"),
    "no_barrier": _RACE.format(what="CTA barrier"),
    "int32_linearize_past_limit": _INT32,
}
UNOBSERVABLE_GPU = {
    # campaigns draw tables of at most a few thousand rows; the race and 2^31-row checks are their own tests
    "no_fence": "needs the race stress batch (thousands of long runs), not a campaign example: "
                "tests/test_races.py",
    "no_barrier": "needs the race stress batch (thousands of long runs), not a campaign example: "
                  "tests/test_races.py",
    "int32_linearize_past_limit": _INT32,
}


@dataclasses.dataclass
class FaultResult:
    fault: str
    description: str
    skipped: Optional[str] = None  # reason, when not run on this backend
    campaign: Optional[CampaignResult] = None

    @property
    def caught(self) -> bool:
        return self.campaign is not None and not self.campaign.ok

    @property
    def shrunk_size(self) -> Optional[tuple[int, int, int]]:
        """(tables, bags, lookups) of the shrunk failing case."""
        if not self.caught:
            return None
        tables, bags, _ = case_size(self.campaign.failure.case)
        return tables, bags, self.campaign.failure.lookups


def skip_reason(fault: str) -> Optional[str]:
    table = UNOBSERVABLE_INTERPRETED if INTERPRETED else UNOBSERVABLE_GPU
    return table.get(fault)


def run_selftest(
    budget: Budget,
    seed: int = 0,
    only: Optional[Sequence[str]] = None,
    artifacts_dir: Optional[Path] = None,
    progress: Any = None,
) -> list[FaultResult]:
    """One short campaign per observable fault (``only`` narrows the list)."""
    names = list(only) if only else sorted(faults.KNOWN)
    for name in names:
        if name not in faults.KNOWN:
            raise ValueError(f"selftest: unknown fault {name!r} (known: {sorted(faults.KNOWN)})")
    results = []
    with faults.allow():
        for name in names:
            fr = FaultResult(name, faults.KNOWN[name], skip_reason(name))
            if fr.skipped is None:
                if progress is not None:
                    progress(f"fault {name}: searching")
                config = KernelConfig(faults=(name,))
                fr.campaign = run_campaign(config, budget, seed=seed, artifacts_dir=artifacts_dir,
                                           use_database=False, meta={"source": "selftest", "fault": name})
            results.append(fr)
    return results


def all_caught(results: Sequence[FaultResult]) -> bool:
    return all(r.caught for r in results if r.skipped is None)
