"""Variable batch per feature (VBE, FBGEMM's ``batch_size_per_feature_per_rank`` for one rank): our TBE in every
tier against the FP64 reference, a feature of batch 0 beside a large one, shared tables, bad ids under the
standalone and fused checks, FBGEMM's CPU TBE, and the errors that name a bad input."""

from __future__ import annotations

from typing import Optional, Sequence

import pytest
import torch

from oracles import fbgemm_cpu
from oracles.bounds_backward import check_step
from oracles.checks import check_forward
from oracles.reference import reference_forward
from oracles.reference_backward import reference_backward
from oracles.reference_bounds import reference_bounds_check
from tbe import KernelConfig, TritonTBE
from tbe.backward import check_grad_output
from tbe.bounds_check import BoundsCheckError
from tbe.forward_dispatch import choose_path
from tbe.layout import VariableBatch
from tbe.routing import Path, route
from tbe.vbe import vbe_tensors
from tests.backward_helpers import on

SPECS = [(6, 4), (5, 8), (7, 4)]
SIZES = [0, 6, 2]                          # a feature of batch 0 beside one of batch 6
LENGTHS = [9, 0, 3, 8, 10, 1, 2, 7]        # per bag: feature 1's six, then feature 2's two
SMALL = KernelConfig(long_run_threshold=8, chunk_size=4)
TIERS = {
    "default": KernelConfig(),
    "split": SMALL,
    "split_plain": SMALL.replace(bwd_long_vector=False),  # the two-kernel tier's per-gather sum
    "fused": SMALL.replace(fused_long_tier=True),
    "short_rows": SMALL.replace(bwd_short_runs_per_program=4),
    "vector": SMALL.replace(chunk_size=8, bwd_long_gather=2, bwd_long_vector=True),
    "narrow": SMALL.replace(dim_buckets=(4,)),  # rows wider than 4 loop over columns
    "hoisted": SMALL.replace(hoist_transpose=True),
    "fused_check": SMALL.replace(fused_bounds_check=True),
}


def vbe_batch(rows: Sequence[int], sizes: Sequence[int], lengths: Sequence[int], weighted: bool, seed: int = 0,
              hot: int = 1):
    """Ids per feature (``rows``: each feature's table rows), half of them the row ``hot`` so runs grow long."""
    g = torch.Generator().manual_seed(seed)
    ids, at = [], 0
    for E, size in zip(rows, sizes):
        n = sum(lengths[at:at + size])
        at += size
        x = torch.randint(0, E, (n,), generator=g)
        ids.append(torch.where(torch.rand(n, generator=g) < 0.5, torch.full_like(x, hot % E), x))
    indices = torch.cat(ids)
    offsets = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist())
    psw = (torch.rand(indices.numel(), generator=g) * 2 - 0.5) if weighted else None
    return indices, offsets, psw


def module(config: KernelConfig, optimizer: str = "exact_sgd", pooling: str = "sum", specs=SPECS,
           **kw) -> TritonTBE:
    return TritonTBE(specs, optimizer=optimizer, learning_rate=0.3, eps=1e-3, pooling=pooling, config=config, **kw)


def vbe_step(m: TritonTBE, idx, off, psw, sizes, seed: int = 0):
    """One forward (checked against the FP64 reference) and one backward; returns the step's bound violations."""
    idx, off, psw = on(m, idx, off, psw)
    w0, m0 = m.weights.detach().clone(), m.momentum.detach().clone()
    psw_in = None if psw is None else psw.clone().requires_grad_(True)
    out = m(idx, off, psw_in, batch_size_per_feature=sizes)
    assert out.shape == (sum(b * d for b, d in zip(sizes, m.layout.feature_dims)),)
    fwd = check_forward(m.layout, w0, idx, off, psw, max(sizes), m.pooling, out.detach(), what="forward",
                        batch_size_per_feature=sizes)
    assert fwd.ok, fwd
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 1000)).to(out.device)
    ref = reference_backward(m.layout, w0, m0, idx, off, psw, max(sizes), m.pooling, m.optimizer, m.learning_rate,
                             m.eps, grad, batch_size_per_feature=sizes)
    out.backward(grad)
    return check_step(ref, m.layout, w0, m.weights, m.momentum, None if psw_in is None else psw_in.grad,
                      None if psw is None else psw.dtype)


# ----------------------------------------------------------------------------- our TBE
@pytest.mark.parametrize("tier", list(TIERS))
@pytest.mark.parametrize("weighted,optimizer,pooling", [(False, "exact_sgd", "sum"),
                                                        (True, "exact_rowwise_adagrad", "mean")])
