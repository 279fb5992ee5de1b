"""The comparison and its diff report: what counts as within bound, and what is named."""

import pytest
import torch

from oracles.bounds import gamma, overflow_threshold
from oracles.compare import compare
from tbe.layout import TableLayout, TableSpec


def test_overflow_threshold_is_where_rounding_reaches_infinity():
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        thr = overflow_threshold(dtype)
        below = torch.tensor(thr, dtype=torch.float64) * (1 - 1e-6)
        assert torch.isfinite(below.to(dtype)), dtype
        assert torch.isinf(torch.tensor(thr, dtype=torch.float64).to(dtype)), dtype


def test_overflow_to_infinity_of_the_right_sign_is_accepted():
    exp = torch.tensor([65530.0, -70000.0], dtype=torch.float64)
    got = exp.to(torch.float16)
    assert torch.isinf(got).all()
    assert compare("fp16 overflow", exp, got, torch.zeros(2, dtype=torch.float64)).ok


def test_infinity_far_from_overflow_or_of_wrong_sign_is_a_mismatch():
    exp = torch.tensor([60000.0, 65530.0], dtype=torch.float64)
    got = torch.tensor([float("inf"), float("-inf")], dtype=torch.float16)
    r = compare("bad inf", exp, got, torch.zeros(2, dtype=torch.float64))
    assert not r.ok and r.num_bad == 2


def test_nan_is_a_mismatch_and_report_names_table_sample_column():
    layout = TableLayout((TableSpec(4, 2), TableSpec(3, 3)))
    exp = torch.zeros(2, 5, dtype=torch.float64)
    got = torch.zeros(2, 5)
    got[1, 3] = float("nan")
    r = compare("forward", exp, got, torch.full((2, 5), 1e-6, dtype=torch.float64), layout)
    assert not r.ok
    assert (r.worst.table, r.worst.sample, r.worst.column) == (1, 1, 1)
    assert "table 1, sample 1, column 1" in str(r)


def test_bound_is_inclusive_and_gamma_grows_with_length():
    exp = torch.tensor([1.0], dtype=torch.float64)
    got = torch.tensor([1.0 + 2**-20], dtype=torch.float64)
    assert compare("edge", exp, got, torch.tensor([2**-20], dtype=torch.float64)).ok
    assert not compare("edge", exp, got, torch.tensor([2**-21], dtype=torch.float64)).ok
    assert gamma(10, 2**-24) < gamma(1000, 2**-24) < gamma(100000, 2**-24)
    assert gamma(2**24, 2**-24) == float("inf")


# ----------------------------------------------------------------------------- the same rule in the step check
def test_an_fp16_weight_that_overflows_to_its_infinity_is_right():
    """A step whose exact result leaves fp16's range rounds to an infinity of its sign: the step
    check accepts it as the forward and per-table checks do (found on the H200: a hot row of
    1,048,577 lookups, lr 0.5, fp16 weights, exact new weight -123,747.6, kernel -inf)."""
    from oracles.bounds_backward import check_step
    from oracles.reference_backward import reference_backward
    from tbe.layout import TableLayout, TableSpec
    from tbe.modes import Optimizer, Pooling

    layout = TableLayout((TableSpec(2, 2),))
    w0 = torch.tensor([1.0, -1.0, 0.5, 0.5], dtype=torch.float16)
    idx, off = torch.tensor([0, 0]), torch.tensor([0, 2])
    grad = torch.tensor([[-7.0e4, 7.0e4]])  # lr 0.5, SL 2: steps of 7e4 leave [-65504, 65504]
    ref = reference_backward(layout, w0.double(), None, idx, off, None, 1, Pooling.SUM, Optimizer.EXACT_SGD,
                             0.5, 0.0, grad)
    right = w0.clone()
    right[:2] = (ref.tables[0].w_new[0]).to(torch.float16)  # round-to-nearest: +inf, -inf
    assert right[:2].tolist() == [float("inf"), float("-inf")]
    assert check_step(ref, layout, w0, right, None, None) == []
    wrong_sign = right.clone()
    wrong_sign[0] = float("-inf")
    assert [v.what for v in check_step(ref, layout, w0, wrong_sign, None, None)] == ["weight"]
    saturated = right.clone()
    saturated[0] = 65504.0  # a kernel that clamps instead of rounding is off by more than the bound
    assert [v.what for v in check_step(ref, layout, w0, saturated, None, None)] == ["weight"]


def _one_span(expected, got, bound, a, b):
    """compare_segments' rule on one span, the plain way: a Python loop over its entries."""
    bad, worst, worst_ratio = 0, a, -1.0
    for i in range(a, b):
        e, g, bd = float(expected[i]), float(got[i]), float(bound[i])
        err = 0.0 if (e == g or (e != e and g != g)) else abs(g - e)
        err = float("inf") if err != err else err
        bad += err > bd
        r = err / bd if bd > 0 else (float("inf") if err > 0 else 0.0)
        if r > worst_ratio:
            worst, worst_ratio = i, r
    return bad, b - a, worst - a, float(expected[worst]), float(got[worst]), float(bound[worst])


@pytest.mark.parametrize("chunk", [3, 1024])
def test_compare_segments_is_each_span_compared_alone_with_ties_nans_and_spans_across_rows(monkeypatch, chunk):
    from oracles import compare as module

    monkeypatch.setattr(module, "SEGMENT_CHUNK", chunk)
    g = torch.Generator().manual_seed(4)
    n = 2600
    expected = torch.randn(n, generator=g, dtype=torch.float64)
    bound = torch.full((n,), 0.5, dtype=torch.float64)
    # errors on a coarse grid, so the largest ratio ties within and across rows of a span
    got = expected + torch.randint(0, 4, (n,), generator=g).to(torch.float64) * 0.25
    got[[7, 900, 2000]] = float("nan")
    got[1500] = float("inf")
    bound[1501] = 0.0
    cuts = [0, 1, 5, 7, 8, 700, 900, 901, 1500, 1502, 2599, n]
    spans = list(zip(cuts[:-1], cuts[1:]))
    got_segments = module.compare_segments(expected, got, bound, spans)
    same = [tuple(map(repr, r)) for r in got_segments]  # repr: a NaN equals a NaN
    assert same == [tuple(map(repr, _one_span(expected, got, bound, a, b))) for a, b in spans]
    assert sum(r[0] for r in got_segments) > 0 and any(r[2] > 0 for r in got_segments)


def test_compare_segments_refuses_spans_that_do_not_tile_the_entries():
    from oracles.compare import compare_segments

    x = torch.zeros(10, dtype=torch.float64)
    with pytest.raises(ValueError, match="tile"):
        compare_segments(x, x, x, [(0, 4), (5, 10)])
