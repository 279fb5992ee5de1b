"""The references over many tables at once equal each table checked alone.

The FP64 references, their bounds and the per-table weight Reports run over every table of a
batch in one pass (``oracles.elements``); a slip in a table's column, weight or row offset
would mix tables up. Each drawn multi-table batch is cut into one single-table batch per table,
and every quantity of the whole must equal, bit for bit (the CPU's index_add sums in order), the
quantity of its table alone; a lookup's per-sample-weight gradient, a dot over its D columns, within
float64's rounding of a reordered sum.
"""

from __future__ import annotations

import torch
from hypothesis import given, settings

from fuzz.profiles import examples
from oracles.bounds_backward import check_step, step_bounds, table_bounds
from oracles.checks import forward_expectation
from oracles.compare import compare, compare_segments
from oracles.elements import element_passes
from oracles.reference_backward import reference_backward
from cases import initial_weights, materialize
from strategies.specs import case_specs
from tbe.layout import TableLayout
from tbe.modes import Optimizer, Pooling

SPECS = case_specs(max_lookups=3000, max_tables=6, values=("random", "dyadic"))


def _alone(spec, t, weights, indices, offsets, psw, grad):
    """Table t's part of the batch, as a batch of that table alone."""
    lay, B = spec.layout, spec.batch_size
    off = offsets.to(torch.int64)
    lo, hi = int(off[t * B]), int(off[(t + 1) * B])
    w0, s = lay.weights_offsets[t], lay.specs[t]
    c0 = lay.col_offsets[t]
    return (TableLayout((s,)), weights[w0: w0 + s.rows * s.dim], indices[lo:hi], off[t * B: (t + 1) * B + 1] - lo,
            None if psw is None else psw[lo:hi], grad[:, c0: c0 + s.dim])


@settings(max_examples=examples(25), deadline=None)
@given(SPECS)
def test_many_tables_equal_each_table_alone(spec):
    m = materialize(spec)
    lay, B = spec.layout, spec.batch_size
    w = initial_weights(spec)
    pooling, opt = Pooling(spec.pooling), Optimizer(spec.optimizer)
    momentum = torch.rand(lay.total_rows, dtype=torch.float32)
    grad = m.grad_outputs[0] if m.grad_outputs else torch.randn(B, lay.total_dim)
    exp, bound = forward_expectation(lay, w, m.indices, m.offsets, m.per_sample_weights, B, pooling, torch.float32)
    ref = reference_backward(lay, w, momentum, m.indices, m.offsets, m.per_sample_weights, B, pooling, opt,
                             spec.learning_rate, spec.eps, grad)
    whole = {s.table: (s, tb) for s, tb in zip(ref.tables, table_bounds(ref, w.dtype))}
    for t in range(lay.num_tables):
        lay1, w1, idx1, off1, psw1, g1 = _alone(spec, t, w, m.indices, m.offsets, m.per_sample_weights, grad)
        cols = slice(lay.col_offsets[t], lay.col_offsets[t] + lay.dims[t])
        e1, b1 = forward_expectation(lay1, w1, idx1, off1, psw1, B, pooling, torch.float32)
        assert torch.equal(exp[:, cols], e1) and torch.equal(bound[:, cols], b1), f"table {t} forward"
        h0 = lay.hash_size_cumsum[t]
        r1 = reference_backward(lay1, w1, momentum[h0: h0 + lay.rows[t]], idx1, off1, psw1, B, pooling, opt,
                                spec.learning_rate, spec.eps, g1)
        if not r1.tables:
            assert t not in whole, f"table {t}: touched in the whole batch, not alone"
            continue
        (s1,), (tb1,) = r1.tables, table_bounds(r1, w.dtype)
        s, tb = whole[t]
        for name in ("rows", "seg_len", "w_old", "grad", "grad_abs", "w_new", "m_new", "exact"):
            a, b = getattr(s, name), getattr(s1, name)
            assert (a is None and b is None) or torch.equal(a, b), f"table {t} {name}"
        assert torch.equal(tb.w_bound, tb1.w_bound), f"table {t} weight bound"
        if ref.psw_grad is not None:
            # a lookup's dot over its D columns: in order where the tables' D differ, as a row sum where they share
            # one, so two float64 sums of the same D terms, within 2 gamma_D (u = 2^-53) of their sum of |terms|
            lo, D = int(m.offsets[t * B]), lay.specs[t].dim
            slack = 2 * D * 2.0 ** -53 / (1 - D * 2.0 ** -53) * r1.psw_grad_abs
            for name in ("psw_grad", "psw_grad_abs"):
                a, b = getattr(ref, name)[lo: lo + idx1.numel()], getattr(r1, name)
                assert bool(((a - b).abs() <= slack).all()), f"table {t} {name}"


