"""Stochastic rounding of fp16 and bf16 updates: the kernels' stores and the statistical check that judges them.

The check (``oracles.stochastic``) must pass a correct rounding over 20 seeds, catch the planted biased rounding
(``biased_stochastic_rounding``), and catch round-to-nearest where the data make it biased (updates below half a
spacing, which nearest rounding drops).
"""

from __future__ import annotations

import pytest
import torch

from cases import CaseSpec
from fuzz.judge.differential import check_case, failures
from oracles.compare import Check
from oracles.stochastic import bernstein, floor_ceil, judge
from tbe import KernelConfig, TritonTBE, faults
from tbe.backend import default_device

SR = KernelConfig(stochastic_rounding=True)


def _spec(dtype: str, seed: int, **kw) -> CaseSpec:
    # most rows of a 48 x 32 table read: over 1,000 stores a step
    base = dict(tables=((48, 32),), batch_size=24, weights_dtype=dtype, max_length=8, seed=seed,
                learning_rate=0.05)
    return CaseSpec(**{**base, **kw})


def _by_check(reports) -> dict:
    return {r.check: r for r in reports if r.check in (Check.SR_NEIGHBOURS, Check.SR_BIAS)}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_floor_and_ceil_are_the_dtype_neighbours(dtype):
    x = torch.cat([torch.randn(4000, dtype=torch.float64) * 10.0 ** torch.randint(-9, 4, (4000,)),
                   torch.tensor([0.0, 1.0, -2.0, 2.0 ** -24, 3 * 2.0 ** -26], dtype=torch.float64)])
    lo, hi = floor_ceil(x, dtype)
    assert torch.equal(lo.to(dtype).double(), lo) and torch.equal(hi.to(dtype).double(), hi)
    assert bool(((lo <= x) & (x <= hi)).all())
    inside = (hi - lo) > 0
    # nothing of the dtype lies strictly between them: nearest rounding lands on one of the two
    assert bool(((x.to(dtype).double() == lo) | (x.to(dtype).double() == hi)).all())
    assert bool(inside.any())


def test_bernstein_bound_is_sound_and_can_fail():
    """Simulated correct roundings of 200 elements, 5,000 times, pass t at a false-alarm rate of 1e-3 no
    more often than that; a bias of 0.3 (clamped) fails it."""
    g = torch.Generator().manual_seed(0)
    p = torch.rand(5000, 200, generator=g, dtype=torch.float64)
    up = (torch.rand(5000, 200, generator=g, dtype=torch.float64) < p).double()
    sums = (up - p).sum(1)
    t = bernstein(float((p * (1 - p)).sum(1).max()), alpha=1e-3)
    assert float((sums.abs() > t).double().mean()) <= 1e-3
    biased = ((torch.rand(5000, 200, generator=g, dtype=torch.float64) < (p + 0.3).clamp(max=1)).double() - p).sum(1)
    assert float((biased.abs() > t).double().mean()) > 0.5


def test_every_store_is_a_neighbour_and_replays_from_its_seed():
    m = TritonTBE([(16, 32)], weights_dtype="fp16", learning_rate=0.3, config=SR, seed=3)
    dev = default_device()
    idx, off = torch.arange(16).repeat(3).to(dev), torch.arange(0, 49, 6).to(dev)
    grad = torch.randn(8, 32, generator=torch.Generator().manual_seed(1)).to(dev)
    runs = []
    for _ in range(2):
        m.reset_weights(3)
        m.rounding_seed = 7
        w0 = m.weights.double().clone()
        m(idx, off).backward(grad)
        runs.append(m.weights.clone())
        assert m.rounding_seed == 8
    assert torch.equal(runs[0], runs[1])
    m.reset_weights(3)
    m.rounding_seed = 8
    m(idx, off).backward(grad)
    assert not torch.equal(m.weights, runs[0]), "another seed draws other roundings"
    bag = (torch.arange(48) // 6).to(dev)
    exact = w0.view(16, 32) - 0.3 * grad.double().view(8, 32)[bag].new_zeros(16, 32).index_add(0, idx, grad.double()[bag])
    lo, hi = floor_ceil(exact.flatten(), torch.float16)
    got = runs[0].double()
    assert bool(((got == lo) | (got == hi) | ((got - exact.flatten()).abs() < 1e-6)).all())


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_a_correct_rounding_passes_over_20_seeds(dtype):
    for seed in range(20):
        reports = check_case(_spec(dtype, seed), SR)
        sr = _by_check(reports)
        assert set(sr) == {Check.SR_NEIGHBOURS, Check.SR_BIAS}
        assert not failures(reports), (seed, [str(r) for r in failures(reports)])
        assert sr[Check.SR_NEIGHBOURS].num_checked > 1000
        # a correct store to the far neighbour sits exactly at its bound: a yes/no check, no ratio of 1 to print
        assert not sr[Check.SR_NEIGHBOURS].graded and sr[Check.SR_BIAS].graded


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_the_biased_rounding_is_caught_and_only_by_the_bias_check(dtype):
    with faults.allow():
        config = SR.replace(faults=("biased_stochastic_rounding",))
        # 4,096 stores: a bias of 0.1 spacings on most of them sums to about 370 against a bound of about 160
        reports = check_case(_spec(dtype, 0, tables=((64, 64),), batch_size=32), config)
    bad = {r.check for r in failures(reports)}
    assert bad == {Check.SR_BIAS}, [str(r) for r in failures(reports)]


def test_nearest_rounding_is_caught_where_it_drops_small_updates():
    """Weights of 1.5 lowered by a tenth of their spacing: nearest rounding keeps every weight, a summed error of
    +0.1 spacings per store, which the bias check sees (stochastic rounding passes it). Over a spread of fractions
    (the 20-seed cases) nearest rounding is unbiased on average: the check flags it only where the data skew it."""
    from oracles.bounds_backward import step_bounds
    from oracles.reference_backward import reference_backward
    from tbe.modes import Optimizer, Pooling

    lr, rows, dim = 1e-4, 48, 32
    dev = default_device()
    idx, off = torch.arange(rows, device=dev), torch.arange(rows + 1, device=dev)
    grad = torch.ones(rows, dim, device=dev)
    for config, unbiased in ((KernelConfig(), False), (SR, True)):
        m = TritonTBE([(rows, dim)], weights_dtype="fp16", learning_rate=lr, config=config)
        m.weights.fill_(1.5)
        ref = reference_backward(m.layout, m.weights.clone(), m.momentum.clone(), idx, off, None, rows, Pooling.SUM,
                                 Optimizer.EXACT_SGD, lr, 1e-8, grad)
        m(idx, off).backward(grad)
        b = step_bounds(ref, torch.float16, stochastic=True)
        v = judge(ref.rows.w_new, m.weights[ref.rows.weight_index], b.pre_lo, b.pre_hi, torch.float16)
        assert v.neighbours_ok and v.unbiased == unbiased, (config.stochastic_rounding, v)
