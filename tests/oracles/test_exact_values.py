"""Exact-value data (cases.dyadic) and the bounds' per-entry exactness test (oracles.exactness).

Pure oracle tests, no kernels: the dyadic strategies make every accumulation exact by
construction (checked with the oracle's own detector), the detector refuses sums that
are not exact, and with exact data one dropped lookup of a 2M-lookup run is a mismatch
while the worst-case bound on random data cannot see it.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz.profiles import examples
from oracles.bounds_backward import check_step, table_bounds
from oracles.checks import forward_expectation
from oracles.elementwise import terms_exact
from oracles.exactness import ExactSums, fits, low_exponent
from oracles.reference import forward_reference
from oracles.reference_backward import reference_backward
from cases import (D_GRID, EXACT_UNITS, W_GRID, CaseSpec, HotRow, dyadic_weights, longest_accumulation, magnitudes,
                   materialize)
from strategies.specs import case_specs
from tbe.layout import TableLayout, TableSpec
from tbe.modes import Optimizer, Pooling

F64 = torch.float64


def _sums(terms, groups):
    s = ExactSums(int(max(groups)) + 1, 1)
    s.add(torch.tensor(terms, dtype=F64)[:, None], torch.tensor(groups))
    return s.exact()[:, 0].tolist()


def test_low_exponent_and_fits():
    x = torch.tensor([1.0, 3.0, 0.75, -6.0, 2.0 ** -149, 2.0 ** 100, 0.0], dtype=F64)
    assert low_exponent(x)[:6].tolist() == [0, 0, -2, 1, -149, 100]
    assert fits(x).all() and not bool(fits(torch.tensor([1 / 3, 2.0 ** 24 + 1], dtype=F64)).any())
    assert not bool(fits(torch.tensor([1e-45 * 0.3, float("inf")], dtype=F64)).any())


def _low_exponent_by_python(v: float) -> int:
    """e with v an odd multiple of 2^e, from Python's exact float arithmetic (v != 0)."""
    e = 0
    while v != int(v):
        v, e = v * 2, e - 1
    v = int(v)
    while v % 2 == 0:
        v, e = v // 2, e + 1
    return e


def test_low_exponent_of_every_kind_of_fp32_value():
    """Normals, subnormals, both signs, against the definition worked out in Python integers."""
    g = torch.Generator().manual_seed(5)
    bits = torch.randint(-2 ** 31, 2 ** 31 - 1, (4000,), generator=g, dtype=torch.int64).to(torch.int32)
    sub = torch.randint(1, 2 ** 23, (500,), generator=g, dtype=torch.int64).to(torch.int32)  # subnormals
    x = torch.cat([bits, sub, -sub]).view(torch.float32).double()
    x = x[torch.isfinite(x) & (x != 0)]
    assert low_exponent(x).tolist() == [_low_exponent_by_python(v) for v in x.tolist()]


def test_exact_sums_trust_the_callers_word_on_fp32_terms():
    """``term_ok`` stands in for the fp32 test (and a 1-D one covers the lookup's row); ``fp32`` drops the test,
    yet a NaN or an infinity still leaves its entry inexact."""
    s = ExactSums(3, 2)
    terms = torch.tensor([[1.0, 0.5], [1 / 3, 2.0], [4.0, 8.0]], dtype=F64)
    s.add(terms, torch.tensor([0, 1, 2]), torch.tensor([True, True, False]))
    assert s.exact().tolist() == [[True, True], [True, True], [False, False]]  # 1/3 trusted, row 2 refused
    s = ExactSums(3, 1)
    s.add(torch.tensor([[1.0], [float("nan")], [float("inf")]], dtype=F64), torch.tensor([0, 1, 2]), fp32=True)
    assert s.exact()[:, 0].tolist() == [True, False, False]


def test_forward_reference_tests_the_kernels_fp32_terms_and_keeps_the_exact_magnitude():
    """Per-sample weights fp32 cannot hold (float64): the magnitude is of the exact terms, the exactness of the
    kernel's, whose weight 1 + 2^-40 rounds to 1 in fp32, so its sum 1 + 1.5 is exact (the exact terms' is not)."""
    layout = TableLayout((TableSpec(2, 1),))
    w = torch.tensor([1.0, 3.0])
    idx, off = torch.tensor([0, 1, 1]), torch.tensor([0, 2, 3])
    psw = torch.tensor([1 + 2.0 ** -40, 0.5, 0.5], dtype=F64)
    ref = forward_reference(layout, w, idx, off, psw, 2, Pooling.SUM)
    assert ref.out[:, 0].tolist() == [1 + 2.0 ** -40 + 1.5, 1.5]
    assert ref.magnitude[:, 0].tolist() == [1 + 2.0 ** -40 + 1.5, 1.5]
    assert ref.exact[:, 0].tolist() == [True, True]
    fp32 = forward_reference(layout, w, idx, off, psw.float(), 2, Pooling.MEAN)
    assert fp32.exact[:, 0].tolist() == [True, True] and fp32.magnitude[:, 0].tolist() == [1.25, 1.5]


