"""The gate's four levels as objects: each knows its letter, what it checks, whom it applies to, how it runs
(``run``) and what its report says (``lines``, ``detail``). ``fuzz.gate.cascade`` runs them in ``ORDER``."""

from __future__ import annotations

import abc
import dataclasses
import time
from typing import Any, Callable, ClassVar, Optional

from fuzz.campaign import failure_lines
from fuzz.gate.correctness import GateResult, GateWork, run_gate
from fuzz.gate.oracle import OracleResult, run_oracle_level
from fuzz.gate.perf import PerfResult, run_perf
from fuzz.gate.static import StaticResult, run_static_level
from fuzz.judge import ratio_text
from fuzz.status import OracleVerdict, Status
from fuzz.sut import get as get_sut
from tbe import KernelConfig


@dataclasses.dataclass
class LevelRun:
    """What a level runs with: the two configs (``candidate`` None when it does not validate, ``data`` its file),
    the cascade's options, the background build of the cases' kernels and each seed's cases."""

    baseline: KernelConfig
    candidate: Optional[KernelConfig]
    data: dict[str, Any]
    opts: Any                                   # fuzz.gate.cascade.CascadeOptions
    progress: Optional[Callable[[str], None]]
    build: Any = None
    works: dict[int, GateWork] = dataclasses.field(default_factory=dict)
    end_build: Callable[[], None] = lambda: None


class GateLevel(abc.ABC):
    """One level of the cascade; ``run`` fills the level's record (``fuzz.gate.cascade.Level``)."""

    key: ClassVar[str]                  # the letter ``--levels`` names it by
    name: ClassVar[str]
    correctness: ClassVar[bool] = True  # False: the performance level, which no GPU means cannot run
    own_kernels_only: ClassVar[bool] = False  # it checks this project's kernels, so another SUT skips it
    needs_valid_candidate: ClassVar[bool] = True
    builds_ahead: ClassVar[bool] = False  # its cases' kernels build in the background on a GPU

    @abc.abstractmethod
    def run(self, ctx: LevelRun, lv: Any) -> None:
        """Run the level and fill ``lv``: its status, reasons, notes and result."""

    def lines(self, lv: Any) -> list[str]:
        """What the text and Markdown reports say of a level that ran, one line each."""
        return []

    def detail(self, lv: Any) -> dict[str, Any]:
        """What the JSON report adds to the level's entry about its result."""
        r = lv.result
        return {"detail": r.to_dict()} if r is not None and hasattr(r, "to_dict") else {}


def _take(lv: Any, r: Any) -> None:
    lv.result, lv.status, lv.reasons, lv.notes = r, r.status, list(r.reasons), list(r.notes)


class Static(GateLevel):
    key, name = "a", "static: validates, compiles for sm_90 within limits, synchronises"
    own_kernels_only = True
    needs_valid_candidate = False  # it says why the candidate does not validate

    def run(self, ctx: LevelRun, lv: Any) -> None:
        if ctx.candidate is None:
            r = StaticResult()
            try:
                KernelConfig.from_dict(ctx.data)
            except (TypeError, ValueError) as e:
                r.step("config validates", Status.FAIL, str(e))
                r.reasons.append(f"the config does not validate: {e}")
        else:
            r = run_static_level(ctx.candidate, ctx.progress)
        _take(lv, r)

    def lines(self, lv: Any) -> list[str]:
        r: Optional[StaticResult] = lv.result
        if r is None:
            return []
        out = [f"{check}: {status}" + (f" - {detail}" if detail else "") for check, status, detail in r.steps]
        out += [f"over limits: {s['kernel']} {s['over_limits']}" for s in r.specializations if s.get("over_limits")]
        if r.sync_text and lv.status == Status.FAIL:
            out += r.sync_text.splitlines()[:12]
        return out


