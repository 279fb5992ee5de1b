"""FBGEMM oracle for bounds checking: torch.ops.fbgemm.bounds_check_indices on CPU copies.

FBGEMM's op repairs in place and zeroes its warning counter each call under WARNING;
this wrapper works on copies and returns the count of this call. Under FATAL the op
raises a RuntimeError (TORCH_CHECK); the wrapper reports that as ``fatal=True``.
Under NONE the wrapper returns the copies without calling the op: FBGEMM's CPU op still
walks every bag in NONE mode and reads ids through unchecked offsets, which crashed the
process (segmentation fault) on bad offsets with fbgemm-gpu-cpu 1.8.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import torch

from oracles.fbgemm_import import import_fbgemm
from tbe.modes import BoundsCheckMode

# FBGEMM's BoundsCheckMode integers (fbgemm_gpu.split_table_batched_embeddings_ops_common)
FBGEMM_MODE = {
    BoundsCheckMode.FATAL: 0,
    BoundsCheckMode.WARNING: 1,
    BoundsCheckMode.IGNORE: 2,
    BoundsCheckMode.NONE: 3,
}


@dataclasses.dataclass
class FbgemmBoundsResult:
    indices: torch.Tensor
    offsets: torch.Tensor
    per_sample_weights: Optional[torch.Tensor]
    warnings: int
    fatal: bool
    message: str = ""


def fbgemm_bounds_check(
    rows_per_table: Sequence[int],
    indices: torch.Tensor,
    offsets: torch.Tensor,
    mode: BoundsCheckMode,
    per_sample_weights: Optional[torch.Tensor] = None,
) -> FbgemmBoundsResult:
    """Run FBGEMM's CPU bounds check on copies of the inputs."""
    import_fbgemm()

    rows = torch.tensor([int(r) for r in rows_per_table], dtype=torch.int64)
    ids = indices.detach().to("cpu").clone()
    off = offsets.detach().to("cpu").clone()
    psw = None if per_sample_weights is None else per_sample_weights.detach().to("cpu").clone()
    warning = torch.zeros(1, dtype=torch.int64)
    if mode == BoundsCheckMode.NONE:
        return FbgemmBoundsResult(ids, off, psw, 0, False)
    try:
        torch.ops.fbgemm.bounds_check_indices(rows, ids, off, FBGEMM_MODE[mode], warning, psw)
    except RuntimeError as e:
        return FbgemmBoundsResult(ids, off, psw, 0, True, str(e).splitlines()[0])
    return FbgemmBoundsResult(ids, off, psw, int(warning[0]), False)