@settings(max_examples=examples(25), deadline=None)
@given(SPECS)
def test_segmented_reports_and_violations_name_the_wrong_table(spec):
    """One weight pushed past its bound: the per-table comparison and check_step both name its table,
    row and column, and agree with ``compare`` on that table alone."""
    m = materialize(spec)
    lay, B = spec.layout, spec.batch_size
    w = initial_weights(spec)
    grad = m.grad_outputs[0] if m.grad_outputs else torch.randn(B, lay.total_dim)
    ref = reference_backward(lay, w, None, m.indices, m.offsets, m.per_sample_weights, B, Pooling(spec.pooling),
                             Optimizer.EXACT_SGD, spec.learning_rate, spec.eps, grad)
    if not ref.tables:
        return
    bounds = step_bounds(ref, torch.float32)
    before = w.float()
    after = before.clone()
    after[ref.rows.weight_index] = ref.rows.w_new.float()
    s = ref.tables[-1]
    i, j = s.rows.numel() - 1, s.dim - 1
    e = s.element_span[0] + i * s.dim + j
    after[ref.rows.weight_index[e]] += 4 * bounds.w_bound[e] + 1e-3
    results = compare_segments(ref.rows.w_new, after[ref.rows.weight_index], bounds.w_bound,
                               [sp.elements for sp in ref.spans])
    assert [r[0] for r in results] == [0] * (len(results) - 1) + [1]
    alone = compare("alone", s.w_new, after[ref.rows.weight_index[slice(*s.element_span)]].view(-1, s.dim),
                    bounds.w_bound[slice(*s.element_span)].view(-1, s.dim))
    assert results[-1][2] == alone.worst.sample * s.dim + alone.worst.column == i * s.dim + j
    assert results[-1][3:] == (alone.worst.expected, alone.worst.got, alone.worst.bound)
    bad = check_step(ref, lay, before, after, None, None, bounds=bounds)
    assert [v.what for v in bad] == ["weight"]
    assert bad[0].where.startswith(f"table {s.table} row {int(s.rows[i])} col {j} ")


def test_passes_of_one_d_are_the_listed_passes_without_the_lists():
    """Lookups of one D as [lookups, D] blocks (``element_passes(dims, uniform=D)``) cover the same lookups in the
    same element order as the listed passes, at every pass size: they read the same values, add into the same flat
    positions, and spread and reduce alike."""
    n, D = 11, 3
    dims = torch.full((n,), D)
    base = torch.arange(n) * 2 * D           # each lookup's first position: rows of D, a row apart
    flat = torch.arange(2 * D * n + D, dtype=torch.float64) * 0.5
    for limit in (1, 4, 9, 33, 1000):
        listed, uniform = list(element_passes(dims, None, limit)), list(element_passes(dims, D, limit))
        covered = [p.lookups for p in uniform]
        assert covered[0].start == 0 and covered[-1].stop == n
        assert all(a.stop == b.start for a, b in zip(covered, covered[1:]))
        for name, passes in (("listed", listed), ("uniform", uniform)):
            taken = torch.cat([p.take(flat, base[p.lookups]).reshape(-1) for p in passes])
            assert taken.tolist() == [flat[b + j].item() for b in base.tolist() for j in range(D)], (name, limit)
            into = torch.cat([(p.rows(base[p.lookups])[:, None] * p.width + torch.arange(p.width)).reshape(-1)
                              for p in passes])
            assert into.tolist() == [b + j for b in base.tolist() for j in range(D)], (name, limit)
            spread = torch.cat([torch.broadcast_to(p.spread(base[p.lookups]), (p.count // p.width, p.width))
                                .reshape(-1) for p in passes])
            assert spread.tolist() == [b for b in base.tolist() for _ in range(D)], (name, limit)
            sums = torch.cat([p.reduce(p.take(flat, base[p.lookups])) for p in passes])
            assert sums.tolist() == [sum(flat[b + j].item() for j in range(D)) for b in base.tolist()], (name, limit)
