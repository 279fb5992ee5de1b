"""Self-test detector: the fused long tier's race stress run on CPU in the weak-memory mode.

With ``no_fence`` the countdown is relaxed, so no program publishes its buffered partial sums
before the last chunk's program reads the row: the mode must lose sums there, and must lose
none with the fence in place (the clean run is part of the detection, so a catch is the
fault's doing). A missing CTA barrier cannot show: the mode runs each program as one
sequential actor.
"""

from __future__ import annotations

import time
from typing import Optional

from fuzz.memcheck.race_stress import Variant, run_stress
from fuzz.memcheck.weak_memory import active, weak_memory
from tbe.backend import INTERPRETED

NAME = "weak-memory stress"
# one program per chunk: 16 runs of 8 one-lookup chunks, 4 warps, D = 8 (about 2 s a trial on CPU)
CPU_VARIANT = Variant(chunk_size=1, chunks_per_run=8, num_warps=4, dim=8, gather=1)
CPU_ROWS = 16


def lost_sums(fault: Optional[str], trials: int, seed: int) -> tuple[int, int, float]:
    """(lost runs, runs, seconds) of the CPU stress under the weak-memory mode."""
    faults = (fault,) if fault else ()
    if active() is not None:  # already on (TBE_WEAK_MEMORY=1): use it as it is
        r = run_stress(CPU_VARIANT, faults, trials=trials, rows=CPU_ROWS, seed=seed, stop_at_first=True)
    else:
        with weak_memory(seed=seed):
            r = run_stress(CPU_VARIANT, faults, trials=trials, rows=CPU_ROWS, seed=seed, stop_at_first=True)
    return r.lost_runs, r.runs, r.seconds_to_catch if r.seconds_to_catch is not None else r.seconds


def _skip(fault: str) -> Optional[str]:
    if not INTERPRETED:
        return "the weak-memory mode runs in Triton's interpreter only (the GPU runs the race stress instead)"
    if fault == "no_barrier":
        return ("the weak-memory mode runs each program as one sequential actor, so a missing barrier between "
                "the threads of one program cannot show there")
    return None


def _run(fault: str, ctx):
    from fuzz.selftest.detectors import CAUGHT, MISSED, Detection

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
    from fuzz.selftest.detectors import Detector, register

    for fault in ("no_fence", "no_barrier"):
        register(fault, Detector(NAME, _run, _skip))


register_detectors()
