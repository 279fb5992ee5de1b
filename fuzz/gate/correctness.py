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
from fuzz.campaign import reduce_failure, size_text
from fuzz.execution import interrupt, replay_command, save_result
from fuzz.judge import CaseResult
from cases import Drawn, split_draw
from strategies.edges import edge_cases, reseed
from fuzz.judge import explain
from strategies.space import campaign_cases
from fuzz.execution import supervisor as supervision
from fuzz.errors import Unmaterializable
from fuzz.execution import CaseTimedOut, Supervisor
from fuzz.sut import get as get_sut
from fuzz.sut import fit_case, fit_strategy
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
    replays: list[str] = dataclasses.field(default_factory=list)  # each artifact's replay command
    seconds: float = 0.0
    build_wait_s: float = 0.0  # spent waiting for kernels built in the background (not on the phases' clocks)
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
                                       max_chunks=MAX_CHUNKS, max_work=MAX_WORK,
                                       profiles=get_sut(sut).capabilities.config_profiles),
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


@dataclasses.dataclass
class GateWork:
    """One seed's cases, in the order they run: ``targeted`` (labelled) then ``shared``; ``notes`` from the edges."""

    targeted: list[tuple[str, Any]]
    shared: list[tuple[str, Drawn]]
    notes: list[str]

    @property
    def items(self) -> list[tuple[str, Any]]:
        return self.targeted + self.shared


def gate_work(baseline: KernelConfig, candidate: KernelConfig, budget: Budget, seed: int = 0,
              sut: str = "triton") -> GateWork:
    """The cases ``run_gate`` runs for ``seed``: each seed draws the edge cases' batches afresh, then a
    derandomized list of campaign cases whose drawn overrides go on both configs alike and never touch a field
    the two differ in."""
    targeted, notes = edge_cases(baseline, candidate, 4 * budget.max_lookups)
    caps = get_sut(sut).capabilities
    targeted = [(label, fitted) for label, c in reseed(targeted, seed) if (fitted := fit_case(c, caps)) is not None]
    count = min(budget.max_examples, max(50, int(budget.seconds * 3)))
    shared = shared_cases(baseline, budget, seed, count, sut, fixed=frozenset(baseline.diff(candidate)))
    labelled = [(f"shared case #{i}" + (f" with {dict(d.overrides)}" if getattr(d, "overrides", ()) else ""), d)
                for i, d in enumerate(shared)]
    return GateWork(targeted, labelled, list(notes))


def config_pair(drawn: Any, baseline: KernelConfig, candidate: KernelConfig) -> tuple[Any, KernelConfig, KernelConfig,
                                                                                      dict[str, Any]]:
    """(case, baseline's config, candidate's config, overrides) for one gate case: its drawn overrides on both
    configs, or neither where the candidate cannot take them."""
    case, base_cfg, overrides = split_draw(drawn, baseline)
    try:
        cand_cfg = candidate.replace(**overrides) if overrides else candidate
    except ValueError:  # an override that fits the baseline but not the candidate: run both undrawn
        base_cfg, cand_cfg, overrides = baseline, candidate, {}
    return case, base_cfg, cand_cfg, overrides


def build_pairs(work: GateWork, baseline: KernelConfig, candidate: KernelConfig) -> list[tuple[Any, KernelConfig]]:
    """Every (case, config) ``run_gate`` runs for ``work``, in its order: what a background build makes ready."""
    out: list[tuple[Any, KernelConfig]] = []
    for _, drawn in work.items:
        case, base_cfg, cand_cfg, _ = config_pair(drawn, baseline, candidate)
        out += [(case, base_cfg), (case, cand_cfg)]
    return out


BUILD_WAIT_S = 120.0  # longest wait for one case's background build; then its worker builds what is missing itself


