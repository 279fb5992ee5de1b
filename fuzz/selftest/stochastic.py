"""A biased stochastic rounding, and the self-test detector that gives the bias check enough stores to see it.

``biased_stochastic_rounding`` keeps every store a neighbour, so only the bias check (``oracles.stochastic``) can
catch it, and its power grows with the stores of a step: a campaign's small cases hold too few. The detector runs
one step of 4,096 fp16 and of 4,096 bf16 stores (every row of a 64 x 64 table updated); a dtype catches the fault
when its case fails the bias check with the fault planted and passes without it.
"""

from __future__ import annotations

import time

from cases import CaseSpec
from fuzz.judge import check_case, failures
from fuzz.selftest.detectors import CAUGHT, MISSED, Context, Detection, Detector, register
from oracles.compare import Check
from tbe import KernelConfig

FAULT = "biased_stochastic_rounding"


def many_stores_spec(weights_dtype: str, seed: int = 0) -> CaseSpec:
    return CaseSpec(tables=((64, 64),), batch_size=32, max_length=8, weights_dtype=weights_dtype, seed=seed)


def _bias_failures(weights_dtype: str, seed: int, faults: tuple[str, ...]) -> list[str]:
    config = KernelConfig(stochastic_rounding=True, faults=faults)
    return [str(r) for r in failures(check_case(many_stores_spec(weights_dtype, seed), config))
            if r.check == Check.SR_BIAS]


def _run(fault: str, ctx: Context) -> Detection:
    t0 = time.perf_counter()
    parts, caught, first = [], 0, None
    for dtype in ("fp16", "bf16"):
        bad = _bias_failures(dtype, ctx.seed, (fault,))
        if bad and first is None:
            first = time.perf_counter() - t0
        clean = _bias_failures(dtype, ctx.seed, ())
        caught += bool(bad and not clean)
        parts.append(f"{dtype}: " + ("caught (" + bad[0].split(";")[0] + ")" if bad and not clean else
                                     "fails without the fault too" if bad else "missed"))
    where = "one step of 4,096 stochastic stores per dtype"
    if caught:
        return Detection("many_stores", CAUGHT, f"{where}; " + "; ".join(parts), first, len(parts))
    return Detection("many_stores", MISSED, f"{where}; " + "; ".join(parts), time.perf_counter() - t0, len(parts))


register(FAULT, Detector("many_stores", _run))
