"""The backward never synchronizes with the host: run it under CUDA sync-debug mode "error"."""

import pytest
import torch

from cases import CaseSpec, HotRow, materialize
from fuzz.sut import build_module, device_batch
from tbe import KernelConfig

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("optimizer", ["exact_sgd", "exact_rowwise_adagrad"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("config", [
    KernelConfig(),
    KernelConfig(fused_long_tier=True),
    KernelConfig(hoist_transpose=True),
], ids=["two-kernel", "fused", "hoisted"])
def test_backward_never_syncs(optimizer, weighted, config):
    spec = CaseSpec(
        tables=((100_000, 128), (5_000, 64), (300, 33)), batch_size=2048, max_length=40,
        weighted=weighted, optimizer=optimizer, pooling="mean",
        hot_rows=(HotRow(0, 7, 300_000), HotRow(1, 3, 256), HotRow(2, 5, 255)), seed=11,
    )
    case = materialize(spec)
    module = build_module(spec, config)
    indices, offsets, psw = device_batch(case, module.device)
    if psw is not None:
        psw.requires_grad_(True)
    out = module(indices, offsets, psw)
    grad = case.grad_outputs[0].to(module.device)
    before = module.weights.clone()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out.backward(grad)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    assert not torch.equal(before, module.weights), "the backward applied no update"
    if weighted:
        assert psw.grad is not None and torch.isfinite(psw.grad).all()