def test_exact_sums_stop_at_2_to_24_grid_units():
    assert _sums([2.0 ** 23, 2.0 ** 23 - 1], [0, 0]) == [True]        # 2^24 - 1 units of 1
    assert _sums([2.0 ** 23, 2.0 ** 23], [0, 0]) == [True]            # 2 units of 2^23
    assert _sums([2.0 ** 23 + 1, 2.0 ** 23, 1.0], [0, 0, 0]) == [False]  # 2^24 + 2 units: 2^24 + 1 rounds
    assert _sums([2.0 ** 23, 0.5], [0, 0]) == [False]                 # 2^24 + 1 units of 1/2
    assert _sums([0.25, -0.75, 3.0, 0.0], [0, 0, 0, 1]) == [True, True]  # a zero-only entry is exact
    assert _sums([1.0, 1 / 3], [0, 0]) == [False]                     # a term fp32 cannot hold


def test_a_term_is_exact_only_if_every_order_of_forming_it_is():
    """psw * d / L: (psw / L) * d is exact for psw = 6, L = 3, but (d / L) * psw and d * fl(1/3) * psw
    are not, so only power-of-two bag lengths keep a MEAN term exact; SUM needs psw * d to fit."""
    d = torch.tensor([[0.5], [0.5], [0.5], [0.375], [3.0]], dtype=F64)
    psw = torch.tensor([6.0, 4.0, 1.0, -12.0, 1 + 2.0 ** -23])
    L = torch.tensor([3, 4, 1, 8, 1])
    assert terms_exact(d, psw, L)[:, 0].tolist() == [False, True, True, True, False]
    assert terms_exact(d, None, L)[:, 0].tolist() == [False, True, True, True, True]
    assert terms_exact(d, psw, None)[:, 0].tolist() == [True, True, True, True, False]
    tiny = torch.tensor([[2.0 ** -149]], dtype=F64)  # d / 2 underflows below the subnormal step
    assert not terms_exact(tiny, None, torch.tensor([2]))[0, 0] and terms_exact(tiny, None, None)[0, 0]
    small = torch.tensor([[2.0 ** -120]], dtype=F64)  # / 2^8 is an fp32 subnormal that a fast division may flush
    assert terms_exact(small, None, torch.tensor([4]))[0, 0] and not terms_exact(small, None, torch.tensor([256]))[0, 0]


def _reference(spec: CaseSpec, weights=None):
    case = materialize(spec)
    layout = spec.layout
    w = dyadic_weights(spec, spec.seed).float() if weights is None else weights
    m = torch.zeros(layout.total_rows)
    ref = reference_backward(layout, w, m, case.indices, case.offsets, case.per_sample_weights, spec.batch_size,
                             spec.pooling, spec.optimizer, spec.learning_rate, spec.eps,
                             case.grad_outputs[0])
    return case, w, ref


@settings(max_examples=examples(30))
@given(case_specs(max_lookups=3000, values=("dyadic",), hot_row_counts=st.integers(1, 1500)))
def test_dyadic_cases_are_exact_by_construction(spec):
    """Every SUM row gradient is exact, and every MEAN row gradient whose lookups all come from
    power-of-two bags (only then is every order of psw * d / L exact); every SUM-pooled forward entry
    too; the values lie on their grids and stay nonzero."""
    case, w, ref = _reference(spec)
    kd, kp, kw = magnitudes(spec)
    assert longest_accumulation(spec) * kd * kp < EXACT_UNITS and longest_accumulation(spec) * kp * kw < EXACT_UNITS
    for g in case.grad_outputs if spec.batch_size else ():
        units = g.double() / D_GRID
        assert torch.equal(units, units.round()) and bool((units != 0).all()) and units.abs().max() <= kd
    assert bool((w != 0).all()) and torch.equal((w.double() / W_GRID).round(), w.double() / W_GRID)
    for s in ref.tables:
        rows = s.exact.all(1)
        if spec.pooling == "mean":
            rows = rows | ~_power_of_two_rows(spec, case, s)
        assert bool(rows.all()), spec.to_json()
    if spec.batch_size and spec.steps:
        _, bound = forward_expectation(spec.layout, w, case.indices, case.offsets, case.per_sample_weights,
                                         spec.batch_size, spec.pooling, spec.output_dtype.torch)
        if spec.pooling == "sum" and spec.output_dtype == "fp32":
            assert bool((bound <= 2.0 ** -150).all()), "an exact SUM in fp32 leaves only the underflow term"


