"""What one elementwise operation may cost, in any way a correct implementation computes it.

The bounds follow one step's values through intervals; this module says how far each
elementwise step may move them. u is the unit roundoff of the result's dtype (fp32: 2^-24),
eta its underflow step; "units" are multiples of u relative to the result.

- Product and sum (``Op.MUL``, ``Op.ADD``): IEEE round to nearest, alone or fused into an FMA
  with a neighbour (one rounding for two operations). Either way |fl(x) - x| <= u |x| + eta,
  and a result the dtype holds exactly comes back exactly: 1 unit, exact results kept.
- Division and square root (``Op.DIV``, ``Op.SQRT``): correctly rounded (``/``, ``div_rn``,
  ``sqrt_rn``), through a rounded reciprocal (x * fl(1/y): (1 + u)^2, about 2u), or a GPU fast
  path accurate to 2 ulp (Triton's plain ``/`` and ``sqrt``). 2 ulp <= 4u relative, since an ulp
  of x is at most 2u |x|: 4 units, and an exact result may still come back a few ulp off. A fast
  path may also flush a subnormal result to zero: eta is the smallest normal, 2^-126.
- Storing a result in a narrower dtype (``Op.STORE``): round to nearest, 1 unit of that dtype.

Chains of products and quotients (lr * g / den, psw * d_out / L) give exact * prod(1 + d_i)
whatever the association, so a chain's allowance is the sum of its operations' units: the
interval evaluation in ``oracles.bounds_backward`` may follow any one order. A sum of k terms,
each formed with t units, is within gamma(k - 1 + t) * sum |terms| (Higham, ch. 3), any order.

Exact-value data keeps its zero accumulation error: a row-gradient term is exact only if every
order of forming psw * d_out / L returns it exactly (``terms_exact``); then any summation order
of those terms is exact (``oracles.exactness``). MEAN pooling in the forward divides once,
after the sum (as this project's kernels, FBGEMM and ``F.embedding_bag`` do): ``Op.DIV``.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Optional

import torch

from oracles.exactness import fits

F64 = torch.float64
U32 = 2.0 ** -24
ETA32 = 2.0 ** -149       # the fp32 subnormal step
FLUSH32 = 2.0 ** -126     # the smallest normal fp32: a flushed subnormal result loses at most this


@dataclasses.dataclass(frozen=True)
class Allowance:
    units: int          # relative error of the result, in units u of its dtype
    keeps_exact: bool   # every allowed implementation returns a result the dtype holds exactly
    flush: bool         # an allowed implementation may flush a subnormal result to zero


class Op(enum.Enum):
    MUL = Allowance(1, True, False)
    ADD = Allowance(1, True, False)
    DIV = Allowance(4, False, True)
    SQRT = Allowance(4, False, True)
    STORE = Allowance(1, True, False)

    @property
    def units(self) -> int:
        return self.value.units


def widen(lo: torch.Tensor, hi: torch.Tensor, op: Op, u: float = U32, eta: float = ETA32,
          dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """The interval [lo, hi] after ``op`` rounds into ``dtype`` (unit roundoff ``u``, underflow step
    ``eta``). A point interval whose value ``dtype`` holds stays a point where ``op`` keeps exact results."""
    a = op.value
    rel = a.units * u
    absolute = max(eta, FLUSH32) if a.flush and dtype == torch.float32 else eta
    w_lo, w_hi = lo - rel * lo.abs() - absolute, hi + rel * hi.abs() + absolute
    if not a.keeps_exact:
        return w_lo, w_hi
    keep = (lo == hi) & fits(lo, dtype)
    return torch.where(keep, lo, w_lo), torch.where(keep, hi, w_hi)


def term_units(weighted: bool, mean: bool) -> int:
    """Units in one row-gradient (or pooled) term psw * d_out / L, any association: a product when
    weighted, a division (or reciprocal and product) under MEAN."""
    return (Op.MUL.units if weighted else 0) + (Op.DIV.units if mean else 0)


def sum_units(terms: torch.Tensor, per_term: int) -> torch.Tensor:
    """The n of gamma(n) for sums of ``terms`` terms (float64 tensor) formed with ``per_term`` units
    each: terms - 1 additions plus each term's own roundings."""
    return (terms - 1 + per_term).clamp(min=0)


def terms_exact(d: torch.Tensor, psw: Optional[torch.Tensor], lengths: Optional[torch.Tensor],
                d_fits: Optional[torch.Tensor] = None) -> torch.Tensor:
    """[n, D] bool: every order of forming psw * d / L in fp32 gives the exact term.

    ``d`` [n, D] the upstream gradient rows (float64 of fp32 values), ``psw`` [n] per-sample weights
    or None, ``lengths`` [n] each lookup's bag length under MEAN, else None; ``d_fits``, where known, is ``fits(d)``
    (a caller gathering d from fewer distinct values tests those once). The orders are
    (psw / L) * d, (d / L) * psw, (psw * d) / L, and each division as a product with fl(1/L): all
    are exact iff 1/L is an fp32 value (L a power of two) and every intermediate fits fp32 (a
    quotient also as a normal number: a fast division may flush a subnormal one)."""
    d = d.to(F64)
    ok = fits(d) if d_fits is None else d_fits
    term = d
    if psw is not None:
        p = psw.to(F64)[:, None]
        term = d * p
        ok = ok & fits(p) & fits(term)
    if lengths is not None:
        inv = 1.0 / lengths.clamp(min=1).to(F64)[:, None]
        quotients = [d * inv, term * inv] + ([psw.to(F64)[:, None] * inv] if psw is not None else [])
        for q in quotients:
            ok = ok & fits(q) & ((q == 0) | (q.abs() >= FLUSH32))
        ok = ok & fits(inv)
    return ok
