"""Exact fp32 accumulations, recognised per entry from the values themselves.

Terms that are each exactly representable in fp32 and all integer multiples of one power
of two 2^e, with sum |terms| < 2^24 * 2^e, have every partial sum (any order, any
grouping into tiles, chunks, workspace rows or atomics) an integer multiple of 2^e below
2^24 * 2^e in magnitude, hence exactly representable: the fp32 accumulation returns the
exact sum and its error term is zero. ``cases.dyadic`` draws such data; nothing
here trusts a flag: each accumulated entry is tested from the terms as the kernel
computes them. Hand-made because no library offers a per-group "sum is exact" test.
"""

from __future__ import annotations

from typing import Optional

import torch

F64 = torch.float64
EXACT_UNITS = 2.0 ** 24
_NO_BITS = 1 << 20     # "exponent" of a zero term: never the finest grid
_INEXACT = -(1 << 20)  # "exponent" of a term fp32 does not hold: no sum of it is exact


def fits(x: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Elementwise: the float64 value ``x`` is finite and exactly representable in ``dtype``."""
    return torch.isfinite(x) & (x.to(dtype).to(F64) == x)


def low_exponent(x: torch.Tensor) -> torch.Tensor:
    """Elementwise e with x an odd multiple of 2^e (int32), for values fp32 holds (for others it is
    unspecified); a large value for zero. Read off fp32's bits: the biased exponent, then the lowest set
    bit of the significand, found as the exponent of (m & -m), a power of two that fp32 holds."""
    bits = x.to(torch.float32).view(torch.int32)
    biased = (bits >> 23) & 0xFF
    mant = bits & 0x7FFFFF
    m = torch.where(biased > 0, mant | (1 << 23), mant)  # the significand with its implicit bit (normals)
    low_biased = ((m & -m).to(torch.float32).view(torch.int32) >> 23)  # 127 + the lowest set bit's position
    e = biased.clamp(min=1) + low_biased - (150 + 127)
    return torch.where(m == 0, _NO_BITS, e)


class ExactSums:
    """Accumulates, per (group, column), what the exactness test needs; feed it terms in passes.

    Per entry it keeps the finest grid 2^e of its terms (a term fp32 does not hold marks the entry inexact
    through an exponent no sum can meet) and sum |terms|, which callers read as ``abs_sum``: the magnitude
    term of their error bounds."""

    def __init__(self, groups: int, dim: int, device=None) -> None:
        self.emin = torch.full((groups, dim), _NO_BITS, dtype=torch.int32, device=device)
        self.abs_sum = torch.zeros((groups, dim), dtype=F64, device=device)

    def add(self, terms: torch.Tensor, group: torch.Tensor, term_ok: Optional[torch.Tensor] = None,
            fp32: bool = False) -> None:
        """``terms`` [n, D] float64 as the kernel forms them (before accumulating); ``group`` [n] the entry row each
        one adds into; ``term_ok`` [n, D] or [n]: the kernel's fp32 term equals ``terms`` (so fp32 holds them).
        Without it each term is tested, unless ``fp32``: every term is an fp32 value converted exactly (a NaN or an
        infinity still leaves its entry inexact, through the sum of |terms|)."""
        terms = terms.to(F64)
        t32 = terms.to(torch.float32)
        ok = None
        if term_ok is not None:
            ok = term_ok if term_ok.dim() == 2 else term_ok[:, None].expand_as(terms)
        elif not fp32:
            ok = t32.to(F64) == terms  # NaN fails; an infinite term makes abs_sum infinite
        e = low_exponent(t32) if ok is None else torch.where(ok, low_exponent(t32), _INEXACT)
        self.emin.scatter_reduce_(0, group[:, None].expand_as(terms), e, "amin")
        self.abs_sum.index_add_(0, group, terms.abs())

    def exact(self) -> torch.Tensor:
        """[groups, D] bool: the fp32 accumulation of every fed term is exact, in any order."""
        limit = torch.ldexp(torch.full_like(self.abs_sum, EXACT_UNITS), self.emin.clamp(-2000, 1000))
        return self.abs_sum < limit
