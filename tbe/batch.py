"""Structural validation of the feature-major jagged batch.

Bag (t, b) is ``indices[offsets[t*B + b] : offsets[t*B + b + 1]]``; with batch sizes per feature (VBE,
``tbe.layout.VariableBatch``) feature t has B_t bags, numbered from sum of the earlier B. Structural checks
(dtype, shape, device, contiguity) happen here and never read tensor data, so they cost
no host sync; checks of the values (ids in range, offsets monotone) are the bounds
check's job and follow its mode.
"""

from __future__ import annotations

import torch

from typing import Optional

from tbe.backend import check_device
from tbe.layout import VariableBatch
from tbe.modes import FLOAT_DTYPES, INDEX_DTYPES


def _check_tensor(name: str, t: object, dtypes: tuple, device: torch.device) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name} has dtype {t.dtype}, expected one of {[str(d) for d in dtypes]}")
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (stride {t.stride()})")
    check_device(name, t, device)
    return t


def validate_batch(
    indices: object,
    offsets: object,
    per_sample_weights: object,
    num_features: int,
    device: torch.device,
    vbe: Optional[VariableBatch] = None,
) -> int:
    """Check the batch's structure and return B (with ``vbe``, the largest B_f); TypeError/ValueError name field
    and value."""
    _check_tensor("indices", indices, INDEX_DTYPES, device)
    _check_tensor("offsets", offsets, INDEX_DTYPES, device)
    if indices.dtype != offsets.dtype:
        raise TypeError(
            f"indices and offsets must share a dtype, got indices {indices.dtype} and offsets {offsets.dtype}"
        )
    n = offsets.numel()
    if vbe is not None and n != vbe.num_bags + 1:
        raise ValueError(
            f"offsets has {n} entries; expected sum(batch_size_per_feature) + 1 = {vbe.num_bags + 1} "
            f"(batch_size_per_feature={list(vbe.sizes)})"
        )
    if vbe is None and (n < 1 or (n - 1) % num_features != 0):
        raise ValueError(
            f"offsets has {n} entries; expected T*B + 1 with T={num_features} features "
            f"(n - 1 = {n - 1} is not a multiple of {num_features})"
        )
    if per_sample_weights is not None:
        _check_tensor("per_sample_weights", per_sample_weights, FLOAT_DTYPES, device)
        if per_sample_weights.numel() != indices.numel():
            raise ValueError(
                f"per_sample_weights has {per_sample_weights.numel()} entries, "
                f"expected one per index ({indices.numel()})"
            )
    return (n - 1) // num_features if vbe is None else vbe.max_batch
