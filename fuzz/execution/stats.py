"""What a campaign counted: examples, lookups, tiers, worst ratio per check, compilations, time.

The one place campaign statistics are recorded (a checked case), merged (the rounds of a
triaged campaign, the workers of ``run --workers``) and written out (the summary's JSON
fields). A worker's JSON summary is read back with ``from_state``; the bound-sharpness
histogram (``teeth``) is not carried by JSON (its bands hold medians), so merged worker
statistics have none. The coverage JSON needs the config's reachable cells, so the summary
writes it (``fuzz.campaign.report``) and workers merge it with ``fuzz.judge.coverage.merge_json``.
The opening tour's shares add up too: a triaged campaign's rounds run one share, ``run --workers N``
runs N (``strategies.tour.TourShare``), each tour case once.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
from pathlib import Path
from typing import Any, Optional

from fuzz.compile import CompileCounts
from fuzz.judge import CaseResult
from fuzz.judge import Coverage
from fuzz.judge import Margins
from fuzz.judge import Teeth
from fuzz.status import Status
from fuzz.time_split import TimeSplit
from oracles.compare import Check
from strategies.tour import TourShare


class InputForm(enum.Enum):
    """A production input form a checked sub-case held (counted per sub-case: a pack of K counts up to K)."""

    SHARED_TABLES = "features sharing a table"
    VBE = "a batch size per feature (VBE)"
    EMPTY_FEATURE = "a feature of batch 0"
    STOCHASTIC = "stochastic rounding"
    BAD_INPUT = "bad ids or offsets"


def input_forms(result: CaseResult) -> collections.Counter:
    """The production input forms of ``result``'s sub-cases (``InputForm``); stochastic rounding where its check
    judged the stores (a SUT that reads the config field, fp16 or bf16 weights)."""
    out: collections.Counter = collections.Counter()
    stochastic = any(r.check == Check.SR_NEIGHBOURS for r in result.reports)  # judged as stochastic stores
    for spec in result.case.subs:
        sizes = spec.batch_size_per_feature
        out.update(form for form, held in (
            (InputForm.SHARED_TABLES, len(set(spec.feature_table_map)) < len(spec.feature_table_map)),
            (InputForm.VBE, sizes is not None),
            (InputForm.EMPTY_FEATURE, sizes is not None and 0 in sizes),
            (InputForm.STOCHASTIC, stochastic),
            (InputForm.BAD_INPUT, result.case.bad is not None),
        ) if held)
    return out


@dataclasses.dataclass(kw_only=True)
class CampaignStats:
    examples: int = 0                 # cases checked before the first failure (or all, on a pass)
    sub_cases: int = 0                # of them, the independent cases (a pack of K counts K, others one)
    shrink_examples: int = 0          # cases checked while shrinking
    lookups: int = 0
    seconds: float = 0.0
    tiers: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    max_ratio: dict[str, float] = dataclasses.field(default_factory=dict)  # per check
    expected_failures: int = 0        # cases failing only with known findings already recorded
    unmaterializable: int = 0         # drawn specs materialize refused (a generator bug, not the kernel's)
    unmaterializable_example: Optional[str] = None
    compiles: CompileCounts = dataclasses.field(default_factory=CompileCounts)  # during the search
    fbgemm: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # status -> examples
    teeth: Teeth = dataclasses.field(default_factory=Teeth)  # bound / |update| per SL band, passing cases
    margins: Margins = dataclasses.field(default_factory=Margins)  # passing checks' error / bound by decade
    time: TimeSplit = dataclasses.field(default_factory=TimeSplit)  # where the seconds went, per case
    leftover: list[Path] = dataclasses.field(default_factory=list)  # pending cases of drivers that died
    tour_examples: int = 0            # of ``examples``, the opening tour's (run before the drawn ones)
    tour_shares: tuple[TourShare, ...] = ()  # the opening tour's shares run (none: the search alone)
    fill_zero: int = 0                # cells at zero when the aimed cases began (fuzz.campaign.fill), this share's
    fill_planned: int = 0             # aimed cases built for them
    fill_examples: int = 0            # of ``examples``, the aimed cases checked (run after the drawn ones)
    skipped_for_time: int = 0         # drawn examples not started: their expected cost exceeded the time left
    stopped_for_time: int = 0         # examples stopped at the budget's end (EXAMPLE_CAP_S past it), not judged
    reduce_steps: int = 0             # candidates the spec reducer (fuzz.campaign.reduce) checked
    coverage: Coverage = dataclasses.field(default_factory=Coverage)  # examples per (kernel path, edge) cell
    inputs: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # InputForm -> sub-cases

    def record(self, result: CaseResult, ratios: bool = True) -> None:
        """One checked example; ``ratios=False`` leaves its error ratios out of ``max_ratio``."""
        self.examples += 1
        self.sub_cases += len(result.case.subs)
        self.lookups += result.lookups
        self.tiers.update(result.tiers)
        self.inputs.update(input_forms(result))
        self.coverage.add(result.cells)
        self.fbgemm[result.fbgemm or Status.NOT_RUN] += 1
        for name, ratio in (result.ratios_by_check() if ratios else {}).items():
            self.max_ratio[name] = max(self.max_ratio.get(name, 0.0), ratio)
        if ratios:
            self.margins.add(result.reports)
        self.teeth.merge(result.teeth)
        if result.compiles is not None:
            self.compiles.add(result.compiles)

    def merge(self, other: "CampaignStats") -> None:
        """Add ``other`` (another round or another worker): counts add up, the worst ratio per check wins."""
        self.examples += other.examples
        self.sub_cases += other.sub_cases
        self.shrink_examples += other.shrink_examples
        self.lookups += other.lookups
        self.seconds += other.seconds
        self.tiers.update(other.tiers)
        self.inputs.update(other.inputs)
        self.coverage.merge(other.coverage)
        for name, ratio in other.max_ratio.items():
            self.max_ratio[name] = max(self.max_ratio.get(name, 0.0), ratio)
        self.expected_failures += other.expected_failures
        self.unmaterializable += other.unmaterializable
        self.unmaterializable_example = self.unmaterializable_example or other.unmaterializable_example
        self.compiles.add(other.compiles)
        self.fbgemm.update(other.fbgemm)
        self.teeth.merge(other.teeth)
        self.margins.merge(other.margins)
        self.time.merge(other.time)
        self.leftover += [p for p in other.leftover if p not in self.leftover]
        self.tour_examples += other.tour_examples
        self.tour_shares += tuple(s for s in other.tour_shares if s not in self.tour_shares)
        self.fill_zero += other.fill_zero
        self.fill_planned += other.fill_planned
        self.fill_examples += other.fill_examples
        self.skipped_for_time += other.skipped_for_time
        self.stopped_for_time += other.stopped_for_time
        self.reduce_steps += other.reduce_steps

    def to_state(self) -> dict[str, Any]:
        """The statistics' fields of a campaign's JSON summary."""
        return {
            "examples": self.examples, "sub_cases": self.sub_cases, "shrink_examples": self.shrink_examples, "lookups": self.lookups,
            "seconds": round(self.seconds, 3), "tiers": dict(self.tiers), "max_ratio": self.max_ratio,
            "expected_failures": self.expected_failures, "unmaterializable": self.unmaterializable,
            "compiles": self.compiles.to_dict(), "fbgemm": dict(self.fbgemm), "teeth": self.teeth.to_json(),
            "margins": self.margins.to_json(),
            "time_split": self.time.to_json(self.seconds),
            "tour_examples": self.tour_examples, "skipped_for_time": self.skipped_for_time,
            "stopped_for_time": self.stopped_for_time, "reduce_steps": self.reduce_steps,
            "tour": {"cases": self.tour_examples, "shares": [dataclasses.asdict(s) for s in self.tour_shares]}
            if self.tour_shares else None,
            "fill": {"zero_cells": self.fill_zero, "cases": self.fill_planned, "checked": self.fill_examples},
            "inputs": {form.name.lower(): self.inputs[form] for form in InputForm},
        }

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> "CampaignStats":
        """Statistics read back from a ``to_state`` dict (a worker's JSON summary); teeth stay empty."""
        return cls(
            examples=int(d.get("examples", 0)), sub_cases=int(d.get("sub_cases", d.get("examples", 0))),
            shrink_examples=int(d.get("shrink_examples", 0)),
            lookups=int(d.get("lookups", 0)), seconds=float(d.get("seconds", 0.0)),
            tiers=collections.Counter(d.get("tiers", {})), max_ratio=dict(d.get("max_ratio", {})),
            expected_failures=int(d.get("expected_failures", 0)), unmaterializable=int(d.get("unmaterializable", 0)),
            compiles=CompileCounts.from_dict(d.get("compiles", {})), fbgemm=collections.Counter(d.get("fbgemm", {})),
            time=TimeSplit.from_json(d.get("time_split", {})), margins=Margins.from_json(d.get("margins", {})),
            tour_examples=int(d.get("tour_examples", 0)), skipped_for_time=int(d.get("skipped_for_time", 0)),
            stopped_for_time=int(d.get("stopped_for_time", 0)), reduce_steps=int(d.get("reduce_steps", 0)),
            tour_shares=tuple(TourShare(**s) for s in (d.get("tour") or {}).get("shares", [])),
            fill_zero=int((d.get("fill") or {}).get("zero_cells", 0)),
            fill_planned=int((d.get("fill") or {}).get("cases", 0)),
            fill_examples=int((d.get("fill") or {}).get("checked", 0)),
            inputs=collections.Counter({form: int((d.get("inputs") or {}).get(form.name.lower(), 0))
                                        for form in InputForm}),
        )
