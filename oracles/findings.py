"""Triaged disagreements between the oracles, each pinned by a test that fails once it goes away.

An entry here is a documented semantic difference or an oracle bug, never a kernel bug:
the kernel is always still checked against the FP64 reference for these inputs.
"""

from __future__ import annotations

from typing import Optional

import torch

from tbe.modes import Optimizer, Pooling

FBGEMM_WEIGHTED_MEAN_FP16_FORWARD = (
    "fbgemm-gpu-cpu forward with MEAN pooling, per-sample weights and fp16 output returns the "
    "weighted SUM (no division by L); with fp32 output it divides. Oracle bug, seen in 1.8.0."
)
FBGEMM_FP16_SGD_UPDATE = (
    "fbgemm-gpu-cpu EXACT_SGD with fp16 weights lands outside the one-rounding bound of the exact "
    "update (by up to ~50x, even on rows read once); its row-wise Adagrad and fp32 steps agree. Seen in 1.8.0."
)
FBGEMM_WEIGHTED_MEAN_BACKWARD = (
    "fbgemm-gpu-cpu backward with MEAN pooling and per-sample weights does not divide the row "
    "gradient by L, so its update disagrees with the FP64 reference. Semantic difference."
)


def fbgemm_forward_difference(pooling: Pooling, weighted: bool, output_dtype: torch.dtype) -> Optional[str]:
    """Why FBGEMM's CPU forward is not expected to match FP64 for these settings, or None."""
    if pooling == Pooling.MEAN and weighted and output_dtype == torch.float16:
        return FBGEMM_WEIGHTED_MEAN_FP16_FORWARD
    return None


def fbgemm_backward_difference(pooling: Pooling, weighted: bool) -> Optional[str]:
    """Why FBGEMM's CPU update is not expected to match FP64 for these settings, or None."""
    if pooling == Pooling.MEAN and weighted:
        return FBGEMM_WEIGHTED_MEAN_BACKWARD
    return None


def fbgemm_update_difference(optimizer: Optimizer, weights_dtype: torch.dtype) -> Optional[str]:
    """Why FBGEMM's CPU weight update is not judged against the FP64 bound at all, or None."""
    if optimizer == Optimizer.EXACT_SGD and weights_dtype == torch.float16:
        return FBGEMM_FP16_SGD_UPDATE
    return None
