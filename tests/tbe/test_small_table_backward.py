"""The small-table backward (counts^T @ d_out, no transpose) against the FP64 step reference, and its routing."""

from __future__ import annotations

import pytest
import torch

import tbe.backward as backward
import tbe.backward_small_table as small_table
from cases import CaseSpec
from fuzz.judge.check import run_case
from tbe import KernelConfig
from tbe.routing import FLUSH, Path, backward_paths, route
from tests.backward_helpers import build, make_batch, on, train_step
from tests.spies import spied

OPTS = ["exact_sgd", "exact_rowwise_adagrad"]
OFF = KernelConfig(small_table_backward=False)


def module(E=16, D=64, optimizer="exact_rowwise_adagrad", pooling="sum", config=None, eps=1e-3, lr=0.05):
    return build([(E, D)], optimizer, pooling, torch.float16, lr=lr, eps=eps, config=config)


def batch(E, B, lengths, seed=0, rows=None):
    """Ids of one table in bags of ``lengths``, drawn from ``rows`` (default all E rows)."""
    g = torch.Generator().manual_seed(seed)
    pool = torch.arange(E) if rows is None else torch.tensor(rows)
    ids = pool[torch.randint(0, pool.numel(), (sum(lengths),), generator=g)]
    offsets = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist())
    return ids, offsets


def routes(m, idx, off) -> set[str]:
    """The backward functions one step of ``m`` runs (the small-table one, or the transpose of the tiers)."""
    seen = set()
    with spied([(backward, "backward_small_table", lambda args: seen.add("small_table")),
                (backward, "transpose_for", lambda args: seen.add("tiers"))]):
        assert not train_step(m, idx, off, None)
    return seen


# ----------------------------------------------------------------------------- against FP64
@pytest.mark.parametrize("pooling", ["sum", "mean"])
@pytest.mark.parametrize("optimizer", OPTS)
def test_step_matches_fp64(optimizer, pooling):
    """Uneven bags (one empty, one past a tile of bags), two steps: within the step's derived bound."""
    m = module(optimizer=optimizer, pooling=pooling)
    lengths = [64, 0, 130, 1, 70, 64, 200] + [66] * 12
    idx, off = batch(16, len(lengths), lengths, seed=1)
    assert routes(m, idx, off) == {"small_table"}
    assert not train_step(m, idx, off, None, seed=2)


@pytest.mark.parametrize("optimizer", OPTS)
def test_stochastic_rounding_checked_as_a_case(optimizer):
    """Stochastic rounding's stores are checked by the campaign's own check (a neighbour of the exact value)."""
    spec = CaseSpec(tables=((16, 64),), batch_size=20, pooling="mean", weights_dtype="fp16", output_dtype="fp32",
                    length_profile="fixed", max_length=70, optimizer=optimizer, steps=2, seed=3)
    r = run_case(spec, KernelConfig(stochastic_rounding=True))
    assert r.ok, r.error or [str(x) for x in r.reports if not x.ok]
    assert Path.BWD_SMALL_TABLE.value in r.tiers


def test_more_tiles_than_programs():
    """Each count program takes several tiles of bags (the interpreter's grid is a few programs)."""
    lengths = [64 + (b % 5) for b in range(16 * 9 + 3)]
    idx, off = batch(64, len(lengths), lengths, seed=3)
    m = module(E=64, D=128)
    assert not train_step(m, idx, off, None) and not train_step(m, idx, off, None, seed=1)


def test_more_programs_than_one_apply_step(monkeypatch):
    """20 count programs: the apply kernel adds their sums over a whole step of APPLY_PARTS and a partial one."""
    monkeypatch.setattr(small_table, "PROGRAMS_PER_SM", 10)
    lengths = [64] * (16 * 20)
    idx, off = batch(16, len(lengths), lengths, seed=13)
    m = module(optimizer="exact_sgd")
    assert small_table.persistent_grid(10, 20, m.device) == 20 > small_table.APPLY_PARTS
    assert not train_step(m, idx, off, None, seed=14)


def test_bag_past_the_flush():
    """A bag of 2,049 ids on one row: its count passes through two flushes of the dot."""
    idx = torch.cat([torch.full((FLUSH + 1,), 3), torch.arange(16).repeat(4)])
    off = torch.tensor([0, FLUSH + 1, FLUSH + 1 + 64])
    assert not train_step(module(pooling="mean"), idx, off, None, seed=4)


@pytest.mark.parametrize("scale", [1e-4, 1e-8, 1e-30])
def test_tiny_gradients_keep_their_value(scale):
    """d_out far below fp16's range (TorchRec's finding 7) is an exact operand here: within the bound."""
    lengths = [64] * 32
    idx, off = batch(16, 32, lengths, seed=5)
    m = module(lr=0.01)
    assert not train_step(m, idx, off, None, seed=6, grad_scale=scale)


