"""Exact fp32 accumulations, recognised per entry from the values themselves.

Terms that are each exactly representable in fp32 and all integer multiples of one power
of two 2^e, with sum |terms| < 2^24 * 2^e, have every partial sum (any order, any
grouping into tiles, chunks, workspace rows or atomics) an integer multiple of 2^e below
2^24 * 2^e in magnitude, hence exactly representable: the fp32 accumulation returns the
exact sum and its error term is zero. ``strategies.dyadic`` draws such data; nothing
here trusts a flag: each accumulated entry is tested from the terms as the kernel
computes them. Hand-made because no library offers a per-group "sum is exact" test.
"""

from __future__ import annotations

from typing import Optional

import torch

from oracles.reference import pooled_terms
from tbe.layout import TableLayout

F64 = torch.float64
EXACT_UNITS = 2.0 ** 24
_NO_BITS = 1 << 20   # "exponent" of a zero term: never the finest grid


def fits(x: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Elementwise: the float64 value ``x`` is finite and exactly representable in ``dtype``."""
    return torch.isfinite(x) & (x.to(dtype).to(F64) == x)


def low_exponent(x: torch.Tensor) -> torch.Tensor:
    """Elementwise e with x an odd multiple of 2^e (int64); a large value for zero."""
    mant, ex = torch.frexp(x.to(F64))
    m = (mant.abs() * 2.0 ** 53).to(torch.int64)  # an integer: a float64 mantissa has 53 bits
    low = (m & -m).clamp(min=1).to(F64)
    e = ex.to(torch.int64) - 53 + torch.log2(low).round().to(torch.int64)
    return torch.where(x == 0, torch.full_like(e, _NO_BITS), e)


class ExactSums:
    """Accumulates, per (group, column), what the exactness test needs; feed it terms in passes."""

    def __init__(self, groups: int, dim: int, device=None) -> None:
        self.emin = torch.full((groups, dim), _NO_BITS, dtype=torch.int64, device=device)
        self.inexact = torch.zeros((groups, dim), dtype=F64, device=device)
        self.abs_sum = torch.zeros((groups, dim), dtype=F64, device=device)

    def add(self, terms: torch.Tensor, group: torch.Tensor, term_ok: Optional[torch.Tensor] = None) -> None:
        """``terms`` [n, D] float64 as the kernel forms them (before accumulating); ``group`` [n] the
        entry row each one adds into; ``term_ok`` [n] or [n, D]: the kernel's term equals ``terms``."""
        terms = terms.to(F64)
        ok = fits(terms)
        if term_ok is not None:
            ok = ok & (term_ok if term_ok.dim() == 2 else term_ok[:, None])
        idx = group[:, None].expand_as(terms)
        self.emin.scatter_reduce_(0, idx, low_exponent(terms), "amin")
        self.inexact.index_add_(0, group, (~ok).to(F64))
        self.abs_sum.index_add_(0, group, terms.abs())

    def exact(self) -> torch.Tensor:
        """[groups, D] bool: the fp32 accumulation of every fed term is exact, in any order."""
        limit = torch.ldexp(torch.full_like(self.abs_sum, EXACT_UNITS), self.emin.clamp(max=1000))
        return (self.inexact == 0) & (self.abs_sum < limit)


def kernel_coef(psw: Optional[torch.Tensor], lengths: torch.Tensor, mean: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(coef per lookup as the kernel computes it in fp32, as float64; whether it equals the
    exact psw / L). ``lengths`` [n] int64: each lookup's bag length. MEAN divides with div_rn."""
    n, dev = lengths.numel(), lengths.device
    c = psw.to(dev, torch.float32) if psw is not None else torch.ones(n, dtype=torch.float32, device=dev)
    ok = torch.ones(n, dtype=torch.bool, device=dev)
    if mean:
        L = lengths.clamp(min=1)
        c = c / L.to(torch.float32)
        exact_c = psw.to(dev, F64) if psw is not None else torch.ones(n, dtype=F64, device=dev)
        ok = (L < 2 ** 24) & (c.to(F64) * L.to(F64) == exact_c)  # both products exact in float64
    return c.to(F64), ok


def forward_exact(
    layout: TableLayout, weights: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
    per_sample_weights: Optional[torch.Tensor], batch_size: int,
) -> torch.Tensor:
    """[B, sum D] bool: the pooled sum (before MEAN's division) of each entry is exact in fp32.
    The kernel's terms are row (converted exactly from the weights' dtype) times psw (fp32)."""
    B, dev = batch_size, weights.device
    sums = ExactSums(B * layout.total_dim, 1, dev)
    for lk, entry, terms, item in pooled_terms(layout, weights.detach(), indices, offsets.to(dev), B):
        if per_sample_weights is not None:
            terms = terms * per_sample_weights[lk].detach().to(dev, torch.float32).to(F64)[item]
        sums.add(terms[:, None], entry)
    return sums.exact().view(B, layout.total_dim)