def test_vbe_trains_as_fp64(tier, weighted, optimizer, pooling):
    m = module(TIERS[tier], optimizer, pooling)
    idx, off, psw = vbe_batch([E for E, _ in SPECS], SIZES, LENGTHS, weighted)
    assert not vbe_step(m, idx, off, psw, SIZES)


def test_the_batch_reaches_every_backward_tier():
    """Under SMALL the batch has short runs and a long run of more than one chunk (the tiers above see them)."""
    idx, off, _ = vbe_batch([E for E, _ in SPECS], SIZES, LENGTHS, False)
    m = module(SMALL)
    grad = torch.zeros(sum(b * d for b, d in zip(SIZES, m.layout.feature_dims)))
    ref = reference_backward(m.layout, m.weights, m.momentum, idx, off, None, max(SIZES), m.pooling, m.optimizer,
                             m.learning_rate, m.eps, grad, batch_size_per_feature=SIZES)
    r = route(ref.rows.seg_len, idx.numel(), SMALL)
    assert r.short and r.long and r.multi_chunk


@pytest.mark.parametrize("weighted,optimizer,pooling", [(True, "exact_sgd", "mean"),
                                                        (False, "exact_rowwise_adagrad", "sum")])
def test_vbe_with_shared_tables(weighted, optimizer, pooling):
    """Features 0 and 2 read table 0 with their own batch sizes: a hot row's run spans both features' blocks."""
    fmap, sizes, lengths = [0, 1, 0], [4, 0, 3], [3, 5, 0, 2, 6, 4, 1]
    m = module(SMALL, optimizer, pooling, specs=SPECS[:2], feature_table_map=fmap)
    idx, off, psw = vbe_batch([SPECS[t][0] for t in fmap], sizes, lengths, weighted)
    assert not vbe_step(m, idx, off, psw, sizes)


def test_every_feature_of_batch_0_and_a_fixed_batch_as_vbe():
    """All B_f = 0: an empty output and no update; equal B_f: the fixed batch's output, flattened per feature."""
    m = module(SMALL)
    w0 = m.weights.detach().clone()
    out = m(*on(m, torch.zeros(0, dtype=torch.int64), torch.zeros(1, dtype=torch.int64)),
            batch_size_per_feature=[0, 0, 0])
    assert out.shape == (0,)
    out.backward(torch.zeros(0, device=out.device))
    assert torch.equal(m.weights, w0)
    lengths = [2, 1, 3, 0, 1, 2]
    idx, off, _ = on(m, *vbe_batch([E for E, _ in SPECS], [2, 2, 2], lengths, False))
    dense = m(idx, off).detach()
    flat = m(idx, off, batch_size_per_feature=[2, 2, 2]).detach()
    blocks = [dense[:, c:c + d].reshape(-1) for c, d in zip(m.layout.col_offsets, m.layout.feature_dims)]
    assert torch.equal(flat, torch.cat(blocks))


def test_small_table_forward_refuses_vbe():
    args = ([64], [8], 128, 2, torch.float16, torch.float32, False, KernelConfig())
    assert choose_path(*args) is Path.FWD_SMALL_TABLE
    assert choose_path(*args, vbe=True) is Path.FWD_GENERIC
    m = module(KernelConfig(), specs=[(8, 64)], weights_dtype=torch.float16)
    idx, off = on(m, torch.randint(0, 8, (128,), generator=torch.Generator().manual_seed(0)),
                  torch.tensor([0, 80, 128]))
    out = m(idx, off, batch_size_per_feature=[2])
    fwd = check_forward(m.layout, m.weights.detach(), idx, off, None, 2, m.pooling, out.detach(),
                        batch_size_per_feature=[2])
    assert fwd.ok, fwd


# ----------------------------------------------------------------------------- bounds check
BAD_SIZES = [2, 0, 1]
BAD_IDX = torch.tensor([5, 1, 5, 9, 6])   # id 5 is bad only for feature 1 (5 rows); it reads none here
BAD_OFF = torch.tensor([0, 2, 3, 5])      # feature 0: [5, 1], [5]; feature 2: [9, 6] (9 >= 7: bad)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("mode", ["warning", "fatal"])
def test_vbe_bounds_check_per_feature(fused, mode):
    m = module(KernelConfig(fused_bounds_check=fused), bounds_check=mode)
    bad_idx, bad_off = on(m, BAD_IDX, BAD_OFF)
    ref = reference_bounds_check(m.layout.feature_rows, bad_idx, bad_off, m.bounds_check_mode,
                                 batch_size_per_feature=BAD_SIZES)
    assert ref.fatal and ref.first_bad == ("id", 3) and ref.warnings == (mode == "warning")
    if mode == "fatal":
        with pytest.raises(BoundsCheckError, match=r"indices\[3\] = 9 .* table 2") as e:
            m(bad_idx, bad_off, batch_size_per_feature=BAD_SIZES)
        assert (e.value.table, e.value.sample, e.value.bag) == (2, 0, 2)
        return
    out = m(bad_idx, bad_off, batch_size_per_feature=BAD_SIZES)
    fwd = check_forward(m.layout, m.weights.detach(), ref.indices, ref.offsets, None, 2, m.pooling, out.detach(),
                        batch_size_per_feature=BAD_SIZES)
    assert fwd.ok, fwd
    assert int(m.bounds_check_warnings[0]) == 1