# ----------------------------------------------------------------------------- rows and non-finite gradients
def test_rows_no_bag_read_keep_weights_and_state():
    """Rows 8..15 are never read: with eps = 0 an update would make them 0/0; they keep every bit."""
    lengths = [64] * 20
    idx, off = batch(16, 20, lengths, seed=7, rows=list(range(8)))
    m = module(eps=0.0)
    w0, m0 = m.weights.clone().view(16, 64), m.momentum.clone()
    assert not train_step(m, idx, off, None, seed=8)
    w1 = m.weights.view(16, 64)
    assert torch.equal(w1[8:], w0[8:]) and torch.equal(m.momentum[8:], m0[8:])
    assert bool((w1[:8] != w0[:8]).any(dim=1).all()) and bool((m.momentum[:8] > 0).all())


@pytest.mark.parametrize("bad", ["inf", "nan", "both infinities"])
def test_non_finite_gradient_reaches_only_rows_its_bag_read(bad):
    """Bag 0 reads rows 0..3 only; a non-finite d_out in its column 5 makes exactly those rows' updates
    non-finite, as the tiers' step does, and every other row matches theirs (bag 1 reads row 0 too under "both
    infinities", with -inf in the same column)."""
    lengths = [64] * 20
    idx, off = batch(16, 20, lengths, seed=9, rows=list(range(4, 16)))
    idx[:64] = torch.arange(4).repeat(16)
    if bad == "both infinities":
        idx[64] = 0
    results = []
    for cfg in (KernelConfig(), OFF):
        m = module(optimizer="exact_sgd", config=cfg)
        i, o = on(m, idx, off)
        out = m(i, o)
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(10)).to(out.device)
        if bad == "both infinities":  # row 0 is read by bags 0 and 1: inf + -inf
            grad[0, 5], grad[1, 5] = float("inf"), float("-inf")
        else:
            grad[0, 5] = float(bad)
        out.backward(grad)
        results.append(m.weights.view(16, 64).float().cpu())
    ours, tiers = results
    assert torch.equal(ours.isnan(), tiers.isnan()) and torch.equal(ours.isinf(), tiers.isinf())
    nonfinite_rows = (~ours.isfinite()).any(dim=1)
    assert bool(nonfinite_rows[:4].all())
    finite = ours.isfinite() & tiers.isfinite()
    ulp = torch.finfo(torch.float16).eps * tiers.abs().clamp_min(2 ** -14)
    assert bool(((ours - tiers).abs()[finite] <= ulp[finite]).all())


# ----------------------------------------------------------------------------- routing
def test_routing_follows_the_forward():
    sl = torch.tensor([1, 70])
    assert backward_paths(route(sl, 71, KernelConfig(), Path.FWD_SMALL_TABLE)) == {Path.BWD_SMALL_TABLE}
    assert backward_paths(route(sl, 71, OFF, Path.FWD_SMALL_TABLE)) == {Path.BWD_SHORT, Path.BWD_LONG}
    assert backward_paths(route(sl, 71, KernelConfig(), Path.FWD_GENERIC)) == {Path.BWD_SHORT, Path.BWD_LONG}


def test_switch_off_and_hoisted_transpose():
    lengths = [64] * 20
    idx, off = batch(16, 20, lengths, seed=11)
    assert routes(module(config=OFF), idx, off) == {"tiers"}
    assert routes(module(config=KernelConfig(hoist_transpose=True)), idx, off) == {"small_table"}
    short = [8] * 20  # mean bag length under small_table_min_pooling: the forward gathers, the tiers run
    idx, off = batch(16, 20, short, seed=12)
    assert routes(module(), idx, off) == {"tiers"}


def test_int32_ids_reach_both_kernels_as_int64(monkeypatch):
    """An int32 batch steps within its bound, and the forward's and the step's counting kernels read its ids as
    int64 (``wide_ids``: their compare is slow on int32 ids)."""
    import tbe.forward_small_table as forward_small

    seen = []

    def spy(owner, name, at):
        kernel = getattr(owner, name)

        class Launcher:
            def __getitem__(self, grid):
                def launch(*args, **kwargs):
                    seen.append((name, args[at].dtype))
                    return kernel[grid](*args, **kwargs)
                return launch

        monkeypatch.setattr(owner, name, Launcher())

    spy(forward_small, "_small_table_kernel", 1)  # (weights, indices, ...)
    spy(small_table, "_small_table_grad_kernel", 0)  # (indices, ...)
    idx, off = batch(16, 20, [64] * 20, seed=5)
    assert not train_step(module(), idx.to(torch.int32), off.to(torch.int32), None, seed=6)
    assert {("_small_table_kernel", torch.int64), ("_small_table_grad_kernel", torch.int64)} == set(seen)
