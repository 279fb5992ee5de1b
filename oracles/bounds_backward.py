"""Error bounds for one backward + optimizer step, valid for any correct fp32 implementation.

Every quantity is an interval around the exact FP64 reference (``oracles/reference_backward.py``), widened by
what each operation may cost in any order or form (``oracles.elementwise``); the bound on an output is its
largest distance from the exact value. The derivation, term by term (row gradients, lr and eps, Adagrad and
SGD, the final store, the per-sample-weight gradient): docs/design/bounds.md#backward-and-the-optimizer-step.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from oracles.compare import rounded_to_infinity
from oracles.elementwise import FLUSH32, Op, sum_units, widen
from oracles.error_model import WORST, ErrorModel
from oracles.reference_backward import BackwardReference
from tbe.modes import Optimizer

F64 = torch.float64
U32 = 2.0 ** -24
ETA32 = 2.0 ** -149
UNIT = {torch.float32: (2.0 ** -24, 2.0 ** -149), torch.float16: (2.0 ** -11, 2.0 ** -25),
        torch.bfloat16: (2.0 ** -8, 2.0 ** -133)}
FP64_SLACK = 2.0 ** -45


def gamma(n: torch.Tensor | int, u: float = U32):
    return n * u / (1 - n * u)


def _mul(alo, ahi, blo, bhi):
    p = torch.stack([alo * blo, alo * bhi, ahi * blo, ahi * bhi])
    return p.min(0).values, p.max(0).values


def _scalar_iv(x: float, like: torch.Tensor):
    x32 = float(torch.tensor(x, dtype=torch.float32))
    return torch.full_like(like, min(x, x32)), torch.full_like(like, max(x, x32))


@dataclasses.dataclass
class TableBounds:
    table: int
    w_lo: torch.Tensor
    w_hi: torch.Tensor
    w_bound: torch.Tensor             # [U, D] max distance from the exact new weights
    m_bound: Optional[torch.Tensor]   # [U]
    exact: Optional[torch.Tensor] = None  # [U, D] the row gradient's accumulation is exact


@dataclasses.dataclass
class StepBounds:
    """The bounds of every touched row at once, flat like ``reference_backward.StepRows``."""

    w_lo: torch.Tensor                # [N]
    w_hi: torch.Tensor
    w_bound: torch.Tensor             # [N] max distance from the exact new weights
    m_bound: Optional[torch.Tensor]   # [U]
    pre_lo: Optional[torch.Tensor] = None  # [N] the fp32 new weights before the store into the weights' dtype
    pre_hi: Optional[torch.Tensor] = None


def _term_underflow(seg_len: torch.Tensor, ref: BackwardReference) -> torch.Tensor:
    """Absolute error of a run's terms near underflow: each of a term's (at most t + 1) products
    may lose eta32 / 2, and under MEAN a fast division may flush a subnormal quotient to zero."""
    per_term = (ref.term_units + 1) * ETA32 + (FLUSH32 if ref.mean else 0.0)
    return seg_len * per_term + ETA32


def _mean_of_squares(g_lo, g_hi, row_of: torch.Tensor, dim: torch.Tensor):
    """Interval of mean_j g_j^2 over each row's D columns, g_j in [g_lo, g_hi] (elements of the rows
    ``row_of``, ``dim`` [U] each row's D): D products, D - 1 additions and one division by D, any order."""
    mag_min = torch.where((g_lo <= 0) & (g_hi >= 0), torch.zeros_like(g_lo), torch.minimum(g_lo.abs(), g_hi.abs()))
    mag_max = torch.maximum(g_lo.abs(), g_hi.abs())
    D = dim.to(F64)
    n = D - 1 + Op.MUL.units + Op.DIV.units
    row_sum = torch.zeros(dim.numel(), dtype=F64, device=dim.device)
    lo = row_sum.index_add(0, row_of, mag_min ** 2) / D * (1 - gamma(n)) - FLUSH32  # a fast division may flush
    hi = row_sum.index_add(0, row_of, mag_max ** 2) / D * (1 + gamma(n)) + (D + 1) * ETA32  # a subnormal mean
    return lo.clamp(min=0), hi