def _power_of_two_rows(spec: CaseSpec, case, s) -> torch.Tensor:
    """[U] bool: every lookup of table step ``s``'s row comes from a bag of power-of-two length."""
    B = spec.batch_size
    lengths = (case.offsets[1:] - case.offsets[:-1]).to(torch.int64)
    per_lookup = torch.repeat_interleave(lengths, lengths)
    table = torch.repeat_interleave(torch.arange(lengths.numel()) // B, lengths)
    sel = table == s.table
    pow2 = (per_lookup[sel] & (per_lookup[sel] - 1)) == 0
    bad = torch.zeros(len(s.rows), dtype=torch.int64).index_add_(
        0, torch.searchsorted(s.rows, case.indices[sel].to(torch.int64)), (~pow2).to(torch.int64))
    return bad == 0


def test_unweighted_mean_falls_back_per_entry():
    """Bags of lengths 1 and 2 divide exactly; a row also read from a bag of 3 does not."""
    layout = TableLayout((TableSpec(4, 2),))
    idx = torch.tensor([0, 1, 1, 2, 2, 2])    # bags [0], [1, 1], [2, 2, 2]... row 2 only in the bag of 3
    off = torch.tensor([0, 1, 3, 6])
    g = torch.full((3, 2), 0.5)
    ref = reference_backward(layout, torch.ones(8), None, idx, off, None, 3, Pooling.MEAN, Optimizer.EXACT_SGD,
                             0.5, 0.0, g)
    assert ref.tables[0].exact.all(1).tolist() == [True, True, False]


def _one_lost_lookup(spec: CaseSpec):
    """check_step's violations for the fp32 result of a kernel that is right, and of one that lost
    one lookup of the hot row (both emulated: with exact data the right fp32 result is exact)."""
    layout = spec.layout
    before = torch.zeros(layout.total_elements)
    case, _, ref = _reference(spec, weights=before)
    s = ref.tables[0]
    hot = int(torch.argmax(s.seg_len))
    first = int(torch.nonzero(case.indices == s.rows[hot]).flatten()[0])
    bag = int(torch.searchsorted(case.offsets, torch.tensor(first), right=True)) - 1
    lost = case.grad_outputs[0][bag].double()
    flat = s.rows[:, None] * s.dim + torch.arange(s.dim)
    good, bad = before.clone(), before.clone()
    good[flat] = (s.w_old - spec.learning_rate * s.grad).float()
    bad[flat] = good[flat]
    bad[flat[hot]] = (s.w_old[hot] - spec.learning_rate * (s.grad[hot] - lost)).float()
    return s, check_step(ref, layout, before, good, None, None), check_step(ref, layout, before, bad, None, None)


@pytest.mark.parametrize("values", ["dyadic", "random"])
def test_one_lost_lookup_of_a_2M_run(values):
    """Exact-value data: one lost lookup of a run of 2M is a mismatch and the right answer passes;
    random data: the worst-case bound cannot see the lost lookup (why exact data exists)."""
    spec = CaseSpec(tables=((8, 4),), batch_size=64, max_length=1, length_profile="fixed",
                    hot_rows=(HotRow(0, 3, 2_000_000),), learning_rate=0.5, values=values, seed=4)
    s, right, lost = _one_lost_lookup(spec)
    if values == "dyadic":
        assert bool(s.exact.all()) and right == [] and lost and "SL 2000000" in str(lost[0]), (right, lost)
    else:
        assert not bool(s.exact[int(torch.argmax(s.seg_len))].any()) and lost == [], lost


def test_values_kind_is_saved_with_the_spec():
    spec = CaseSpec(tables=((4, 2),), batch_size=1, values="dyadic")
    assert CaseSpec.from_dict(spec.to_dict()) == spec
    old = {k: v for k, v in spec.to_dict().items() if k != "values"}  # an artifact from before the field
    assert CaseSpec.from_dict(old).values == "random"
    with pytest.raises(ValueError, match="CaseSpec.values"):
        CaseSpec(tables=((4, 2),), batch_size=1, values="integer")
