"""Build a TritonTBE for a CaseSpec, so tests, campaigns and replays construct it identically.

A ``values="dyadic"`` spec starts from dyadic weights (``cases.dyadic``) instead of the
module's own ``reset_weights(seed)``, so its every accumulation is exact in fp32.
"""

from __future__ import annotations

from typing import Optional

import torch

from cases import Case, CaseSpec, dyadic_weights
from tbe import KernelConfig, TritonTBE
from tbe.backend import default_device


def build_module(spec: CaseSpec, config: Optional[KernelConfig] = None) -> TritonTBE:
    module = TritonTBE(
        [tuple(t) for t in spec.tables],
        optimizer=spec.optimizer,
        learning_rate=spec.learning_rate,
        eps=spec.eps,
        weights_dtype=spec.weights_dtype,
        output_dtype=spec.output_dtype,
        pooling=spec.pooling,
        bounds_check=spec.bounds_check,
        config=config or KernelConfig(),
        seed=spec.seed,
        feature_table_map=spec.feature_table_map,
    )
    if spec.values == "dyadic":
        with torch.no_grad():
            module.weights.copy_(dyadic_weights(spec, spec.seed).to(module.weights_dtype))
    return module


def device_batch(case: Case, device: Optional[torch.device] = None):
    """(indices, offsets, per_sample_weights) on the kernels' device."""
    device = device or default_device()
    psw = None if case.per_sample_weights is None else case.per_sample_weights.to(device)
    return case.indices.to(device), case.offsets.to(device), psw
