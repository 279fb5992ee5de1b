"""Self-test detector for faults whose kernel never returns (``tbe.faults.HANGS``).

``supervised hang`` runs one small case that reaches the hanging loop (a long run on a row narrower
than 32 columns, under a config whose long tier starts at 8 lookups) in a supervised worker: it is
caught when the supervisor ends the case as ``hang`` (under the interpreter, once one program runs past its
limit; else at the case's predicted-cost timeout) and the same
case passes with the fault off (so the time-out is the fault's doing, not a slow machine's).
"""

from __future__ import annotations

import time

from fuzz.execution import stall_for, timeout_for
from fuzz.execution import Supervisor
from fuzz.selftest.detectors import CAUGHT, MISSED, Context, Detection, Detector, register
from fuzz.status import FailureKind
from cases import CaseSpec, HotRow
from tbe import KernelConfig, faults
from tbe.backend import INTERPRETED

CASE = CaseSpec(tables=((30, 6), (5, 40)), batch_size=2, max_length=2, hot_rows=(HotRow(0, 3, 9),), seed=1)
CONFIG = {"long_run_threshold": 8, "chunk_size": 4}


def _run(fault: str, ctx: Context) -> Detection:
    sup = Supervisor()
    try:
        t0 = time.perf_counter()
        hung = sup.run(CASE, KernelConfig(faults=(fault,), **CONFIG))
        seconds = time.perf_counter() - t0
        clean = sup.run(CASE, KernelConfig(**CONFIG))
    finally:
        sup.close()
    limit = (f"one program's limit {stall_for(CASE):.0f}s, " if INTERPRETED else "") + f"timeout {timeout_for(CASE):.0f}s"
    if hung.kind != FailureKind.HANG:
        return Detection("supervised hang", MISSED, f"ended as {hung.kind}, not hang ({limit})", seconds, 1)
    if not clean.ok:
        return Detection("supervised hang", MISSED, f"the case fails without the fault too ({clean.kind}): the "
                                                    f"hang is not the fault's doing", seconds, 2)
    return Detection("supervised hang", CAUGHT, f"hang after {seconds:.0f}s ({limit}); passes without the fault",
                     seconds, 1, (2, 4, hung.lookups))


for _fault in sorted(faults.HANGS):
    register(_fault, Detector("supervised hang", _run))