def step_bounds(ref: BackwardReference, weights_dtype: torch.dtype,
                model: Optional[ErrorModel] = None, stochastic: bool = False) -> StepBounds:
    """The interval of every touched weight (and row's momentum) a correct fp32 step may produce. ``stochastic``:
    the final store rounds stochastically, to either neighbour in the weights' dtype, so it may move a value by
    up to one unit in the last place (twice round-to-nearest's u_w |x| + eta_w); an fp32 store stays exact."""
    model = model or WORST
    u_w, eta_w = UNIT[weights_dtype]
    if stochastic:
        u_w, eta_w = 2 * u_w, 2 * eta_w
    s = ref.rows
    seg = s.seg_len.to(F64)[s.row_of]
    n = sum_units(seg, ref.term_units)
    E = model.gamma(n, U32, s.table_elements) * s.grad_abs + _term_underflow(seg, ref)
    E = torch.where(s.exact, torch.zeros_like(E), E)
    g_lo, g_hi = s.grad - E, s.grad + E
    m_bound = None
    if ref.optimizer == Optimizer.EXACT_SGD:
        lr_lo, lr_hi = _scalar_iv(ref.lr, s.grad)
        st_lo, st_hi = widen(*_mul(lr_lo, lr_hi, g_lo, g_hi), Op.MUL)
    else:
        mean_lo, mean_hi = _mean_of_squares(g_lo, g_hi, s.row_of, s.dim)
        m_lo, m_hi = widen(s.m_old + mean_lo, s.m_old + mean_hi, Op.ADD)
        m_lo = torch.maximum(m_lo, s.m_old)  # adding a non-negative mean never lowers m
        m_bound = torch.maximum(m_hi - s.m_new, s.m_new - m_lo) + FP64_SLACK * s.m_new.abs()
        r_lo, r_hi = widen(m_lo.clamp(min=0).sqrt(), m_hi.sqrt(), Op.SQRT)
        e_lo, e_hi = _scalar_iv(ref.eps, s.m_old)
        d_lo, d_hi = widen(r_lo.clamp(min=0) + e_lo, r_hi + e_hi, Op.ADD)
        d_lo = d_lo.clamp(min=0)
        l_lo, l_hi = _scalar_iv(ref.lr, s.m_old)
        rate_lo, rate_hi = widen(l_lo / d_hi, l_hi / d_lo, Op.DIV)
        st_lo, st_hi = widen(*_mul(rate_lo[s.row_of], rate_hi[s.row_of], g_lo, g_hi), Op.MUL)
    w_lo, w_hi = widen(s.w_old - st_hi, s.w_old - st_lo, Op.ADD)
    slack = FP64_SLACK * (s.w_old.abs() + st_hi.abs().nan_to_num(0) + st_lo.abs().nan_to_num(0))
    pre_lo, pre_hi = w_lo - slack, w_hi + slack
    if weights_dtype != torch.float32:
        w_lo, w_hi = widen(w_lo, w_hi, Op.STORE, u_w, eta_w, weights_dtype)
    w_bound = torch.maximum(w_hi - s.w_new, s.w_new - w_lo) + slack
    return StepBounds(w_lo, w_hi, w_bound, m_bound, pre_lo, pre_hi)


def table_bounds(ref: BackwardReference, weights_dtype: torch.dtype, model: Optional[ErrorModel] = None,
                 bounds: Optional[StepBounds] = None) -> list[TableBounds]:
    """``step_bounds`` (or ``bounds``, already computed) as per-table [U, D] views, in ``ref.tables``' order."""
    b = bounds or step_bounds(ref, weights_dtype, model)
    out = []
    for s in ref.tables:
        es, rs, shape = slice(*s.element_span), slice(*s.row_span), (-1, s.dim)
        out.append(TableBounds(s.table, b.w_lo[es].view(shape), b.w_hi[es].view(shape), b.w_bound[es].view(shape),
                               None if b.m_bound is None else b.m_bound[rs], s.exact))
    return out