def _shrink(result: CaseResult, config: KernelConfig, sup: Supervisor, pending: Optional[Path], sut: str,
            seconds: float) -> tuple[CaseResult, int]:
    """The candidate's failing case reduced as a campaign reduces its own (``fuzz.campaign.reduce``) for up to
    ``seconds``, and the reductions kept: a gate's artifact is as small as a campaign's."""
    end = time.perf_counter() + seconds

    def check(case):
        try:
            return sup.run(case, config, pending=pending, sut=sut, limit_s=max(1.0, end - time.perf_counter()))
        except (Unmaterializable, CaseTimedOut):
            return None

    red = reduce_failure(result, check, lambda: interrupt.requested() or time.perf_counter() > end)
    return red.result, red.kept


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
    work: Optional[GateWork] = None,
    readiness: Any = None,
    candidate_sut: Optional[str] = None,
) -> GateResult:
    """Run targeted then shared cases (``gate_work``, or ``work`` when given) under both configs of ``sut`` (the
    candidate's against ``candidate_sut`` where given: another source of the same SUT, a code change), each
    in a supervised worker, and judge the candidate (each phase gets ``budget.seconds``, so a gate takes up to
    twice the campaign budget). With ``readiness`` (``fuzz.compile.background.start_cases``), each case first
    waits for its kernels' background build, and the phase's clock leaves that wait out. A candidate failure
    the SUT's triage list explains (``fuzz.judge.known``) is a note, not a reason to fail."""
    start = time.perf_counter()
    sup = supervisor or supervision.shared()
    pending = None if artifacts_dir is None else Path(artifacts_dir) / ".pending"
    res = GateResult(baseline, candidate, baseline.diff(candidate), seed=seed)
    work = work or gate_work(baseline, candidate, budget, seed, sut)
    res.notes += work.notes
    res.targeted = len(work.targeted)
    phase_start, shared_run, truncated, waited = start, 0, False, 0.0
    for k, (label, drawn) in enumerate(work.items):
        if k == res.targeted:
            phase_start, waited = time.perf_counter(), 0.0
        # each phase (targeted, shared) gets the budget's time; shared ones also its example cap
        if time.perf_counter() - phase_start - waited > budget.seconds:
            if k < res.targeted:
                if not truncated:
                    res.notes.append(f"only {k} of {res.targeted} targeted cases ran within {budget.seconds:g}s "
                                     f"(interleaved across the moved edges); raise --time to run them all")
                truncated = True
                continue
            break
        if k >= res.targeted and shared_run >= budget.max_examples:
            break
        case, base_cfg, cand_cfg, overrides = config_pair(drawn, baseline, candidate)
        if readiness is not None:
            t0 = time.perf_counter()
            readiness.wait(case, base_cfg, BUILD_WAIT_S)
            readiness.wait(case, cand_cfg, BUILD_WAIT_S)
            wait = time.perf_counter() - t0
            waited += wait
            res.build_wait_s += wait
        try:
            base = sup.run(case, base_cfg, pending=pending, sut=sut)
        except Unmaterializable as e:  # a generator bug, not a kernel failure: say so and go on
            res.notes.append(f"{label} could not be materialized ({e}); skipped")
            continue
        cand = sup.run(case, cand_cfg, pending=pending, sut=candidate_sut or sut)
        known = explain(candidate_sut or sut, cand)
        if known is not None:  # triaged for this SUT: reported, not held against the candidate
            res.notes.append(f"{label}: known finding(s) {', '.join(f.id for f in known)}")
            cand.reports, cand.error = [r for r in cand.reports if r.ok], None
        shared_run += k >= res.targeted
        res.targeted_run += k < res.targeted
        res.cases.append(GateCase(label, base, cand))
        if not cand.ok and artifacts_dir is not None:
            shrunk, steps = _shrink(cand, cand_cfg, sup, pending, candidate_sut or sut, budget.shrink_seconds)
            if steps:
                res.notes.append(f"{label}: the candidate's failure shrank from {size_text(cand)} to "
                                 f"{size_text(shrunk)} in {steps} reductions")
            path = save_result(artifacts_dir, shrunk, cand_cfg, {
                "source": "gate", "label": label, "seed": seed, "budget": budget.name, "sut": candidate_sut or sut,
                "baseline_ok": base.ok, "baseline_config": base_cfg.to_dict(), "config_overrides": overrides,
            }, sup.environment)
            res.artifacts.append(path)
            res.replays.append(replay_command(path, cand_cfg))
        if progress is not None and len(res.cases) % 10 == 0:
            progress(f"  {len(res.cases)} cases, {time.perf_counter() - start:.0f}s")
        if not cand.ok and stop_on_failure:
            break
    _judge(res, factor, floor)
    res.seconds = time.perf_counter() - start
    return res
