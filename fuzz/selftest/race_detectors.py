"""Self-test detectors of the fused long tier's race (``no_fence``, ``no_barrier``), in the order they run.

- race stress (a CUDA device): ``fuzz.memcheck.race_stress`` until a trial loses a partial sum; for
  ``no_barrier`` only the variants whose compiled code lacks the barrier, else the fault is masked.
- static sync check (any machine with Triton's NVIDIA backend): ``fuzz.memcheck.sync_check`` reads the
  sm_90 PTX of the clean and the faulty config.
- weak-memory stress (the interpreter): with ``no_fence`` the countdown is relaxed, so no program
  publishes its buffered partial sums before the last chunk's program reads the row: the mode must lose
  sums there, and must lose none with the fence in place (the clean run is part of the detection, so a
  catch is the fault's doing). A missing CTA barrier cannot show: the mode runs each program as one
  sequential actor.
"""

from __future__ import annotations

import time
from typing import Optional

from fuzz.memcheck import VARIANTS, Variant, barrier_gap, catch, run_stress
from fuzz.memcheck import check_config
from fuzz.memcheck import weak_memory as wm
from fuzz.selftest.detectors import CAUGHT, MASKED, MISSED, SKIPPED, Context, Detection, Detector, register
from tbe import KernelConfig
from tbe.backend import INTERPRETED


# ----------------------------------------------------------------------------- race stress (GPU)
def _stress_skip(fault: str) -> Optional[str]:
    if INTERPRETED:
        return ("needs a CUDA device: the interpreter runs programs one after another, so no partial sum is "
                "ever lost there (the weak-memory mode models that race on CPU)")
    return None


def _stress_run(fault: str, ctx: Context) -> Detection:
    t0 = time.perf_counter()
    variants = VARIANTS
    if fault == "no_barrier":  # only where the compiled code really lacks the barrier
        variants = [v for v in VARIANTS if barrier_gap(v)[0]]
        if not variants:
            return Detection("race stress", MASKED, "the static check finds a barrier before the countdown in the "
                             "compiled kernel of every stress variant", time.perf_counter() - t0, 0)
    results = catch(fault, seconds=min(ctx.budget.seconds, 120.0), variants=variants)
    spent = time.perf_counter() - t0
    trials = sum(r.trials for r in results)
    runs = sum(r.runs for r in results)
    hit = next((r for r in results if r.lost_runs), None)
    if hit is None:
        return Detection("race stress", MISSED, f"no lost sum in {runs} runs over {len(results)} variant(s)",
                         spent, trials)
    before = sum(r.seconds for r in results[:-1])
    return Detection("race stress", CAUGHT, f"{hit.lost_runs} of {hit.rows} runs lost a sum in trial "
                     f"{hit.trials_to_catch} ({hit.variant.label})", before + hit.seconds_to_catch, trials)


# ----------------------------------------------------------------------------- static sync check (sm_90 PTX)
def _sync_skip(fault: str) -> Optional[str]:
    try:
        import triton.backends.nvidia  # noqa: F401
    except ImportError:
        return "this Triton has no NVIDIA backend to compile the PTX with"
    return None


def _sync_run(fault: str, ctx: Context) -> Detection:
    base = KernelConfig(fused_long_tier=True)
    clean = check_config(base)
    report = check_config(base.replace(faults=(fault,)))
    seconds = clean.seconds + report.seconds
    if report.errors or clean.errors:
        return Detection("static sync check", SKIPPED, "; ".join((report.errors + clean.errors)[:2]), seconds)
    if not clean.ok:
        return Detection("static sync check", MISSED, "the clean config fails too, so a failure proves nothing: "
                         + clean.problems[0][1], seconds)
    if report.problems:
        bad = {lc.key() for lc, _ in report.problems}
        return Detection("static sync check", CAUGHT, f"{len(bad)} of {len(report.checked)} sm_90 specializations "
                         f"(triton {report.triton}): {report.problems[0][1]}", seconds, len(report.checked))
    own = report.compiler_barriers()
    why = (f"a bar.sync carrying the countdown's own source line, i.e. emitted by the compiler with the atomic, "
           f"e.g. {own[0]}; " if own else "")
    return Detection("static sync check", MASKED, f"the compiled code keeps the synchronisation in all "
                     f"{len(report.checked)} sm_90 specializations (triton {report.triton}): {why}relied on: "
                     + "; ".join(report.evidence()[:3]), seconds, len(report.checked))


# ----------------------------------------------------------------------------- weak-memory stress (CPU)
NAME = "weak-memory stress"
# one program per chunk: 16 runs of 8 one-lookup chunks, 4 warps, D = 8 (about 2 s a trial on CPU)
CPU_VARIANT = Variant(chunk_size=1, chunks_per_run=8, num_warps=4, dim=8, gather=1)
CPU_ROWS = 16


def lost_sums(fault: Optional[str], trials: int, seed: int) -> tuple[int, int, float]:
    """(lost runs, runs, seconds) of the CPU stress under the weak-memory mode."""
    faults = (fault,) if fault else ()
    if wm.active() is not None:  # already on (TBE_WEAK_MEMORY=1): use it as it is
        r = run_stress(CPU_VARIANT, faults, trials=trials, rows=CPU_ROWS, seed=seed, stop_at_first=True)
    else:
        with wm.weak_memory(seed=seed):
            r = run_stress(CPU_VARIANT, faults, trials=trials, rows=CPU_ROWS, seed=seed, stop_at_first=True)
    return r.lost_runs, r.runs, r.seconds_to_catch if r.seconds_to_catch is not None else r.seconds


def _weak_skip(fault: str) -> Optional[str]:
    if not INTERPRETED:
        return "the weak-memory mode runs in Triton's interpreter only (the GPU runs the race stress instead)"
    if fault == "no_barrier":
        return ("the weak-memory mode runs each program as one sequential actor, so a missing barrier between "
                "the threads of one program cannot show there")
    return None


def _weak_run(fault: str, ctx: Context) -> Detection:
    t0 = time.perf_counter()
    lost, runs, to_catch = lost_sums(fault, trials=3, seed=ctx.seed)
    if not lost:
        return Detection(NAME, MISSED, f"no lost sum in {runs} runs", time.perf_counter() - t0, runs)
    clean_lost, clean_runs, _ = lost_sums(None, trials=3, seed=ctx.seed)
    if clean_lost:
        return Detection(NAME, MISSED, f"the clean fused tier also lost {clean_lost} of {clean_runs} sums in this "
                         "mode, so the loss proves nothing", time.perf_counter() - t0, runs)
    return Detection(NAME, CAUGHT, f"{lost} of {runs} runs lost a partial sum ({CPU_VARIANT.label}); the clean "
                     f"tier lost none of {clean_runs}", to_catch, runs)


def register_detectors() -> None:
    for fault in ("no_fence", "no_barrier"):
        register(fault, Detector("race stress", _stress_run, _stress_skip))
        register(fault, Detector("static sync check", _sync_run, _sync_skip))
        register(fault, Detector(NAME, _weak_run, _weak_skip))


register_detectors()
