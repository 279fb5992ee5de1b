"""The config gate: does a candidate KernelConfig stay correct wherever the baseline is?

Both configs run the same cases: targeted cases at the edges the changed fields move
(``strategies.edges``, their batches drawn from the seed), then one derandomized list of campaign
cases drawn once from the seed,
until the budget is spent. The candidate fails the gate if it fails any case, or if its
largest error/bound ratio for some check materially exceeds the baseline's on cases the
baseline passes (more than ``factor`` times it and more than ``floor`` above it).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Optional

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

from fuzz.budgets import Budget
from fuzz.profiles import MAX_CHUNKS, MAX_COLUMN_BLOCKS, MAX_WORK
from fuzz.execution import save_result
from fuzz.judge import CaseResult
from strategies.config_space import Drawn, split_draw
from strategies.edges import edge_cases, reseed
from fuzz.judge import explain
from strategies.space import campaign_cases
from fuzz.execution import supervisor as supervision
from fuzz.errors import Unmaterializable
from fuzz.execution.supervisor import Supervisor
from fuzz.sut.protocol import get as get_sut
from fuzz.sut.fit import fit_case, fit_strategy
from tbe import KernelConfig

RATIO_FACTOR = 2.0   # "materially": more than twice the baseline's ratio ...
RATIO_FLOOR = 0.25   # ... and more than a quarter of the bound above it


@dataclasses.dataclass
class GateCase:
    label: str
    base: CaseResult
    cand: CaseResult


@dataclasses.dataclass
class GateResult:
    baseline: KernelConfig
    candidate: KernelConfig
    diff: dict[str, tuple[Any, Any]]
    cases: list[GateCase] = dataclasses.field(default_factory=list)
    targeted: int = 0       # targeted cases built for the moved edges
    targeted_run: int = 0   # of which ran within the budget
    notes: list[str] = dataclasses.field(default_factory=list)
    reasons: list[str] = dataclasses.field(default_factory=list)  # why it fails; empty = pass
    base_ratio: dict[str, float] = dataclasses.field(default_factory=dict)
    cand_ratio: dict[str, float] = dataclasses.field(default_factory=dict)
    artifacts: list[Path] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    seed: int = 0

    @property
    def ok(self) -> bool:
        return not self.reasons

    @property
    def lookups(self) -> int:
        return sum(c.cand.lookups for c in self.cases)


def shared_cases(config: KernelConfig, budget: Budget, seed: int, count: int, sut: str = "triton",
                 fixed: frozenset[str] = frozenset()) -> list[Drawn]:
    """``count`` campaign cases drawn once, deterministically from ``seed`` within ``sut``'s capabilities
    (no checking, no shrinking), each with config overrides drawn around ``config`` that leave the
    ``fixed`` fields alone (none for a SUT without a KernelConfig)."""
    drawn: list[Drawn] = []

    @hypothesis_seed(seed)
    @settings(max_examples=count, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(fit_strategy(campaign_cases(config, budget.max_lookups, search_config=get_sut(sut).capabilities.kernel_config,
                                       fixed=fixed, max_column_blocks=MAX_COLUMN_BLOCKS, pack=budget.pack,
                                       max_chunks=MAX_CHUNKS, max_work=MAX_WORK),
                               get_sut(sut).capabilities))
    def collect(case):
        drawn.append(case)

    collect()
    return drawn


def _judge(res: GateResult, factor: float, floor: float) -> None:
    for c in res.cases:
        if not c.cand.ok:
            also = " (the baseline fails it too)" if not c.base.ok else ""
            res.reasons.append(f"candidate fails {c.label}{also}")
        if c.base.ok and c.cand.ok:
            for name, r in c.base.ratios_by_check().items():
                res.base_ratio[name] = max(res.base_ratio.get(name, 0.0), r)
            for name, r in c.cand.ratios_by_check().items():
                res.cand_ratio[name] = max(res.cand_ratio.get(name, 0.0), r)
    for name, cand in sorted(res.cand_ratio.items()):
        base = res.base_ratio.get(name, 0.0)
        if cand > factor * base and cand - base > floor:
            res.reasons.append(
                f"candidate's error/bound ratio for '{name}' is {cand:.3g}, baseline's {base:.3g} "
                f"(more than {factor:g}x and {floor:g} above it)"
            )


def run_gate(
    baseline: KernelConfig,
    candidate: KernelConfig,
    budget: Budget,
    seed: int = 0,
    artifacts_dir: Optional[Path] = None,
    factor: float = RATIO_FACTOR,
    floor: float = RATIO_FLOOR,
    stop_on_failure: bool = True,
    progress: Any = None,
    supervisor: Optional[Supervisor] = None,
    sut: str = "triton",
) -> GateResult:
    """Run targeted then shared cases under both configs of ``sut``, each in a supervised worker, and
    judge the candidate (each phase gets ``budget.seconds``, so a gate takes up to twice the campaign
    budget). A candidate failure the SUT's triage list explains (``fuzz.judge.known``) is a note, not a
    reason to fail."""
    start = time.perf_counter()
    sup = supervisor or supervision.shared()
    pending = None if artifacts_dir is None else Path(artifacts_dir) / ".pending"
    res = GateResult(baseline, candidate, baseline.diff(candidate), seed=seed)
    targeted, notes = edge_cases(baseline, candidate, 4 * budget.max_lookups)
    targeted = reseed(targeted, seed)  # each seed draws the edge cases' batches afresh
    caps = get_sut(sut).capabilities
    targeted = [(label, fitted) for label, c in targeted if (fitted := fit_case(c, caps)) is not None]
    res.notes += notes
    res.targeted = len(targeted)
    count = min(budget.max_examples, max(50, int(budget.seconds * 3)))
    # drawn overrides go on both configs alike and never touch a field the two differ in
    shared = shared_cases(baseline, budget, seed, count, sut, fixed=frozenset(res.diff))
    work = list(targeted) + [(f"shared case #{i}" + (f" with {dict(d.overrides)}" if getattr(d, "overrides", ())
                                                     else ""), d) for i, d in enumerate(shared)]
    phase_start, shared_run, truncated = start, 0, False
    for k, (label, case) in enumerate(work):
        if k == res.targeted:
            phase_start = time.perf_counter()
        # each phase (targeted, shared) gets the budget's time; shared ones also its example cap
        if time.perf_counter() - phase_start > budget.seconds:
            if k < res.targeted:
                if not truncated:
                    res.notes.append(f"only {k} of {res.targeted} targeted cases ran within {budget.seconds:g}s "
                                     f"(interleaved across the moved edges); raise --time to run them all")
                truncated = True
                continue
            break
        if k >= res.targeted and shared_run >= budget.max_examples:
            break
        case, base_cfg, overrides = split_draw(case, baseline)
        try:
            cand_cfg = candidate.replace(**overrides) if overrides else candidate
        except ValueError:  # an override that fits the baseline but not the candidate: run both undrawn
            base_cfg, cand_cfg, overrides = baseline, candidate, {}
        try:
            base = sup.run(case, base_cfg, pending=pending, sut=sut)
        except Unmaterializable as e:  # a generator bug, not a kernel failure: say so and go on
            res.notes.append(f"{label} could not be materialized ({e}); skipped")
            continue
        cand = sup.run(case, cand_cfg, pending=pending, sut=sut)
        known = explain(sut, cand)
        if known is not None:  # triaged for this SUT: reported, not held against the candidate
            res.notes.append(f"{label}: known finding(s) {', '.join(f.id for f in known)}")
            cand.reports, cand.error = [r for r in cand.reports if r.ok], None
        shared_run += k >= res.targeted
        res.targeted_run += k < res.targeted
        res.cases.append(GateCase(label, base, cand))
        if not cand.ok and artifacts_dir is not None:
            res.artifacts.append(save_result(artifacts_dir, cand, cand_cfg, {
                "source": "gate", "label": label, "seed": seed, "budget": budget.name,
                "baseline_ok": base.ok, "baseline_config": base_cfg.to_dict(), "config_overrides": overrides,
            }, sup.environment))
        if progress is not None and len(res.cases) % 10 == 0:
            progress(f"  {len(res.cases)} cases, {time.perf_counter() - start:.0f}s")
        if not cand.ok and stop_on_failure:
            break
    _judge(res, factor, floor)
    res.seconds = time.perf_counter() - start
    return res
