"""Stochastic rounding judged statistically: every store one of two neighbours, the stores unbiased on average.

A correct stochastic store of the kernel's fp32 result y (within ``step_bounds``' pre-store interval [a, b] around
the exact x) is the grid neighbour above |y| with probability p(y), its fractional distance, so in units of x's
spacing g the error e = (s - x) / g has mean (y - x) / g, at most d = max(x - a, b - x) / g in size, variance at
most p(1 - p) + d (1 where [a, b] crosses a change of spacing) and |e - E e| <= 2. Stores draw independent values
(one Philox counter per element), so Bernstein's inequality gives |sum e| <= sum d + t,
t = 2L/3 + sqrt((2L/3)^2 + 2 V L), L = ln(2 / ALPHA), V = sum of the variances: a correct rounding fails it with
probability at most ALPHA / 2, however few the elements and whatever their p (no normal approximation). The same
bound holds for sum sign(x) e, the error away from zero (where a bias that follows the sign shows, which the plain
sum cancels); both are checked, ALPHA in all.
"""

from __future__ import annotations

import dataclasses
import math

import torch

F64 = torch.float64
ALPHA = 1e-6  # false-alarm probability of one bias check of a correct stochastic rounding
# (mantissa bits, smallest normal exponent, largest finite value) of the dtypes that round stochastically
GRID = {torch.float16: (10, -14, 65504.0), torch.bfloat16: (7, -126, 3.3895313892515355e38)}


def spacing(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The distance between consecutive ``dtype`` values at |x| (for a power of two, the one above it)."""
    mant, emin, _ = GRID[dtype]
    _, k = torch.frexp(x.abs())  # |x| = m 2^k, m in [0.5, 1): exponent k - 1
    e = torch.clamp(k.to(F64) - 1, min=emin)
    return torch.exp2(e - mant)


def floor_ceil(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``dtype`` values just below and just above ``x`` (both ``x`` where it holds it), exact in FP64."""
    g = spacing(x, dtype)
    return torch.floor(x / g) * g, torch.ceil(x / g) * g


@dataclasses.dataclass
class StochasticVerdict:
    """One step's stochastic stores: the neighbour check and the bias check, with what they measured."""

    checked: int                 # elements judged (finite, inside the dtype's range; the bias check: those whose
                                 # fp32 interval crosses at most one change of spacing)
    outside: int                 # stores that are no neighbour of any fp32 result the bounds allow
    worst: int                   # position of the store farthest outside, else of the largest error
    worst_exact: float           # its exact value, its store and the farthest a neighbour may lie from the value
    worst_stored: float
    worst_reach: float
    bias: float                  # sum of the rounding errors, in units of each element's spacing
    bias_away: float             # the same, each error signed away from zero
    allowance: float             # sum d + t: what a correct rounding may reach, for either sum
    variance: float              # V

    @property
    def neighbours_ok(self) -> bool:
        return self.outside == 0

    @property
    def unbiased(self) -> bool:
        return max(abs(self.bias), abs(self.bias_away)) <= self.allowance


def bernstein(variance: float, bound: float = 2.0, alpha: float = ALPHA) -> float:
    """t with P(|sum| >= t) <= alpha for independent zero-mean terms of total variance ``variance``, each at most
    ``bound`` in size."""
    L = math.log(2.0 / alpha)
    c = bound * L / 3.0
    return c + math.sqrt(c * c + 2.0 * variance * L)


def judge(exact: torch.Tensor, stored: torch.Tensor, pre_lo: torch.Tensor, pre_hi: torch.Tensor,
          dtype: torch.dtype) -> StochasticVerdict:
    """Judge stores ``stored`` of one step (FP64 of the ``dtype`` values) against the exact new weights ``exact``
    and the interval [pre_lo, pre_hi] of the fp32 results a correct step may round (module docstring)."""
    _, _, top = GRID[dtype]
    x, s = exact.to(F64), stored.to(F64)
    a, b = torch.minimum(pre_lo, x).to(F64), torch.maximum(pre_hi, x).to(F64)
    keep = torch.isfinite(a) & torch.isfinite(b) & torch.isfinite(s) & (a.abs() <= top) & (b.abs() <= top)
    x, s, a, b = x[keep], s[keep], a[keep], b[keep]
    pos = torch.nonzero(keep).flatten()
    lo, _ = floor_ceil(a, dtype)
    _, hi = floor_ceil(b, dtype)
    miss = torch.maximum(lo - s, s - hi).clamp(min=0)
    outside = int((miss > 0).sum())
    g = spacing(x, dtype)
    fl, _ = floor_ceil(x, dtype)
    p = (x - fl) / g
    d = torch.maximum(x - a, b - x) / g
    ga, gb = spacing(a, dtype), spacing(b, dtype)
    crosses = (ga != g) | (gb != g)
    var = torch.where(crosses, torch.ones_like(p), p * (1 - p) + d)
    # an interval across more than one change of spacing (an fp32 result near 0 on both sides) bounds no term
    tame = torch.maximum(ga, gb) <= 2 * torch.minimum(torch.minimum(ga, gb), g)
    e = (s - x) / g
    bias, away, V = float(e[tame].sum()), float((torch.sign(x) * e)[tame].sum()), float(var[tame].sum())
    d = d[tame]
    worst_of = miss if outside else torch.where(tame, e.abs(), torch.zeros_like(e))
    i = int(worst_of.argmax()) if worst_of.numel() else -1
    worst = int(pos[i]) if i >= 0 else -1
    reach = float(torch.maximum(x[i] - lo[i], hi[i] - x[i])) if i >= 0 else 0.0
    return StochasticVerdict(int(keep.sum()), outside, worst, float(x[i]) if i >= 0 else 0.0,
                             float(s[i]) if i >= 0 else 0.0, reach, bias, away, float(d.sum()) + bernstein(V, alpha=ALPHA / 2),
                             V)
