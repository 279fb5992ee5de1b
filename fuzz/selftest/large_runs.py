"""Faults that live only in very long runs, and the self-test detector that reaches them.

``drop_chunk_past_4096`` and ``zero_update_past_2p20`` act only on runs split into more
than 4,096 chunks, i.e. longer than 4,096 x chunk_size lookups (1,048,577 lookups at the
default chunk size 256). On a GPU the detector runs such a run under the default config;
under the interpreter it scales the config down to chunk_size 1, where 4,097 lookups
make 4,097 chunks and the faults' own thresholds are crossed at a cost the interpreter
can pay. The data are exact-value (``cases.dyadic``): the row gradient is exact in
fp32, so the bound is a rounding or two and one lost lookup is a mismatch. Both long
tiers run (two-kernel and fused); a tier catches a fault when its case fails with the
fault planted and passes without it.
"""

from __future__ import annotations

import time
from typing import Optional

from fuzz.selftest.detectors import CAUGHT, MISSED, Context, Detection, Detector, register
from fuzz.judge import check_case, failures
from cases import CaseSpec, HotRow
from tbe import KernelConfig
from tbe.backend import INTERPRETED
from tbe.backward_long import FAULT_CHUNK_LIMIT

FAULTS = ("drop_chunk_past_4096", "zero_update_past_2p20")
SCALED_CHUNK = 1  # the interpreter's chunk size: the smallest run past the limit is 4,097 lookups


def chunk_size(interpreted: bool = INTERPRETED) -> int:
    return SCALED_CHUNK if interpreted else KernelConfig().chunk_size


def tier_configs(chunk: int) -> dict[str, KernelConfig]:
    """The two long tiers at ``chunk``: the shipped config, or its thresholds scaled down."""
    base = KernelConfig()
    if chunk != base.chunk_size:
        base = base.replace(long_run_threshold=min(base.long_run_threshold, 8 * chunk), chunk_size=chunk)
    return {"two-kernel": base, "fused": base.replace(fused_long_tier=True)}


def large_run_spec(chunk: int, seed: int = 0, values: str = "dyadic") -> CaseSpec:
    """One run of FAULT_CHUNK_LIMIT * chunk + 1 lookups (one chunk past the limit), a few ordinary
    lookups beside it, exact SGD with a dyadic learning rate."""
    sl = FAULT_CHUNK_LIMIT * chunk + 1
    batch = 4 if chunk == SCALED_CHUNK else 512
    return CaseSpec(tables=((64, 4),), batch_size=batch, max_length=1, length_profile="fixed",
                    hot_rows=(HotRow(0, 5, sl),), learning_rate=0.5, values=values, seed=seed)


def check_tier(fault: Optional[str], tier: str, chunk: int, seed: int = 0) -> list[str]:
    """The failing Reports (as text) of the large-run case in ``tier`` with ``fault`` planted (or none)."""
    config = tier_configs(chunk)[tier]
    if fault is not None:
        config = config.replace(faults=(fault,))
    return [str(r) for r in failures(check_case(large_run_spec(chunk, seed), config))]


_CLEAN: dict[tuple[str, int, int], list[str]] = {}  # (tier, chunk, seed) -> failures without a fault


def _clean(tier: str, chunk: int, seed: int) -> list[str]:
    key = (tier, chunk, seed)
    if key not in _CLEAN:
        _CLEAN[key] = check_tier(None, tier, chunk, seed)
    return _CLEAN[key]


def _run(fault: str, ctx: Context) -> Detection:
    chunk = chunk_size()
    sl = FAULT_CHUNK_LIMIT * chunk + 1
    t0 = time.perf_counter()
    first: Optional[float] = None
    parts, caught = [], 0
    for tier in tier_configs(chunk):
        bad = check_tier(fault, tier, chunk, ctx.seed)
        if bad and first is None:
            first = time.perf_counter() - t0
        clean = _clean(tier, chunk, ctx.seed)
        if bad and not clean:
            caught += 1
            parts.append(f"{tier} tier: caught ({bad[0].split(';')[0]})")
        elif bad:
            parts.append(f"{tier} tier: fails without the fault too ({clean[0][:120]})")
        else:
            parts.append(f"{tier} tier: missed")
    total = time.perf_counter() - t0
    where = f"one run of {sl:,} lookups, chunk_size {chunk}, exact-value data"
    if caught:
        return Detection("large_run", CAUGHT, f"{where}; " + "; ".join(parts) + f"; {total:.1f}s for both tiers",
                         first, len(parts))
    return Detection("large_run", MISSED, f"{where}; " + "; ".join(parts), total, len(parts))


for _fault in FAULTS:
    register(_fault, Detector("large_run", _run))
