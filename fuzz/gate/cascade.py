"""The config gate as a verification cascade: four levels, a verdict, an exit code.

(a) static: the config validates, compiles for sm_90 within resource limits and synchronises
    (``fuzz.gate.static``); (b) correctness over several seeds: the campaign plus targeted
    edges, both configs on the same cases (``fuzz.gate.correctness.run_gate`` once per seed); (c) the
    dtype and mode matrix against FP64 and FBGEMM's CPU TBE (``fuzz.gate.oracle``); (d)
    performance on a GPU, interleaved against the baseline (``fuzz.gate.perf``).

Another SUT (TorchRec's Triton TBE) is gated on (b) and (d) alone: (a) and (c) check this project's
kernels and do not apply to it. Its two sides may be two sources (``candidate_sut``): a code change.

Each level is an object (``fuzz.gate.levels``) that runs itself and says what its report shows.
Levels run in order and stop at the first failure (``keep_going`` runs the rest anyway). The
verdict is ACCEPT (every level passed), KEEP (a level failed: the baseline stays) or
UNVERIFIED (nothing failed but a level did not run). Exit codes: ACCEPT 0, KEEP 1;
UNVERIFIED 0 only when (a)-(c) passed and (d) alone did not run (no GPU) unless
``require_perf`` is set, else 1: a level that did not run never counts as passed.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from fuzz.budgets import Budget
from fuzz.gate.correctness import GateWork, build_pairs, gate_work
from fuzz.gate.levels import BY_KEY, CORRECTNESS, ORACLE, ORDER, PERFORMANCE, GateLevel, LevelRun
from fuzz.gate.oracle import matrix as oracle_matrix
from fuzz.gate.perf import DEFAULT_GAMMA, PerfResult
from fuzz.gate.shapes import PRESETS, PerfShape
from fuzz.status import Decision, Status
from fuzz.sut import get as get_sut
from tbe import KernelConfig


@dataclasses.dataclass
class CascadeOptions:
    budget: Budget                           # level (b), per seed and phase (targeted, shared)
    seeds: Sequence[int] = (0, 1, 2)
    levels: str = "abcd"
    gamma: float = DEFAULT_GAMMA
    shapes: Sequence[PerfShape] = tuple(PRESETS["quick"])
    shapes_name: str = "quick"
    rounds: int = 5
    target_ms: float = 20.0
    oracle_cases: Optional[int] = None       # level (c): only the first N matrix cases
    artifacts_dir: Optional[Path] = None
    keep_going: bool = False
    require_perf: bool = False
    deadline: Optional[float] = None         # time.monotonic() after which (c) and (d) start no case or shape
    sut: str = "triton"                      # the SUT (address) both sides run; (a) and (c) check this project's
                                             # kernels and apply only to them
    candidate_sut: Optional[str] = None      # the candidate side's SUT address where it differs (another source of
                                             # the same SUT: the gate judges a code change, not a config change)

    @property
    def candidate_address(self) -> str:
        return self.candidate_sut or self.sut


@dataclasses.dataclass
class Level:
    """What one level of a cascade did: its status, why, notes, time and result (its letter names the level)."""

    key: str
    status: Status = Status.NOT_RUN
    reasons: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    result: Any = None  # StaticResult, list[GateResult], OracleResult or PerfResult
    applies: bool = True  # False: the level checks what the SUT does not have (this project's kernels)

    @property
    def spec(self) -> GateLevel:
        """The level this record is of (``fuzz.gate.levels``)."""
        return BY_KEY[self.key]

    @property
    def name(self) -> str:
        return self.spec.name


@dataclasses.dataclass
class CascadeResult:
    baseline: KernelConfig
    candidate: Optional[KernelConfig]           # None when the candidate did not validate
    candidate_data: dict[str, Any]
    options: CascadeOptions
    levels: dict[str, Level]
    seconds: float = 0.0

    @property
    def diff(self) -> dict[str, tuple[Any, Any]]:
        """Fields that change, baseline -> candidate (of an invalid candidate: the fields its file sets)."""
        if self.candidate is not None:
            return self.baseline.diff(self.candidate)
        base = self.baseline.to_dict()
        return {k: (base.get(k), v) for k, v in sorted(self.candidate_data.items()) if base.get(k) != v}

    @property
    def first_failure(self) -> Optional[Level]:
        return next((lv for lv in self.levels.values() if lv.status == Status.FAIL), None)

    @property
    def applicable(self) -> list[Level]:
        """The levels that apply to the SUT (all four for this project's kernels; (b) and (d) for another)."""
        return [lv for lv in self.levels.values() if lv.applies]

    @property
    def verdict(self) -> str:
        if self.first_failure is not None:
            return Decision.KEEP
        return Decision.ACCEPT if all(lv.status == Status.PASS for lv in self.applicable) else Decision.UNVERIFIED

    @property
    def exit_code(self) -> int:
        if self.verdict == Decision.ACCEPT:
            return 0
        if self.verdict == Decision.KEEP:
            return 1
        correctness = all(lv.status == Status.PASS for lv in self.applicable if lv.spec.correctness)
        return 0 if correctness and not self.options.require_perf else 1

    @property
    def reasons(self) -> list[str]:
        """Why the verdict is what it is, one line each."""
        bad = self.first_failure
        if bad is not None:
            return [f"level ({bad.key}) fails: {r}" for r in bad.reasons] or [f"level ({bad.key}) fails"]
        if self.verdict == Decision.ACCEPT:
            perf: Optional[PerfResult] = self.levels[PERFORMANCE.key].result
            speed = "" if perf is None else f"; geometric-mean speedup {perf.geomean():.3f}"
            return [f"every level passed{speed} >= gamma {self.options.gamma:g}"]
        out = []
        for lv in self.applicable:
            if lv.status == Status.NOT_RUN:
                what = "correctness unverified" if lv.spec.correctness else "performance unverified"
                out.append(f"level ({lv.key}) not run ({'; '.join(lv.reasons) or 'not asked for'}): {what}")
        return out


def _start_build(baseline: KernelConfig, candidate: KernelConfig, opts: CascadeOptions,
                 progress: Optional[Callable[[str], None]]) -> tuple[Any, dict[int, GateWork]]:
    """On a GPU, build the kernels of (b)'s cases (every seed's, both configs) and then (c)'s matrix in the
    background, in the order the levels run them (``fuzz.compile.background.start_cases``): (b) waits for each
    case's own build instead of for a warm-up of everything either config could reach. Returns the build
    (None on the interpreter or for another SUT) and each seed's cases, drawn once here."""
    from tbe.backend import INTERPRETED

    works: dict[int, GateWork] = {}
    if INTERPRETED or not get_sut(opts.sut).capabilities.project_kernels or not any(
            level.builds_ahead and level.key in opts.levels for level in ORDER):
        return None, works
    from fuzz.compile import background

    pairs: list = []
    if CORRECTNESS.key in opts.levels:
        for seed in opts.seeds:
            works[seed] = gate_work(baseline, candidate, opts.budget, seed, opts.sut)
            pairs += build_pairs(works[seed], baseline, candidate)
    if ORACLE.key in opts.levels:
        pairs += [(spec, candidate) for _, spec in oracle_matrix(candidate)[:opts.oracle_cases]]
    return background.start_cases(pairs, progress=progress), works


def run_cascade(
    baseline: KernelConfig, candidate: Union[KernelConfig, dict[str, Any]], opts: CascadeOptions,
    progress: Optional[Callable[[str], None]] = None,
) -> CascadeResult:
    """Run the asked-for levels in order (see the module docstring)."""
    t0 = time.perf_counter()
    data = candidate.to_dict() if isinstance(candidate, KernelConfig) else dict(candidate)
    try:
        config = candidate if isinstance(candidate, KernelConfig) else KernelConfig.from_dict(data)
    except (TypeError, ValueError):
        config = None
    own = get_sut(opts.sut).capabilities.project_kernels
    res = CascadeResult(baseline, config, data, opts, {
        level.key: Level(level.key, applies=own or not level.own_kernels_only) for level in ORDER})
    build, works = _start_build(baseline, config, opts, progress) if config is not None else (None, {})
    ctx = LevelRun(baseline, config, data, opts, progress, build, works)

    def end_build() -> None:  # before (d) times anything, and at the end: once
        if ctx.build is not None:
            built, ctx.build = ctx.build.stop(), None
            first = next(level for level in ORDER if level.builds_ahead and level.key in opts.levels)
            res.levels[first.key].notes.append(
                "kernels of the cases built in the background: " + built.text().replace("\n ", ";"))
    ctx.end_build = end_build
    try:
        _run_levels(res, ctx)
    finally:
        end_build()
    res.seconds = time.perf_counter() - t0
    return res


def _run_levels(res: CascadeResult, ctx: LevelRun) -> None:
    opts = ctx.opts
    stop: Optional[str] = None
    for key, lv in res.levels.items():
        level = lv.spec
        if key not in opts.levels:
            lv.reasons.append("not asked for (--levels)")
            continue
        if stop is not None:
            lv.reasons.append(f"level ({stop}) failed")
            continue
        if ctx.candidate is None and level.needs_valid_candidate:
            lv.reasons.append("the candidate does not validate")
            continue
        if not lv.applies:
            lv.reasons.append(f"does not apply: it checks this project's own kernels, not SUT {get_sut(opts.sut).name}")
            continue
        if ctx.progress is not None:
            ctx.progress(f"level ({key}) {lv.name}")
        start = time.perf_counter()
        level.run(ctx, lv)
        lv.seconds = time.perf_counter() - start
        if lv.status == Status.FAIL and not opts.keep_going:
            stop = key
