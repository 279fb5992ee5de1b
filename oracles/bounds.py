"""Error bounds derived from the computation, not fixed tolerances.

A pooled entry is a sum of L products w_i * x_i computed in fp32 in some order. With
unit roundoff u and gamma(n) = n*u / (1 - n*u), any summation order satisfies
|fl(sum) - sum| <= gamma(n) * sum |w_i x_i| with n = L - 1 additions plus one rounding
per product, plus MEAN's division after the sum (Higham, Accuracy and Stability, ch. 3-4;
what each operation may cost is ``oracles.elementwise``).
The stored result is then rounded to the output dtype: u_out * |value| more, or half the
smallest subnormal where the value underflows. Entries whose terms make the fp32 sum
exact (``oracles.exactness``) get no accumulation term; ``oracles.error_model`` offers a
probabilistic accumulation term instead of the worst case.
"""

from __future__ import annotations

from typing import Optional

import torch

from oracles.elementwise import Op, sum_units, term_units

UNIT_ROUNDOFF = {
    torch.float64: 2.0**-53,
    torch.float32: 2.0**-24,
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
}

# half the smallest positive subnormal: the absolute error of rounding a tiny value
UNDERFLOW = {
    torch.float64: 2.0**-1075,
    torch.float32: 2.0**-150,
    torch.float16: 2.0**-25,
    torch.bfloat16: 2.0**-134,
}


def unit_roundoff(dtype: torch.dtype) -> float:
    return UNIT_ROUNDOFF[dtype]


def gamma(n: torch.Tensor | float, u: float) -> torch.Tensor | float:
    """Higham's gamma_n = n u / (1 - n u); infinite when n u >= 1 (no bound exists)."""
    if isinstance(n, torch.Tensor):
        nu = n.to(torch.float64) * u
        return torch.where(nu < 1, nu / (1 - nu), torch.full_like(nu, float("inf")))
    nu = n * u
    return nu / (1 - nu) if nu < 1 else float("inf")


def pooled_bound(
    expected: torch.Tensor,
    abs_sum: torch.Tensor,
    lengths: torch.Tensor,
    mean: bool,
    output_dtype: torch.dtype,
    accumulate_dtype: torch.dtype = torch.float32,
    exact: Optional[torch.Tensor] = None,
    model=None,
    entries: Optional[int] = None,
) -> torch.Tensor:
    """Elementwise bound on |got - expected| for a pooled [B, D] block.

    ``abs_sum`` is sum |w_i x_i| (already divided by L for MEAN, like ``expected``);
    ``lengths`` is L per row of the block, or per entry ([B, D]). ``exact`` [B, D] marks entries whose fp32 sum is
    exact (``oracles.exactness``): their accumulation term is zero and only MEAN's division
    remains (``elementwise.Op.DIV``: a division within 2 ulp, so 4u relative). ``model`` (an
    ``oracles.error_model.ErrorModel``, default worst case) gives the accumulation factor
    for a check of ``entries`` entries.
    """
    u = unit_roundoff(accumulate_dtype)
    n = sum_units(lengths.to(torch.float64), term_units(True, mean))
    factor = gamma(n, u) if model is None else model.gamma(n, u, entries or expected.numel())
    acc_err = (factor[:, None] if factor.dim() == 1 else factor) * abs_sum
    if exact is not None:
        acc_err = torch.where(exact, (Op.DIV.units * u if mean else 0.0) * expected.abs(), acc_err)
    u_out = unit_roundoff(output_dtype) if output_dtype != accumulate_dtype else 0.0
    return acc_err + u_out * (expected.abs() + acc_err) + UNDERFLOW[output_dtype]


def overflow_threshold(dtype: torch.dtype) -> float:
    """Smallest magnitude that rounds to infinity in ``dtype`` (max plus half an ulp at max)."""
    fi = torch.finfo(dtype)
    return fi.max * (2 - fi.eps / 2) / (2 - fi.eps)
