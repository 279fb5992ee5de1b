"""FP64 authority for one training step of the TBE backward (exact SGD / row-wise Adagrad).

Works on touched rows only: each table's distinct ids are gathered to float64, so a table
of 2^31 rows costs nothing. Returns the exact new rows, momentum and per-sample-weight
gradient, plus what an error bound needs (segment lengths, sums of |terms|, the roundings
in one term, and which row gradients every fp32 implementation accumulates exactly:
``oracles.exactness``, ``oracles.elementwise.terms_exact``).
The indices/offsets must already be bounds-checked (ids in range, offsets monotone).
It computes on the device of ``weights`` (float64 torch ops on a GPU share nothing with the
Triton kernels), so a GPU campaign never copies a batch to the host to check it.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from oracles.elementwise import term_units, terms_exact
from oracles.exactness import ExactSums
from tbe.layout import TableLayout
from tbe.modes import Optimizer, Pooling

F64 = torch.float64
_CHUNK = 1 << 20  # lookups per pass of the exactness test


@dataclasses.dataclass
class TableStep:
    """The exact step of one table's touched rows (U distinct rows, D columns)."""

    table: int
    dim: int
    rows: torch.Tensor       # [U] int64 row ids within the table, ascending
    linear: torch.Tensor     # [U] int64 linear indices (hash_size_cumsum[t] + row)
    seg_len: torch.Tensor    # [U] int64 lookups per row (SL)
    w_old: torch.Tensor      # [U, D] fp64 stored weights before the step
    grad: torch.Tensor       # [U, D] fp64 exact row gradient
    grad_abs: torch.Tensor   # [U, D] fp64 sum over the run of |coef * d_out|
    w_new: torch.Tensor      # [U, D] fp64 exact new weights
    m_old: Optional[torch.Tensor]  # [U] fp64 momentum before (row-wise Adagrad only)
    m_new: Optional[torch.Tensor]  # [U] fp64 exact new momentum
    exact: Optional[torch.Tensor] = None  # [U, D] bool: the kernel's fp32 row gradient is exact


@dataclasses.dataclass
class BackwardReference:
    tables: list[TableStep]
    psw_grad: Optional[torch.Tensor]      # [N] fp64 d loss / d per_sample_weights
    psw_grad_abs: Optional[torch.Tensor]  # [N] fp64 sum_j |d_out_j * w_j| (/ L for MEAN)
    psw_dim: torch.Tensor                 # [N] int64 D of each lookup's table
    optimizer: Optimizer
    lr: float
    eps: float
    term_units: int = 5    # roundings in one row-gradient term, any order (oracles.elementwise.term_units)
    mean: bool = False     # MEAN pooling: the per-sample-weight gradient is divided by L


def reference_backward(
    layout: TableLayout,
    weights: torch.Tensor,
    momentum: Optional[torch.Tensor],
    indices: torch.Tensor,
    offsets: torch.Tensor,
    per_sample_weights: Optional[torch.Tensor],
    batch_size: int,
    pooling: Pooling,
    optimizer: Optimizer,
    lr: float,
    eps: float,
    grad_output: torch.Tensor,
) -> BackwardReference:
    """The exact (fp64) result of one backward + optimizer step; inputs are not modified."""
    B = batch_size
    T = layout.num_tables
    dev = weights.device
    idx = indices.detach().to(dev, torch.int64)
    off = offsets.detach().to(dev, torch.int64)
    n = idx.numel()
    dout = grad_output.detach().to(dev, F64)
    w_flat = weights.detach()
    lengths = off[1:] - off[:-1]
    bag = torch.repeat_interleave(torch.arange(T * B, device=dev), lengths, output_size=n)
    table = bag // max(B, 1)
    sample = bag - table * B
    bag_len = lengths[bag].to(F64)
    coef = torch.ones(n, dtype=F64, device=dev)
    if per_sample_weights is not None:
        coef = per_sample_weights.detach().to(dev, F64).clone()
    if pooling == Pooling.MEAN:
        coef = coef / bag_len
    psw_in = per_sample_weights.detach().to(dev) if per_sample_weights is not None else None
    mean = pooling == Pooling.MEAN
    psw_grad = torch.zeros(n, dtype=F64, device=dev) if per_sample_weights is not None else None
    psw_abs = torch.zeros(n, dtype=F64, device=dev) if per_sample_weights is not None else None
    dims = torch.tensor(layout.dims, dtype=torch.int64, device=dev)
    psw_dim = dims[table] if n else torch.zeros(0, dtype=torch.int64, device=dev)
    steps = []
    for t in range(T):
        sel = torch.nonzero(table == t).flatten()
        if sel.numel() == 0:
            continue
        D = layout.dims[t]
        c0 = layout.col_offsets[t]
        ids = idx[sel]
        rows, inv = torch.unique(ids, return_inverse=True)
        w_old = w_flat[layout.weights_offsets[t] + rows[:, None] * D + torch.arange(D, device=dev)].to(F64)
        d = dout[sample[sel], c0: c0 + D]
        terms = coef[sel, None] * d
        U = rows.numel()
        grad = torch.zeros(U, D, dtype=F64, device=dev).index_add_(0, inv, terms)
        grad_abs = torch.zeros(U, D, dtype=F64, device=dev).index_add_(0, inv, terms.abs())
        seg = torch.bincount(inv, minlength=U)
        sums = ExactSums(U, D, dev)
        for c0 in range(0, sel.numel(), _CHUNK):  # in passes: the test's scratch is several [n, D] tensors
            part = sel[c0: c0 + _CHUNK]
            dp = d[c0: c0 + _CHUNK]
            ok = terms_exact(dp, None if psw_in is None else psw_in[part], bag_len[part] if mean else None)
            sums.add(coef[part, None] * dp, inv[c0: c0 + _CHUNK], ok)
        if psw_grad is not None:
            scale = 1.0 / bag_len[sel] if pooling == Pooling.MEAN else torch.ones(sel.numel(), dtype=F64, device=dev)
            prod = d * w_old[inv]
            psw_grad[sel] = prod.sum(1) * scale
            psw_abs[sel] = prod.abs().sum(1) * scale
        linear = layout.hash_size_cumsum[t] + rows
        m_old = m_new = None
        if optimizer == Optimizer.EXACT_SGD:
            w_new = w_old - lr * grad
        else:
            m_old = momentum.detach().to(dev)[linear].to(F64)
            m_new = m_old + (grad * grad).mean(1)
            w_new = w_old - (lr / (m_new.sqrt() + eps))[:, None] * grad
        steps.append(TableStep(t, D, rows, linear, seg, w_old, grad, grad_abs, w_new, m_old, m_new, sums.exact()))
    return BackwardReference(steps, psw_grad, psw_abs, psw_dim, optimizer, float(lr), float(eps),
                             term_units(per_sample_weights is not None, mean), mean)
