"""FP64 authority for one training step of the TBE backward (exact SGD / row-wise Adagrad).

Works on touched rows only: the distinct rows of every table are gathered to float64 at once
(``oracles.elements``), so a table of 2^31 rows costs nothing and many tables cost no more
operations than one. Returns the exact new rows, momentum and per-sample-weight
gradient, plus what an error bound needs (segment lengths, sums of |terms|, the roundings
in one term, and which row gradients every fp32 implementation accumulates exactly:
``oracles.exactness``, ``oracles.elementwise.terms_exact``).
The indices/offsets must already be bounds-checked (ids in range, offsets monotone).
It computes on the device of ``weights`` (float64 torch ops on a GPU share nothing with the
Triton kernels), so a GPU campaign never copies a batch to the host to check it.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional, Sequence

import torch

from oracles.elementwise import term_units, terms_exact
from oracles.elements import element_passes, expand, layout_tensors, lookups, pass_width, uniform_dim
from oracles.exactness import ExactSums, fits
from oracles.vbe import padded_offsets, to_dense, variable_batch
from tbe.layout import TableLayout
from tbe.modes import Optimizer, Pooling

F64 = torch.float64


@dataclasses.dataclass
class TableStep:
    """The exact step of one table's touched rows (U distinct rows, D columns): views into ``StepRows``."""

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
    row_span: tuple[int, int] = (0, 0)      # its rows in ``StepRows``
    element_span: tuple[int, int] = (0, 0)  # its elements in ``StepRows``


@dataclasses.dataclass
class StepRows:
    """The exact step of every touched row of every table, flat: rows in linear-index order (so table by
    table), each row's D elements side by side. The bounds and checks run on these, once per step."""

    table: torch.Tensor      # [U] int64
    dim: torch.Tensor        # [U] int64
    rows: torch.Tensor       # [U] int64 row within its table
    linear: torch.Tensor     # [U] int64
    seg_len: torch.Tensor    # [U] int64
    row_of: torch.Tensor     # [N] int64 the row of each element
    column: torch.Tensor     # [N] int64 the element's column within its row
    weight_index: torch.Tensor  # [N] int64 the element's place in the packed weights
    w_old: torch.Tensor      # [N] fp64
    grad: torch.Tensor
    grad_abs: torch.Tensor
    w_new: torch.Tensor
    m_old: Optional[torch.Tensor]  # [U]
    m_new: Optional[torch.Tensor]
    exact: torch.Tensor      # [N] bool
    table_elements: torch.Tensor  # [N] int64: how many elements the element's table has (U_t * D_t)


@dataclasses.dataclass(frozen=True)
class TableSpan:
    """Where one touched table's rows and elements sit in ``StepRows``."""

    table: int
    dim: int
    rows: tuple[int, int]
    elements: tuple[int, int]


