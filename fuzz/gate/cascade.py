"""The config gate as a verification cascade: four levels, a verdict, an exit code.

(a) static: the config validates, compiles for sm_90 within resource limits and synchronises
    (``fuzz.gate.static``); (b) correctness over several seeds: the campaign plus targeted
    edges, both configs on the same cases (``fuzz.gate.correctness.run_gate`` once per seed); (c) the
    dtype and mode matrix against FP64 and FBGEMM's CPU TBE (``fuzz.gate.oracle``); (d)
    performance on a GPU, interleaved against the baseline (``fuzz.gate.perf``).

Another SUT (TorchRec's Triton TBE) is gated on (b) and (d) alone: (a) and (c) check this project's
kernels and do not apply to it. Its two sides may be two sources (``candidate_sut``): a code change.

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
from fuzz.gate.correctness import GateResult, GateWork, build_pairs, gate_work, run_gate
from fuzz.gate.oracle import OracleResult, run_oracle_level
from fuzz.gate.oracle import matrix as oracle_matrix
from fuzz.gate.perf import DEFAULT_GAMMA, PerfResult, run_perf
from fuzz.gate.shapes import PRESETS, PerfShape
from fuzz.gate.static import StaticResult, run_static_level
from fuzz.status import Decision, Status
from fuzz.sut.protocol import get as get_sut
from tbe import KernelConfig

LEVELS = {
    "a": "static: validates, compiles for sm_90 within limits, synchronises",
    "b": "correctness over seeds: campaign + targeted edges, both configs",
    "c": "FP64 and FBGEMM CPU on the dtype and mode matrix",
    "d": "performance on a GPU, interleaved against the baseline",
}


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
    key: str
    status: Status = Status.NOT_RUN
    reasons: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    result: Any = None  # StaticResult, list[GateResult], OracleResult or PerfResult
    applies: bool = True  # False: the level checks what the SUT does not have (this project's kernels)

    @property
    def name(self) -> str:
        return LEVELS[self.key]


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
        correctness = all(lv.status == Status.PASS for lv in self.applicable if lv.key in "abc")
        return 0 if correctness and not self.options.require_perf else 1

    @property
    def reasons(self) -> list[str]:
        """Why the verdict is what it is, one line each."""
        bad = self.first_failure
        if bad is not None:
            return [f"level ({bad.key}) fails: {r}" for r in bad.reasons] or [f"level ({bad.key}) fails"]
        if self.verdict == Decision.ACCEPT:
            perf: Optional[PerfResult] = self.levels["d"].result
            speed = "" if perf is None else f"; geometric-mean speedup {perf.geomean():.3f}"
            return [f"every level passed{speed} >= gamma {self.options.gamma:g}"]
        out = []
        for lv in self.applicable:
            if lv.status == Status.NOT_RUN:
                what = "performance unverified" if lv.key == "d" else "correctness unverified"
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
    if INTERPRETED or not get_sut(opts.sut).capabilities.project_kernels or not set(opts.levels) & set("bc"):
        return None, works
    from fuzz.compile import background

    pairs: list = []
    if "b" in opts.levels:
        for seed in opts.seeds:
            works[seed] = gate_work(baseline, candidate, opts.budget, seed, opts.sut)
            pairs += build_pairs(works[seed], baseline, candidate)
    if "c" in opts.levels:
        pairs += [(spec, candidate) for _, spec in oracle_matrix(candidate)[:opts.oracle_cases]]
    return background.start_cases(pairs, progress=progress), works


def _level_b(baseline, candidate, opts: CascadeOptions, lv: Level, progress, build: Any,
             works: dict[int, GateWork]) -> None:
    results: list[GateResult] = []
    lv.result = results
    for i, seed in enumerate(opts.seeds):
        if opts.deadline is not None and time.monotonic() > opts.deadline:
            lv.status, lv.reasons = Status.NOT_RUN, [f"out of time after {i} of {len(opts.seeds)} seeds"]
            return
        if progress is not None:
            progress(f"  (b) seed {seed}")
        g = run_gate(baseline, candidate, opts.budget, seed=seed, artifacts_dir=opts.artifacts_dir,
                     progress=progress, sut=opts.sut, work=works.get(seed),
                     readiness=None if build is None else build.readiness, candidate_sut=opts.candidate_sut)
        results.append(g)
        lv.notes += [f"seed {seed}: {n}" for n in g.notes if f"seed {seed}: {n}" not in lv.notes]
        if not g.ok:
            lv.reasons += [f"seed {seed}: {r}" for r in g.reasons]
            lv.status = Status.FAIL
            return
    lv.status = Status.PASS


def _static(candidate_data: dict[str, Any], candidate: Optional[KernelConfig], progress) -> StaticResult:
    if candidate is None:
        res = StaticResult()
        try:
            KernelConfig.from_dict(candidate_data)
        except (TypeError, ValueError) as e:
            res.step("config validates", Status.FAIL, str(e))
            res.reasons.append(f"the config does not validate: {e}")
        return res
    return run_static_level(candidate, progress)


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
    res = CascadeResult(baseline, config, data, opts, {k: Level(k, applies=own or k in "bd") for k in LEVELS})
    build, works = _start_build(baseline, config, opts, progress) if config is not None else (None, {})

    def end_build() -> None:  # before (d) times anything, and at the end: once
        nonlocal build
        if build is not None:
            built, build = build.stop(), None
            res.levels["b" if "b" in opts.levels else "c"].notes.append(
                "kernels of the cases built in the background: " + built.text().replace("\n ", ";"))
    try:
        _run_levels(res, baseline, config, data, opts, progress, build, works, end_build)
    finally:
        end_build()
    res.seconds = time.perf_counter() - t0
    return res


def _run_levels(res: CascadeResult, baseline: KernelConfig, config: Optional[KernelConfig], data: dict[str, Any],
                opts: CascadeOptions, progress: Optional[Callable[[str], None]], build: Any,
                works: dict[int, GateWork], end_build: Callable[[], None]) -> None:
    stop: Optional[str] = None
    for key, lv in res.levels.items():
        if key not in opts.levels:
            lv.reasons.append("not asked for (--levels)")
            continue
        if stop is not None:
            lv.reasons.append(f"level ({stop}) failed")
            continue
        if config is None and key != "a":
            lv.reasons.append("the candidate does not validate")
            continue
        if not lv.applies:
            lv.reasons.append(f"does not apply: it checks this project's own kernels, not SUT {get_sut(opts.sut).name}")
            continue
        if progress is not None:
            progress(f"level ({key}) {lv.name}")
        start = time.perf_counter()
        if key == "a":
            r = _static(data, config, progress)
            lv.result, lv.status, lv.reasons, lv.notes = r, r.status, list(r.reasons), list(r.notes)
        elif key == "b":
            _level_b(baseline, config, opts, lv, progress, build, works)
        elif key == "c":
            limit = opts.oracle_cases
            r: OracleResult = run_oracle_level(baseline, config, progress=progress, max_cases=limit,
                                               deadline=opts.deadline)
            lv.result, lv.status, lv.reasons = r, r.status, list(r.reasons)
            lv.notes = list(r.notes)
        else:
            end_build()  # nothing compiles beside the timing
            p = run_perf(baseline, config, opts.shapes, opts.gamma, opts.rounds, opts.target_ms, opts.deadline,
                         progress, suts=None if get_sut(opts.sut).capabilities.project_kernels
                         else (opts.sut, opts.candidate_address))
            lv.result, lv.status, lv.reasons, lv.notes = p, p.status, list(p.reasons), list(p.notes)
        lv.seconds = time.perf_counter() - start
        if lv.status == Status.FAIL and not opts.keep_going:
            stop = key
