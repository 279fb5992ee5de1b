"""In-kernel optimizers: exact SGD and exact row-wise Adagrad, as @triton.jit helpers.

Both run once per distinct (table, row) on the row's finished fp32 gradient. SGD is
``w -= lr * g``. Row-wise Adagrad keeps one fp32 momentum per row (indexed by the linear
index): ``m += mean(g * g)`` over the row's D columns, then ``w -= lr * g / (sqrt(m) + eps)``.
Division and square root use the correctly rounded ``div_rn``/``sqrt_rn`` so the error
bounds in ``oracles/bounds_backward.py`` hold on the GPU (plain ``/`` and ``sqrt`` are
approximate there). New weights are rounded to nearest (even) in the weights' dtype
through ``tbe.rounding.to_storage`` (the interpreter would truncate to bf16), or with
``ROUNDING`` stochastic to a neighbour (``tbe.rounding``, the step's ``seed``). ``update_row``
is the one column loop both backward tiers use, narrow rows and rows wider than their bucket.
"""

from __future__ import annotations

import triton
import triton.language as tl

from tbe.rounding import round_for_storage


@triton.jit
def adagrad_rate(momentum_ptr, linear_idx, sq_sum, D, lr, eps):
    """Row-wise Adagrad: add mean(g*g) (``sq_sum / D``) to the row's momentum, return lr / (sqrt(m) + eps)."""
    m = tl.load(momentum_ptr + linear_idx)
    m_new = m + tl.div_rn(sq_sum, D.to(tl.float32))
    tl.store(momentum_ptr + linear_idx, m_new)
    return tl.div_rn(lr, tl.sqrt_rn(m_new) + eps)


@triton.jit
def update_columns(w_row_ptr, cols, cmask, g, rate, seed, linear_idx, d0, ROUNDING: tl.constexpr,
                   FAULTS: tl.constexpr):
    """w[cols] -= rate * g[cols] in fp32, stored rounded in the weights' dtype by ``ROUNDING`` (columns ``d0 +
    cols`` of row ``linear_idx``; SGD passes rate = lr, Adagrad the rate from ``adagrad_rate``)."""
    w = tl.load(w_row_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    w_new = w - rate * g
    tl.store(w_row_ptr + cols, round_for_storage(w_new, w_row_ptr.dtype.element_ty, seed, linear_idx, d0 + cols,
                                                 ROUNDING, FAULTS), mask=cmask)


@triton.jit
def apply_row(w_row_ptr, cols, cmask, g, momentum_ptr, linear_idx, D, lr, eps, ADAGRAD: tl.constexpr, seed,
              ROUNDING: tl.constexpr, FAULTS: tl.constexpr):
    """Update one row from its finished gradient ``g`` (one column block holds the whole row)."""
    rate = lr
    if ADAGRAD:
        rate = adagrad_rate(momentum_ptr, linear_idx, tl.sum(g * g, axis=0), D, lr, eps)
    update_columns(w_row_ptr, cols, cmask, g, rate, seed, linear_idx, 0, ROUNDING, FAULTS)


@triton.jit
def update_row(block_grad: tl.constexpr, src, flags: tl.constexpr, w_row_ptr, cols, D, momentum_ptr, linear_idx,
               lr, eps, ADAGRAD: tl.constexpr, BLOCK_D: tl.constexpr, WIDE: tl.constexpr, seed,
               ROUNDING: tl.constexpr, FAULTS: tl.constexpr):
    """Update one row whose gradient ``block_grad(src, flags, d0, cols, cmask)`` forms one column block
    (columns ``d0 + cols``) at a time: the short tier gathers it, the long tier sums workspace rows;
    ``src`` holds the source's run-time values, ``flags`` its constexprs (a constexpr passed inside a
    run-time tuple would turn into a tensor). One block, or with ``WIDE`` a loop over blocks, twice
    under Adagrad (its rate needs the whole row's sum of squares first). ``seed``, ``ROUNDING``, ``FAULTS``: the
    store's rounding (``tbe.rounding.round_for_storage``)."""
    if not WIDE:
        cmask = cols < D
        g = block_grad(src, flags, 0, cols, cmask)
        apply_row(w_row_ptr, cols, cmask, g, momentum_ptr, linear_idx, D, lr, eps, ADAGRAD, seed, ROUNDING, FAULTS)
    else:
        rate = lr
        if ADAGRAD:
            sq = 0.0
            for d0 in range(0, D, BLOCK_D):
                g = block_grad(src, flags, d0, cols, (d0 + cols) < D)
                sq += tl.sum(g * g, axis=0)
            rate = adagrad_rate(momentum_ptr, linear_idx, sq, D, lr, eps)
        for d0 in range(0, D, BLOCK_D):
            cm = (d0 + cols) < D
            g = block_grad(src, flags, d0, cols, cm)
            update_columns(w_row_ptr + d0, cols, cm, g, rate, seed, linear_idx, d0, ROUNDING, FAULTS)
