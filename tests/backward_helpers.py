"""Shared helpers for the backward tests: build a module and batch, run one step, check it."""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from oracles.bounds_backward import check_step
from oracles.reference_backward import reference_backward
from tbe import KernelConfig, TritonTBE


def make_batch(specs, B, lengths, idx_dtype=torch.int64, seed=0, weighted=False, psw_dtype=torch.float32,
               hot: Optional[Sequence[int]] = None):
    """A batch with bag lengths ``lengths`` (T*B of them); ``hot`` ids (per table) repeat often."""
    g = torch.Generator().manual_seed(seed)
    T = len(specs)
    ids = []
    for t in range(T):
        E = specs[t][0]
        n_t = sum(lengths[t * B:(t + 1) * B])
        x = torch.randint(0, E, (n_t,), generator=g)
        if hot is not None:
            x = torch.where(torch.rand(n_t, generator=g) < 0.5, torch.full_like(x, hot[t] % E), x)
        ids.append(x)
    indices = torch.cat(ids).to(idx_dtype)
    offsets = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0).tolist()), dtype=idx_dtype)
    psw = None
    if weighted:
        psw = (torch.rand(indices.numel(), generator=g) * 2 - 0.5).to(psw_dtype)
    return indices, offsets, psw


def on(module: TritonTBE, *tensors):
    """``tensors`` moved to the module's device (None stays None)."""
    return tuple(None if t is None else t.to(module.device) for t in tensors)


def train_step(module: TritonTBE, indices, offsets, psw, seed=0, grad_scale=1.0, check=True):
    """One forward + backward on ``module``; returns the list of bound violations (empty = ok)."""
    indices, offsets, psw = on(module, indices, offsets, psw)
    B = (offsets.numel() - 1) // module.layout.num_features
    w_before = module.weights.detach().clone()
    m_before = module.momentum.detach().clone()
    psw_in = None if psw is None else psw.clone().requires_grad_(True)
    out = module(indices, offsets, psw_in)
    g = torch.Generator().manual_seed(seed + 1000)
    grad = (torch.randn(out.shape, generator=g) * grad_scale).to(out.dtype).to(out.device)
    ref = reference_backward(module.layout, w_before, m_before, indices, offsets, psw, B, module.pooling,
                             module.optimizer, module.learning_rate, module.eps, grad)
    out.backward(grad)
    if not check:
        return []
    return check_step(ref, module.layout, w_before, module.weights, module.momentum,
                      None if psw_in is None else psw_in.grad, None if psw is None else psw.dtype)


def build(specs, optimizer="exact_sgd", pooling="sum", wdtype=torch.float32, lr=0.05, eps=1e-3,
          config: Optional[KernelConfig] = None, seed=0, output_dtype=torch.float32):
    return TritonTBE(specs, optimizer=optimizer, learning_rate=lr, eps=eps, weights_dtype=wdtype,
                     output_dtype=output_dtype, pooling=pooling, config=config, seed=seed)