class Correctness(GateLevel):
    key, name = "b", "correctness over seeds: campaign + targeted edges, both configs"
    builds_ahead = True

    def run(self, ctx: LevelRun, lv: Any) -> None:
        opts = ctx.opts
        results: list[GateResult] = []
        lv.result = results
        for i, seed in enumerate(opts.seeds):
            if opts.deadline is not None and time.monotonic() > opts.deadline:
                lv.status, lv.reasons = Status.NOT_RUN, [f"out of time after {i} of {len(opts.seeds)} seeds"]
                return
            if ctx.progress is not None:
                ctx.progress(f"  (b) seed {seed}")
            g = run_gate(ctx.baseline, ctx.candidate, opts.budget, seed=seed, artifacts_dir=opts.artifacts_dir,
                         progress=ctx.progress, sut=opts.sut, work=ctx.works.get(seed),
                         readiness=None if ctx.build is None else ctx.build.readiness, candidate_sut=opts.candidate_sut)
            results.append(g)
            lv.notes += [f"seed {seed}: {n}" for n in g.notes if f"seed {seed}: {n}" not in lv.notes]
            if not g.ok:
                lv.reasons += [f"seed {seed}: {r}" for r in g.reasons]
                lv.status = Status.FAIL
                return
        lv.status = Status.PASS

    def lines(self, lv: Any) -> list[str]:
        out: list[str] = []
        for g in lv.result or ():
            out.append(f"seed {g.seed}: {'pass' if g.ok else 'FAIL'} - {g.targeted_run} of {g.targeted} targeted, "
                       f"{len(g.cases) - g.targeted_run} shared cases, {g.lookups} lookups, {g.seconds:.1f}s"
                       + (f" ({g.build_wait_s:.1f}s waiting for kernels)" if g.build_wait_s >= 0.05 else "") + "; "
                       f"max error/bound " + ", ".join(f"{k} {ratio_text(v)}" for k, v in sorted(g.cand_ratio.items())))
            for c in g.cases:
                if not c.cand.ok:
                    out.append(f"candidate fails {c.label}" + (" (the baseline fails it too)" if not c.base.ok else ""))
                    out += [ln.strip() for ln in failure_lines(c.cand)]
            for a, replay in zip(g.artifacts, g.replays):
                out += [f"artifact: {a}", f"replay: {replay}"]
        return out

    def detail(self, lv: Any) -> dict[str, Any]:
        if not lv.result:
            return {}
        return {"seeds": [{"seed": g.seed, "ok": g.ok, "targeted": g.targeted, "targeted_run": g.targeted_run,
                           "cases": len(g.cases), "lookups": g.lookups, "seconds": round(g.seconds, 2),
                           "build_wait_seconds": round(g.build_wait_s, 2),
                           "base_ratio": g.base_ratio, "cand_ratio": g.cand_ratio, "reasons": g.reasons,
                           "failing_cases": [{"label": c.label, "case": c.cand.case.to_dict(),
                                              "baseline_ok": c.base.ok} for c in g.cases if not c.cand.ok],
                           "artifacts": [str(a) for a in g.artifacts],
                           "replays": g.replays}
                          for g in lv.result]}


class Oracle(GateLevel):
    key, name = "c", "FP64 and FBGEMM CPU on the dtype and mode matrix"
    own_kernels_only = True
    builds_ahead = True

    def run(self, ctx: LevelRun, lv: Any) -> None:
        r: OracleResult = run_oracle_level(ctx.baseline, ctx.candidate, progress=ctx.progress,
                                           max_cases=ctx.opts.oracle_cases, deadline=ctx.opts.deadline)
        _take(lv, r)

    def lines(self, lv: Any) -> list[str]:
        r: Optional[OracleResult] = lv.result
        out: list[str] = []
        for c in r.cases if r is not None else ():
            out.append(f"{c.label}: {'ok' if c.ok else 'FAIL'} (max error/bound {ratio_text(c.kernel.max_ratio)}); "
                       f"FBGEMM {c.fbgemm}")
            if c.fbgemm == OracleVerdict.DISAGREES:
                out += [f"FBGEMM: {d}" for d in c.fbgemm_detail[:3]]
            if not c.ok:
                out += [ln.strip() for ln in failure_lines(c.kernel)]
        return out


class Performance(GateLevel):
    key, name = "d", "performance on a GPU, interleaved against the baseline"
    correctness = False

    def run(self, ctx: LevelRun, lv: Any) -> None:
        opts = ctx.opts
        ctx.end_build()  # nothing compiles beside the timing
        own = get_sut(opts.sut).capabilities.project_kernels
        _take(lv, run_perf(ctx.baseline, ctx.candidate, opts.shapes, opts.gamma, opts.rounds, opts.target_ms,
                           opts.deadline, ctx.progress, suts=None if own else (opts.sut, opts.candidate_address)))

    def lines(self, lv: Any) -> list[str]:
        p: Optional[PerfResult] = lv.result
        if p is None or not p.measured:
            return []
        return [f"geometric-mean speedup {p.geomean():.3f} (forward {p.geomean('forward'):.3f}, iteration "
                f"{p.geomean('iteration'):.3f}) over {len(p.measured)} measurements; gamma {p.gamma:g}; mean noise "
                f"±{100 * p.mean_noise:.1f}% (largest A/A difference per shape, {p.rounds} interleaved rounds, "
                f"A/B/A' and B/A/B' in turn, of ~{p.target_ms:g} ms each); {p.device}"]


STATIC, CORRECTNESS, ORACLE, PERFORMANCE = Static(), Correctness(), Oracle(), Performance()
ORDER: tuple[GateLevel, ...] = (STATIC, CORRECTNESS, ORACLE, PERFORMANCE)
BY_KEY = {level.key: level for level in ORDER}