@dataclasses.dataclass
class BackwardReference:
    rows: StepRows                        # the step of every touched row, flat
    spans: list[TableSpan]                # the touched tables, in order
    psw_grad: Optional[torch.Tensor]      # [lookups] fp64 d loss / d per_sample_weights
    psw_grad_abs: Optional[torch.Tensor]  # [lookups] fp64 sum_j |d_out_j * w_j| (/ L for MEAN)
    psw_dim: torch.Tensor                 # [lookups] int64 D of each lookup's table
    optimizer: Optimizer
    lr: float
    eps: float
    term_units: int = 5    # roundings in one row-gradient term, any order (oracles.elementwise.term_units)
    mean: bool = False     # MEAN pooling: the per-sample-weight gradient is divided by L

    @functools.cached_property
    def tables(self) -> list[TableStep]:
        """Each touched table's slice of ``rows`` as [U, D] views, built when first asked for."""
        f = self.rows
        out = []
        for sp in self.spans:
            rs, es, shape = slice(*sp.rows), slice(*sp.elements), (-1, sp.dim)
            out.append(TableStep(
                sp.table, sp.dim, f.rows[rs], f.linear[rs], f.seg_len[rs], f.w_old[es].view(shape),
                f.grad[es].view(shape), f.grad_abs[es].view(shape), f.w_new[es].view(shape),
                None if f.m_old is None else f.m_old[rs], None if f.m_new is None else f.m_new[rs],
                f.exact[es].view(shape), sp.rows, sp.elements))
        return out


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
    batch_size_per_feature: Optional[Sequence[int]] = None,
) -> BackwardReference:
    """The exact (fp64) result of one backward + optimizer step; inputs are not modified. With
    ``batch_size_per_feature`` (VBE) ``grad_output`` is flat, in the VBE output's layout (``oracles.vbe``)."""
    vb = variable_batch(layout, batch_size_per_feature)
    if vb is not None:
        return reference_backward(layout, weights, momentum, indices, padded_offsets(vb, offsets.detach()),
                                  per_sample_weights, vb.max_batch, pooling, optimizer, lr, eps,
                                  to_dense(layout, vb, grad_output.detach()))
    B, T = batch_size, layout.num_tables  # storage is per table; the batch (at.table) per feature
    dev = weights.device
    lt = layout_tensors(layout, dev)
    idx = indices.detach().to(dev, torch.int64)
    n = idx.numel()
    dout = grad_output.detach().to(dev, F64).reshape(-1)
    w_flat = weights.detach()
    at = lookups(offsets.detach().to(dev), layout.num_features, B, n)
    bag_len = at.bag_len.to(F64)
    mean = pooling == Pooling.MEAN
    coef = None  # each lookup's factor psw / L, None where it is 1
    if per_sample_weights is not None:
        coef = per_sample_weights.detach().to(dev, F64)
    if mean:
        coef = 1.0 / bag_len if coef is None else coef / bag_len
    psw_in = per_sample_weights.detach().to(dev) if per_sample_weights is not None else None
    dims = lt.dims[at.table]
    # the touched rows, in linear-index order, and each row's elements: features of one table share its
    # linear-id base, so a row read by several features is one row here, its gradient summed over them
    linear, inv = torch.unique(lt.table_hash_size_cumsum[lt.feature_table[at.table]] + idx, return_inverse=True)
    U = linear.numel()
    table = torch.zeros(U, dtype=torch.int64, device=dev).scatter_(0, inv, lt.feature_table[at.table])
    row_dim = lt.table_dims[table]
    rows = linear - lt.table_hash_size_cumsum[table]
    row_start = torch.cumsum(row_dim, 0) - row_dim
    N = int(row_dim.sum())
    row_of, column = expand(row_dim, N)
    weight_index = (lt.table_weights_offsets[table] + rows * row_dim)[row_of] + column
    w_old = w_flat[weight_index].to(F64)
    uniform = uniform_dim(layout)
    width = pass_width(uniform)  # the passes' rows: a row's D elements, or one element
    grad = torch.zeros(N, dtype=F64, device=dev)
    sums = ExactSums(N // width, width, dev)  # its sum of |terms| is the row gradient's magnitude
    psw_grad = torch.zeros(n, dtype=F64, device=dev) if per_sample_weights is not None else None
    psw_abs = torch.zeros(n, dtype=F64, device=dev) if per_sample_weights is not None else None
    d_base = at.sample * layout.total_dim + lt.col_offsets[at.table]  # each lookup's first d_out entry
    e_base = row_start[inv]                                           # its row's first element
    d_fits = fits(dout)  # per upstream-gradient entry: each is gathered by many elements
    for p in element_passes(dims, uniform):
        lk = p.lookups
        d = p.take(dout, d_base[lk])
        terms = d if coef is None else p.spread(coef[lk]) * d
        element = p.rows(e_base[lk])
        grad.view(-1, width).index_add_(0, element, terms)
        ok = terms_exact(d, None if psw_in is None else p.per_row(psw_in[lk]),
                         p.per_row(bag_len[lk]) if mean else None, p.take(d_fits, d_base[lk]))
        sums.add(terms, element, ok)
        if psw_grad is not None:
            prod = d * w_old.view(-1, width)[element]
            psw_grad[lk] += p.reduce(prod)
            psw_abs[lk] += p.reduce(prod.abs())
    if psw_grad is not None and mean:
        psw_grad, psw_abs = psw_grad / bag_len, psw_abs / bag_len
    grad_abs = sums.abs_sum.view(-1)
    seg = torch.bincount(inv, minlength=U)
    m_old = m_new = None
    if optimizer == Optimizer.EXACT_SGD:
        w_new = w_old - lr * grad
    else:
        m_old = momentum.detach().to(dev)[linear].to(F64)
        m_new = m_old + torch.zeros(U, dtype=F64, device=dev).index_add_(0, row_of, grad * grad) / row_dim
        w_new = w_old - (lr / (m_new.sqrt() + eps))[row_of] * grad
    per_table = torch.bincount(table, minlength=T)
    elements = per_table * lt.table_dims
    flat = StepRows(table, row_dim, rows, linear, seg, row_of, column, weight_index, w_old, grad, grad_abs, w_new,
                    m_old, m_new, sums.exact().view(-1), elements[table][row_of])
    return BackwardReference(flat, _spans(layout, per_table.tolist()), psw_grad, psw_abs, dims, optimizer,
                             float(lr), float(eps), term_units(per_sample_weights is not None, mean), mean)


def _spans(layout: TableLayout, rows_per_table: list[int]) -> list[TableSpan]:
    out, r0, e0 = [], 0, 0
    for t, U in enumerate(rows_per_table):
        if U:
            D = layout.dims[t]
            out.append(TableSpan(t, D, (r0, r0 + U), (e0, e0 + U * D)))
            r0, e0 = r0 + U, e0 + U * D
    return out
