"""The step bounds accept every reasonable order of the elementwise steps, and still catch drift.

A correct TBE may form psw * d / L, mean(g * g) and lr * g / (sqrt(m) + eps) in any association,
through reciprocals or fused ops (``oracles.elementwise``). Each order is emulated here in fp32
torch ops, on random data and on exact-value data (bags of power-of-two and other lengths), and
must pass ``check_step``. A computation that drifts one ulp per operation, over the many
additions of a run or the ops of the optimizer, must still fail. Pure oracle tests: no kernels.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from oracles.bounds_backward import check_step
from oracles.elementwise import Op, terms_exact, widen
from oracles.reference_backward import reference_backward
from tbe.layout import TableLayout, TableSpec
from tbe.modes import Optimizer, Pooling

F32 = torch.float32
ROWS, DIM, BATCH = 6, 5, 48
TERM_ORDERS = ("coef_first", "d_over_L_first", "reciprocal", "product_first")
MEAN_ORDERS = ("sum_then_divide", "divide_each", "reciprocal_each")
RATE_ORDERS = ("rate_first", "lr_g_first", "reciprocal", "addcdiv")


def _batch(exact: bool, mean: bool, weighted: bool, seed: int):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 9, (BATCH,), generator=g)  # 1..8: powers of two and not
    off = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    n = int(off[-1])
    idx = torch.randint(0, ROWS, (n,), generator=g)  # ~n / ROWS lookups per row
    L = torch.repeat_interleave(lengths, lengths)
    if exact:
        w = torch.randint(-64, 65, (ROWS * DIM,), generator=g).to(F32) * 2.0 ** -7
        dout = torch.randint(-16, 17, (BATCH, DIM), generator=g).to(F32) * 2.0 ** -3
        psw = torch.randint(1, 5, (n,), generator=g).to(F32) * 2.0 ** -2 * (L.to(F32) if mean else 1.0)
        lr, eps = 0.5, 2.0 ** -10
    else:
        w = torch.randn(ROWS * DIM, generator=g) * 0.5
        dout = torch.randn(BATCH, DIM, generator=g)
        psw = torch.rand(n, generator=g) + 0.5
        lr, eps = 0.05, 1e-4
    m = torch.rand(ROWS, generator=g) * 0.1 if not exact else torch.zeros(ROWS)
    return w, m, idx, off, (psw if weighted else None), dout, lr, eps


def _terms(d, psw, L, mean: bool, order: str) -> torch.Tensor:
    """psw * d / L per lookup in fp32, formed in ``order``."""
    p = torch.ones(d.shape[0], dtype=F32) if psw is None else psw
    Lf = L.to(F32)[:, None]
    if not mean:
        return d * p[:, None]
    if order == "coef_first":
        return (p[:, None] / Lf) * d
    if order == "d_over_L_first":
        return (d / Lf) * p[:, None]
    if order == "reciprocal":
        return (d * (1.0 / Lf)) * p[:, None]
    return (d * p[:, None]) / Lf


def _step(w0, m0, idx, off, psw, dout, lr, eps, mean, adagrad, term_order, mean_order, rate_order, drift=None):
    """One table's backward + optimizer in fp32 torch ops, in the given orders; ``drift`` (a function of
    an fp32 tensor) models a buggy rounding applied after every accumulation step and optimizer op."""
    drift = drift or (lambda x: x)
    lengths = off[1:] - off[:-1]
    bag = torch.repeat_interleave(torch.arange(BATCH), lengths)
    L = lengths[bag]
    d = dout[bag]
    terms = _terms(d, psw, L, mean, term_order)
    rows, inv = torch.unique(idx, return_inverse=True)
    g = torch.zeros(len(rows), DIM, dtype=F32)
    for i in range(len(idx)):  # one fp32 addition per lookup, in lookup order
        g[inv[i]] = drift(g[inv[i]] + terms[i])
    flat = rows[:, None] * DIM + torch.arange(DIM)
    w = w0[flat]
    lr32 = torch.tensor(lr, dtype=F32)
    w_after, m_after = w0.clone(), m0.clone()
    if adagrad:
        if mean_order == "sum_then_divide":
            sq = (g * g).sum(1) / DIM
        elif mean_order == "divide_each":
            sq = (g * g / DIM).sum(1)
        else:
            sq = (g * g * torch.tensor(1.0 / DIM, dtype=F32)).sum(1)
        m = drift(m0[rows] + sq)
        m_after[rows] = m
        den = drift(drift(m.sqrt()) + eps)[:, None]
        if rate_order == "rate_first":
            step = drift(drift(lr32 / den) * g)
        elif rate_order == "lr_g_first":
            step = drift(drift(lr32 * g) / den)
        elif rate_order == "reciprocal":
            step = drift(drift(lr32 * g) * drift(1.0 / den))
        else:
            new = drift(torch.addcdiv(w, g, den.expand_as(g), value=-lr))
            w_after[flat] = new
            return w_after, m_after, rows
    else:
        step = drift(lr32 * g)
    w_after[flat] = drift(w - step)
    return w_after, m_after, rows


def _psw_grad(w0, idx, off, dout, mean: bool, dot_first: bool) -> torch.Tensor:
    lengths = off[1:] - off[:-1]
    bag = torch.repeat_interleave(torch.arange(BATCH), lengths)
    rows = w0.view(ROWS, DIM)[idx]
    d, L = dout[bag], lengths[bag].to(F32)
    if not mean:
        return (d * rows).sum(1)
    return (d * rows).sum(1) / L if dot_first else ((d / L[:, None]) * rows).sum(1)


def _reference(w, m, idx, off, psw, dout, lr, eps, mean, adagrad):
    layout = TableLayout((TableSpec(ROWS, DIM),))
    opt = Optimizer.EXACT_ROWWISE_ADAGRAD if adagrad else Optimizer.EXACT_SGD
    ref = reference_backward(layout, w, m, idx, off, psw, BATCH, Pooling.MEAN if mean else Pooling.SUM,
                             opt, lr, eps, dout)
    return layout, ref


def _away(ulps: int):
    """A rounding bug: the fp32 result moved ``ulps`` ulps away from zero."""
    def move(x: torch.Tensor) -> torch.Tensor:
        for _ in range(ulps):
            x = torch.nextafter(x, torch.where(x < 0, -torch.inf, torch.inf).to(x.dtype))
        return x
    return move


@pytest.mark.parametrize("exact", [False, True], ids=["random", "exact"])
@pytest.mark.parametrize("mean", [False, True], ids=["sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("adagrad", [False, True], ids=["sgd", "adagrad"])
def test_every_order_of_a_correct_step_passes(exact, mean, weighted, adagrad):
    w, m, idx, off, psw, dout, lr, eps = _batch(exact, mean, weighted, seed=3)
    layout, ref = _reference(w, m, idx, off, psw, dout, lr, eps, mean, adagrad)
    orders = itertools.product(TERM_ORDERS if mean else TERM_ORDERS[:1],
                               MEAN_ORDERS if adagrad else MEAN_ORDERS[:1],
                               RATE_ORDERS if adagrad else RATE_ORDERS[:1])
    for term_order, mean_order, rate_order in orders:
        w_after, m_after, _ = _step(w, m, idx, off, psw, dout, lr, eps, mean, adagrad,
                                    term_order, mean_order, rate_order)
        for dot_first in (True, False):
            pg = _psw_grad(w, idx, off, dout, mean, dot_first) if weighted else None
            bad = check_step(ref, layout, w, w_after, m_after if adagrad else None, pg)
            assert bad == [], (term_order, mean_order, rate_order, dot_first, [str(v) for v in bad])


def test_exact_mean_terms_fall_back_where_an_order_would_round():
    """Exact-value weighted MEAN with a bag of 3: (d / 3) * psw rounds, so those rows lose their
    exactness, while rows read only from bags of 1, 2, 4 or 8 keep it."""
    w, m, idx, off, psw, dout, lr, eps = _batch(True, True, True, seed=3)
    _, ref = _reference(w, m, idx, off, psw, dout, lr, eps, True, False)
    lengths = off[1:] - off[:-1]
    L = torch.repeat_interleave(lengths, lengths)
    pow2_rows = set(range(ROWS)) - set(idx[(L & (L - 1)) != 0].tolist())
    s = ref.tables[0]
    assert {int(r) for r, e in zip(s.rows, s.exact.all(1)) if e} == pow2_rows
    d = torch.tensor([[0.5]], dtype=torch.float64)
    assert not terms_exact(d, torch.tensor([6.0]), torch.tensor([3]))[0, 0]  # psw / L = 2 exact, d / 3 is not


@pytest.mark.parametrize("adagrad", [False, True], ids=["sgd", "adagrad"])
def test_one_ulp_per_addition_of_a_long_run_fails_on_exact_data(adagrad):
    """Exact-value data keeps the accumulation error at zero: sums biased one ulp per addition
    (about 2 * BATCH * 4.5 / ROWS = 75 lookups a row) are caught; the unbiased sum passes."""
    w, m, idx, off, psw, dout, lr, eps = _batch(True, False, True, seed=5)
    layout, ref = _reference(w, m, idx, off, psw, dout, lr, eps, False, adagrad)
    assert bool(ref.tables[0].exact.all())
    args = (w, m, idx, off, psw, dout, lr, eps, False, adagrad, "coef_first", "sum_then_divide", "rate_first")
    good, gm, _ = _step(*args)
    assert check_step(ref, layout, w, good, gm if adagrad else None, None) == []
    biased, bm, _ = _biased_accumulation(*args)
    bad = check_step(ref, layout, w, biased, bm if adagrad else None, None)
    assert bad and bad[0].what in ("weight", "momentum"), bad


def _biased_accumulation(*args):
    """``_step`` with only the row-gradient additions moved one ulp away from zero."""
    w0, m0, idx, off, psw, dout, lr, eps, mean, adagrad, *orders = args
    lengths = off[1:] - off[:-1]
    bag = torch.repeat_interleave(torch.arange(BATCH), lengths)
    terms = _terms(dout[bag], psw, lengths[bag], mean, orders[0])
    rows, inv = torch.unique(idx, return_inverse=True)
    g = torch.zeros(len(rows), DIM, dtype=F32)
    up = _away(1)
    for i in range(len(idx)):
        g[inv[i]] = up(g[inv[i]] + terms[i])
    # the optimizer as in _step, on the biased gradient: SGD only needs lr * g
    flat = rows[:, None] * DIM + torch.arange(DIM)
    w_after, m_after = w0.clone(), m0.clone()
    lr32 = torch.tensor(lr, dtype=F32)
    if adagrad:
        m = m0[rows] + (g * g).sum(1) / DIM
        m_after[rows] = m
        w_after[flat] = w0[flat] - (lr32 / (m.sqrt() + eps))[:, None] * g
    else:
        w_after[flat] = w0[flat] - lr32 * g
    return w_after, m_after, rows


@pytest.mark.parametrize("mean", [False, True], ids=["sum", "mean"])
def test_optimizer_ops_drifting_a_few_ulps_each_fail_on_random_data(mean):
    """Every accumulation step and optimizer op moved 8 ulps away from zero (16 units, past the
    4-unit allowance of the loosest op): the row-wise Adagrad result is caught; 0 ulps passes."""
    w, m, idx, off, psw, dout, lr, eps = _batch(False, mean, True, seed=7)
    layout, ref = _reference(w, m, idx, off, psw, dout, lr, eps, mean, True)
    args = (w, m, idx, off, psw, dout, lr, eps, mean, True, "d_over_L_first", "sum_then_divide", "rate_first")
    good, gm, _ = _step(*args)
    assert check_step(ref, layout, w, good, gm, None) == []
    drifted, dm, _ = _step(*args, drift=_away(8))
    bad = check_step(ref, layout, w, drifted, dm, None)
    assert {v.what for v in bad} >= {"weight"}, bad


def test_widen_keeps_exact_results_only_for_ops_that_return_them():
    x = torch.tensor([0.75], dtype=torch.float64)
    for op in (Op.MUL, Op.ADD):
        assert all(torch.equal(end, x) for end in widen(x, x, op)), op
    lo, hi = widen(x, x, Op.DIV)
    assert float(lo) < 0.75 < float(hi) and float(hi - 0.75) >= 4 * 2.0 ** -24 * 0.75  # 2 ulp of 0.75
    third = torch.tensor([1 / 3], dtype=torch.float64)  # not an fp32 value: rounding moves it
    lo, hi = widen(third, third, Op.MUL)
    assert float(lo) < 1 / 3 < float(hi)