def psw_grad_bound(ref: BackwardReference, psw_dtype: torch.dtype) -> torch.Tensor:
    """Per lookup: D products and D - 1 additions, plus MEAN's division before or after the dot."""
    n = ref.psw_dim.to(F64) - 1 + Op.MUL.units + (Op.DIV.units if ref.mean else 0)
    b = gamma(n) * ref.psw_grad_abs + (n + 1) * ETA32
    u, eta = UNIT[psw_dtype]
    if psw_dtype != torch.float32:
        b = b * (1 + u) + u * ref.psw_grad.abs() + eta
    return b + FP64_SLACK * ref.psw_grad_abs


@dataclasses.dataclass
class Violation:
    what: str
    where: str
    got: float
    exact: float
    bound: float

    def __str__(self) -> str:
        return f"{self.what} at {self.where}: got {self.got!r}, exact {self.exact!r}, bound {self.bound!r}"


def check_step(
    ref: BackwardReference,
    layout,
    weights_before: torch.Tensor,
    weights_after: torch.Tensor,
    momentum_after: Optional[torch.Tensor],
    psw_grad: Optional[torch.Tensor],
    psw_dtype: Optional[torch.dtype] = None,
    model: Optional[ErrorModel] = None,
    bounds: Optional[StepBounds] = None,
) -> list[Violation]:
    """Compare one step's kernel results with the reference; empty list = within bounds (one
    violation per failing table and check, at its worst entry). Also requires rows no lookup
    touched to be bit-unchanged. ``bounds``: ``step_bounds`` already computed for this step."""
    wdt = weights_after.dtype
    s = ref.rows
    dev = s.w_new.device  # the reference's device
    after = weights_after.detach().to(dev)
    before = weights_before.detach().to(dev)
    b = bounds or step_bounds(ref, wdt, model)
    bad: list[Violation] = []
    touched = torch.zeros(after.numel(), dtype=torch.bool, device=dev)
    touched[s.weight_index] = True
    got = after[s.weight_index].to(F64)
    err = (got - s.w_new).abs()
    err = torch.where(rounded_to_infinity(got, s.w_new, b.w_bound, wdt), torch.zeros_like(err), err)
    viol = ~(err <= b.w_bound)  # NaN counts as a violation
    mviol = gm = None
    if b.m_bound is not None:
        gm = momentum_after.detach().to(dev)[s.linear].to(F64)
        mviol = ~((gm - s.m_new).abs() <= b.m_bound)
    failing = set(s.table[s.row_of[viol]].tolist()) if bool(viol.any()) else set()
    mfailing = set(s.table[mviol].tolist()) if mviol is not None and bool(mviol.any()) else set()
    for sp in ref.spans:  # the failure path only: at most one of each kind per table
        es, rs = slice(*sp.elements), slice(*sp.rows)
        if sp.table in failing:
            v = viol[es]
            ratio = torch.where(v, (err[es] / b.w_bound[es]).nan_to_num(float("inf")), torch.zeros_like(err[es]))
            e = sp.elements[0] + int(torch.argmax(ratio))
            r = int(s.row_of[e])
            bad.append(Violation("weight", f"table {sp.table} row {int(s.rows[r])} col {int(s.column[e])} "
                                           f"(SL {int(s.seg_len[r])})",
                                 float(got[e]), float(s.w_new[e]), float(b.w_bound[e])))
        if sp.table in mfailing:
            r = sp.rows[0] + int(torch.nonzero(mviol[rs])[0])
            bad.append(Violation("momentum", f"table {sp.table} row {int(s.rows[r])}", float(gm[r]),
                                 float(s.m_new[r]), float(b.m_bound[r])))
    changed = (after != before) & ~touched
    if bool(changed.any()):
        k = int(torch.nonzero(changed)[0])
        bad.append(Violation("untouched weight changed", f"flat element {k}", float(after[k]), float(before[k]), 0.0))
    if ref.psw_grad is not None and psw_grad is not None:
        pb = psw_grad_bound(ref, psw_dtype or psw_grad.dtype)
        gp = psw_grad.detach().to(ref.psw_grad.device, F64)
        perr = (gp - ref.psw_grad).abs()
        pv = ~(perr <= pb)
        if bool(pv.any()):
            i = int(torch.nonzero(pv)[0])
            bad.append(Violation("psw grad", f"lookup {i}", float(gp[i]), float(ref.psw_grad[i]), float(pb[i])))
    return bad
