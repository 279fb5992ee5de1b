"""Variable batch per feature (VBE) on the device: the per-call tables the kernels read, and how a kernel finds
a bag's feature and its output row with and without them.

Without VBE every feature has B bags: bag t*B + b is feature t's sample b, its output row sits at
``b * stride + col_offsets[t]``. With VBE (``tbe.layout.VariableBatch``) feature f has B_f bags numbered from
``bag_base[f]``; a bag's feature and output row are looked up per bag (``bag_feature``, ``bag_row``). Kernels
take a ``VBE`` constexpr, so the fixed-batch variant compiles exactly its own arithmetic.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import triton
import triton.language as tl

from tbe.layout import VariableBatch


@dataclasses.dataclass(frozen=True)
class VbeTensors:
    """One VBE call's batch sizes and their device tables (``VariableBatch.device_tensors``)."""

    batch: VariableBatch
    bag_base: torch.Tensor     # [F + 1] int64
    out_base: torch.Tensor     # [F + 1] int64
    bag_feature: torch.Tensor  # [bags] int32
    bag_row: torch.Tensor      # [bags] int64


def vbe_tensors(batch: VariableBatch, device: torch.device) -> VbeTensors:
    return VbeTensors(batch, **batch.device_tensors(device))


def bag_args(vbe: Optional[VbeTensors], placeholder: torch.Tensor) -> dict:
    """The per-bag tables a backward kernel takes (``placeholder``, never read, without VBE) and its ``VBE``."""
    return dict(bag_feature_ptr=placeholder if vbe is None else vbe.bag_feature,
                bag_row_ptr=placeholder if vbe is None else vbe.bag_row, VBE=vbe is not None)


def row_strides(out: torch.Tensor, vbe: Optional[VbeTensors]) -> tuple[int, ...]:
    """The row strides of an output (or its gradient) that ``tbe.layout.row_vector`` must respect: its row
    stride, none with VBE (each feature's rows are D apart from a multiple of D)."""
    return () if vbe is not None else (out.stride(0),)


@triton.jit
def feature_of(bag, m, B, bag_feature_ptr, VBE: tl.constexpr):
    """The feature of each bag: ``bag // B``, or with VBE its ``bag_feature`` entry (lanes off ``m`` read 0)."""
    f = bag // B
    if VBE:  # in ``bag // B``'s type: a compiled function returns one type
        f = tl.load(bag_feature_ptr + bag, mask=m, other=0).to(f.dtype)
    return f
