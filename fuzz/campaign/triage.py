"""A campaign against a SUT with known findings: record each, shrunk, and keep searching for new ones.

``run_triaged`` runs ``fuzz.campaign.search.CampaignRunner`` repeatedly. A failing case that the
already-recorded findings explain counts as a pass; any other failure is shrunk. If the
shrunk case is explained by the triage list (``fuzz.judge.known``), each finding it shows is
recorded with that case (and saved under ``<artifacts>/known/``) and the search goes on
with the time left; a failure the list does not explain ends the campaign as a failure.
Each round starts from the next seed, so rounds do not redraw the same examples, and goes on with the opening
tour where the round before stopped (without a background build, which may run the tour out of order). Known
findings' shrinking comes out of the search time: the whole run stays within the
budget's search plus shrink time. Without the example database: a finding is rediscovered
by the search every run, never replayed from a file.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from fuzz.execution import artifacts, interrupt
from fuzz.budgets import Budget
from fuzz.campaign.repeat import Repeat
from fuzz.campaign.repeat import of as repeat_of
from fuzz.campaign.search import CampaignResult, CampaignOptions, CampaignRunner, save_campaign_failure
from strategies.tour import ALL
from fuzz.judge import CaseResult
from fuzz.status import StopReason
from fuzz.judge import TRIAGE, KnownFinding, explain, for_sut
from oracles.error_model import ErrorModel, from_env
from tbe import KernelConfig


@dataclasses.dataclass
class KnownRecord:
    """One known finding as a campaign met it: its shrunk case, when it was first seen, its artifact."""

    finding: KnownFinding
    result: CaseResult
    examples: int           # examples (all rounds) before the round that found it ended in it
    seconds: float          # since the campaign started, shrinking included
    artifact: Optional[Path] = None

    @property
    def size(self) -> tuple[int, int, int]:
        tables, bags, _ = self.result.case.size()
        return tables, bags, self.result.lookups


def run_triaged(
    config: KernelConfig,
    budget: Budget,
    seed: int = 0,
    artifacts_dir: Optional[Path] = artifacts.DEFAULT_DIR,
    sut: str = "triton",
    progress: Any = None,
    meta: Optional[dict[str, Any]] = None,
    triage: Sequence[KnownFinding] = TRIAGE,
    use_database: bool = True,
    database: Any = None,
    observe: Any = None,
    model: Optional[ErrorModel] = None,
    supervisor: Any = None,
    readiness: Any = None,
    strategy: Any = None,
    announce: Any = None,
    tour_share: Any = ALL,
    fill: bool = True,
    reuse: bool = False,
    repeat: Optional[Repeat] = None,
) -> CampaignResult:
    """A campaign against ``sut`` that reports its triaged findings as known (see the module docstring).
    With no finding triaged for ``sut`` it is exactly one ``CampaignRunner`` (``database`` and ``observe`` as
    there; rounds of a triaged campaign use no database); ``strategy`` replaces the drawn cases as there,
    and ``tour_share`` picks the opening tour's cases as there, in every round. ``reuse`` and ``repeat`` as there;
    a repeat's drawn count spans the rounds (each round's seed decides its draws, so they repeat as long as
    each known finding shrinks to the same case)."""
    model = model or from_env()
    common = dict(artifacts_dir=artifacts_dir, progress=progress, meta=meta, sut=sut, observe=observe, model=model,
                  supervisor=supervisor, readiness=readiness, strategy=strategy, announce=announce,
                  tour_share=tour_share, fill=fill)
    if not for_sut(sut, triage):
        return CampaignRunner(config, budget, seed, CampaignOptions(
            use_database=use_database, database=database, reuse=reuse, repeat=repeat, **common)).run()
    start = time.perf_counter()
    total = CampaignResult(config, budget, seed, sut=sut, model=model)
    found: dict[str, KnownRecord] = {}
    round_ = tour_done = 0
    while True:
        left = budget.seconds - (time.perf_counter() - start)
        examples_left = budget.max_examples - total.examples
        drawn_left = None if repeat is None else repeat.drawn - repeat_of(total).drawn
        if interrupt.requested():
            total.stopped_by = StopReason.INTERRUPTED
            break
        if left <= 0 or examples_left <= 0 or drawn_left is not None and drawn_left <= 0:
            total.stopped_by = StopReason.TIME if left <= 0 else StopReason.EXAMPLES
            break
        only = tuple(found)
        part_budget = dataclasses.replace(budget, seconds=left, max_examples=examples_left)
        part = CampaignRunner(config, part_budget, seed + round_, CampaignOptions(
            use_database=False, expected=lambda r: explain(sut, r, triage, only=only) is not None,
            tour_done=tour_done, repeat=None if drawn_left is None else Repeat(drawn_left),
            **{**common, "artifacts_dir": None})).run()
        total.merge(part)
        total.drawn_after += part.drawn_after
        if readiness is None:  # the tour ran in order: its cases so far, the failing one included, are done
            tour_done += part.tour_examples
        round_ += 1
        if part.ok:
            total.stopped_by = part.stopped_by
            break
        known = explain(sut, part.failure, triage)
        if known is None:  # not on the list: a failure, saved whole
            total.failure = part.failure
            total.first_failure_examples = total.examples - part.examples + (part.first_failure_examples or 0)
            total.first_failure_seconds = time.perf_counter() - start - part.seconds + (part.first_failure_seconds or 0)
            total.shrink_seconds = part.shrink_seconds
            total.stopped_by = StopReason.INTERRUPTED if part.interrupted else StopReason.FAILURE
            total.failure_config, total.failure_overrides = part.failure_config, part.failure_overrides
            total.environment = part.environment
            if artifacts_dir is not None:  # the round's seed and config, the whole campaign's example count
                total.artifact = save_campaign_failure(artifacts_dir, part, {
                    "examples_before_failure": total.first_failure_examples, **(meta or {})})
            break
        new = [f for f in known if f.id not in found]
        artifact = None
        if artifacts_dir is not None and new:
            artifact = save_campaign_failure(Path(artifacts_dir) / "known", part, {
                "source": "campaign (known finding)", "known": [f.id for f in known], **(meta or {})})
        for f in new:
            found[f.id] = KnownRecord(f, part.failure, total.examples, time.perf_counter() - start, artifact)
        if progress is not None:
            progress(f"  known finding(s) {', '.join(f.id for f in known)} after {total.examples} examples, "
                     f"shrunk to {part.failure.case.size()[1]} bag(s); searching on")
        if not new:  # shrinking drifted to findings already recorded: the search goes on
            continue
    order = [f.id for f in for_sut(sut, triage)]
    total.known = sorted(found.values(), key=lambda k: order.index(k.finding.id))
    total.seconds = time.perf_counter() - start
    return total
