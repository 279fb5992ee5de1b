"""Stores of fp32 results into the weights' dtype: round to nearest even, or stochastically.

Triton's interpreter converts fp32 to bf16 by truncation (triton 3.9.0, with or without
``fp_downcast_rounding="rtne"``) while compiled kernels round to nearest even. Kernels
cast through ``to_storage`` so both backends store the same bits.

Stochastic rounding (``KernelConfig.stochastic_rounding``, fp16 and bf16 weights) stores one of the
two neighbours of ``x`` in the weights' dtype, the one farther from zero with probability equal to
``x``'s fractional distance between them, so the store is unbiased in expectation. Each element draws
one Philox value from the step's seed and its own counter (row's linear index, column), so a step
replays bit for bit given its seed.
"""

import triton
import triton.language as tl

from tbe.faults import FAULT_BIASED_SR

NEAREST = tl.constexpr(0)     # ``ROUNDING`` of a launch: round to nearest even
STOCHASTIC = tl.constexpr(1)  # round to a neighbour with probability by distance
BIAS = 0.1  # the planted fault ``biased_stochastic_rounding`` rounds away from zero with this much more probability
_BIAS = tl.constexpr(BIAS)


def rounding_of(stochastic: bool, weights_dtype) -> int:
    """A launch's ``ROUNDING``: stochastic where asked for and the weights are narrower than fp32
    (an fp32 store of an fp32 result rounds nothing, so it stays as it is)."""
    import torch

    return STOCHASTIC.value if stochastic and weights_dtype in (torch.float16, torch.bfloat16) else NEAREST.value


def rounding_faults(rounding: int) -> tuple:
    """The fault bits a store under ``rounding`` reads: the biased rounding's only where it rounds stochastically,
    so the planted fault changes no other launch's specialization."""
    return (FAULT_BIASED_SR,) if rounding == STOCHASTIC.value else ()


@triton.jit
def to_storage(x, dtype: tl.constexpr):
    """Cast fp32 ``x`` to ``dtype`` rounding to nearest even (bf16 by integer rounding on the bits)."""
    if dtype == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bias = 0x7FFF + ((bits >> 16) & 1)
        rounded = ((bits + bias) >> 16).to(tl.uint16)
        rounded = tl.where(x != x, 0x7FC0, rounded).to(tl.uint16)  # keep NaN a NaN
        return rounded.to(tl.bfloat16, bitcast=True)
    else:
        return x.to(dtype)


@triton.jit
def stochastic_to_storage(x, dtype: tl.constexpr, seed, row, col, FAULTS: tl.constexpr):
    """Cast fp32 ``x`` to fp16 or bf16 ``dtype`` by stochastic rounding: the nearest value ``r`` and its
    neighbour on ``x``'s other side bracket ``x`` (both exact in fp32, as are ``|x| - |lo|`` and the power of two
    between them), and a 24-bit uniform draw picks the outer one with probability p = (|x| - |lo|) / (|hi| - |lo|)
    (exact where p has at most 24 fraction bits, always for normal results). Past the largest finite value it stays
    finite; NaN and infinities pass through. The planted fault biased_stochastic_rounding adds ``_BIAS`` to p."""
    r = to_storage(x, dtype)
    rf = r.to(tl.float32)
    ax = tl.abs(x)
    below = tl.abs(rf) < ax  # r is the inner neighbour: the other one is one step away from zero
    bits = r.to(tl.uint16, bitcast=True)
    other = tl.where(below, bits + 1, bits - 1).to(tl.uint16).to(dtype, bitcast=True)
    lo = tl.where(below, r, other)
    hi = tl.where(below, other, r)
    lo_mag = tl.abs(lo.to(tl.float32))
    p = tl.div_rn(ax - lo_mag, tl.abs(hi.to(tl.float32)) - lo_mag)
    if FAULT_BIASED_SR & FAULTS:  # planted
        p = tl.where(p > 0, tl.minimum(p + _BIAS, 1.0), p)
    counter = (row.to(tl.int64) << 32) | col.to(tl.int64)
    u = (tl.randint(seed, counter) >> 8).to(tl.float32) * (1.0 / 16777216.0)
    out = tl.where(u < p, hi, lo)
    return tl.where((rf == x) | (x != x), r, out)


@triton.jit
def round_for_storage(x, dtype: tl.constexpr, seed, row, col, ROUNDING: tl.constexpr, FAULTS: tl.constexpr):
    """``x`` in the weights' ``dtype`` by the launch's ``ROUNDING`` (``row``, ``col``: each element's counter)."""
    if ROUNDING == STOCHASTIC:
        return stochastic_to_storage(x, dtype, seed, row, col, FAULTS)
    else:
        return to_storage(x, dtype)