def test_vbe_broken_offsets_name_the_feature():
    m = module(KernelConfig(), bounds_check="fatal")
    with pytest.raises(BoundsCheckError) as e:
        m(*on(m, BAD_IDX, torch.tensor([0, 2, 1, 5])), batch_size_per_feature=BAD_SIZES)
    assert e.value.kind == "offsets" and (e.value.table, e.value.sample) == (0, 1)


# ----------------------------------------------------------------------------- FBGEMM's CPU TBE
needs_fbgemm = pytest.mark.skipif(not fbgemm_cpu.available(), reason="fbgemm_gpu's CPU ops do not load")


@needs_fbgemm
@pytest.mark.parametrize("weighted,optimizer,pooling", [(False, "exact_sgd", "sum"),
                                                        (True, "exact_rowwise_adagrad", "sum"),
                                                        (False, "exact_rowwise_adagrad", "mean")])
def test_fbgemm_cpu_vbe_agrees(weighted, optimizer, pooling):
    """FBGEMM's VBE output has our layout and its step our update (each within the bound of the exact value)."""
    m = module(SMALL, optimizer, pooling)
    idx, off, psw = vbe_batch([E for E, _ in SPECS], SIZES, LENGTHS, weighted)
    fb = fbgemm_cpu.FbgemmTBE(SPECS, m.optimizer, m.learning_rate, m.eps, torch.float32, torch.float32, m.pooling)
    adagrad = m.optimizer.value == "exact_rowwise_adagrad"
    fb.load(m.split_embedding_weights(), [s[0] for s in m.split_optimizer_states()] if adagrad else None)
    w0, m0 = m.weights.detach().clone(), m.momentum.detach().clone()
    grad = torch.randn(sum(b * d for b, d in zip(SIZES, m.layout.feature_dims)),
                       generator=torch.Generator().manual_seed(7))
    out, psw_grad = fb.step(idx, off, psw, grad, batch_size_per_feature=SIZES)
    fwd = check_forward(m.layout, w0, idx, off, psw, max(SIZES), m.pooling, out.reshape(-1),
                        what="FBGEMM forward", batch_size_per_feature=SIZES)
    assert fwd.ok, fwd
    ref = reference_backward(m.layout, w0, m0, idx, off, psw, max(SIZES), m.pooling, m.optimizer, m.learning_rate,
                             m.eps, grad, batch_size_per_feature=SIZES)
    after = torch.cat([w.reshape(-1) for w in fb.weights()])
    mom = torch.cat(fb.momentum()) if adagrad else None
    assert not check_step(ref, m.layout, w0, after, mom, psw_grad, None if psw is None else psw.dtype)


# ----------------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("sizes,off,error,text", [
    ([2, 1], BAD_OFF, ValueError, r"batch_size_per_feature has 2 entries, expected one per feature \(3\)"),
    ([2, -1, 2], BAD_OFF, ValueError, r"batch_size_per_feature\[1\] = -1 is negative"),
    ([2, 1, 1], BAD_OFF, ValueError, r"offsets has 4 entries; expected sum\(batch_size_per_feature\) \+ 1 = 5"),
    ([[2], [0], [1]], BAD_OFF, TypeError, r"single rank"),
    ([2, 0.5, 1], BAD_OFF, TypeError, r"batch_size_per_feature\[1\] must be an int"),
])
def test_bad_batch_sizes_are_named(sizes, off, error, text):
    m = module(KernelConfig())
    with pytest.raises(error, match=text):
        m(*on(m, BAD_IDX, off), batch_size_per_feature=sizes)


def test_grad_output_must_be_flat():
    m = module(KernelConfig())
    vbe = vbe_tensors(VariableBatch((1, 1, 1), tuple(m.layout.feature_dims)), m.device)
    with pytest.raises(ValueError, match=r"expected \[sum B_f \* D_f\] = \[16\]"):
        check_grad_output(m, torch.ones(1, 16, device=m.device), 1, vbe)
    assert check_grad_output(m, torch.ones(16, device=m.device), 1, vbe).shape == (16,)
