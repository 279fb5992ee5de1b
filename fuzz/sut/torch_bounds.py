"""Bounds checking in plain torch ops, for the ``torch`` SUT (no loops over bags, works on any device).

The rules are the project's (``tbe.modes.BoundsCheckMode``): offsets[0] must be 0, offsets
non-decreasing and within len(indices), the last one equal to it; every id in [0, E_t).
Written as a prefix maximum rather than the reference's bag-by-bag walk, so the two
formulations check each other: the repaired offsets are offsets[0] := 0, last := n, then
off'[k] = min(n, max(off[0..k])); bag k is counted when its end moved (or, for bag 0,
when its start was not 0) plus once when the last entry was not n; each bad id is set
to 0 and counted. FATAL raises on any of these; NONE checks nothing.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from fuzz.errors import TorchBoundsError
from tbe.modes import BoundsCheckMode


def check_bounds(
    rows: Sequence[int], indices: torch.Tensor, offsets: torch.Tensor, mode: BoundsCheckMode,
    batch_size_per_feature: Optional[Sequence[int]] = None,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(repaired int64 indices, repaired int64 offsets, warnings of this call) under ``mode``; ``rows`` per
    feature, each with ``batch_size_per_feature[f]`` bags (VBE) or an equal share of them."""
    ids = indices.to(torch.int64)
    off = offsets.to(torch.int64)
    if mode == BoundsCheckMode.NONE:
        return ids, off, 0
    n = ids.numel()
    TB = off.numel() - 1
    T = len(rows)
    B = TB // T if T else 0
    last_bad = int(off[TB] != n)
    fixed = off.clone()
    fixed[TB] = n
    if TB == 0:  # no bags: only the single (last) entry can be wrong
        if mode == BoundsCheckMode.FATAL and last_bad:
            raise TorchBoundsError(f"bounds check (FATAL): offsets[0] = {int(off[0])} is invalid for {n} indices")
        return ids, (off if mode == BoundsCheckMode.FATAL else fixed), last_bad * (mode == BoundsCheckMode.WARNING)
    start = fixed.clone()
    start[0] = 0
    repaired = torch.cummax(start, 0).values.clamp(max=n)
    moved = repaired[1:] != fixed[1:]
    if TB > 0:
        moved[0] |= bool(off[0] != 0)
    offset_warnings = last_bad + int(moved.sum())
    lengths = repaired[1:] - repaired[:-1]
    if batch_size_per_feature is None:
        feature_of_bag = torch.arange(TB, device=ids.device) // max(B, 1)
    else:
        feature_of_bag = torch.repeat_interleave(torch.arange(T, device=ids.device),
                                                 torch.tensor(list(batch_size_per_feature), device=ids.device),
                                                 output_size=TB)
    table = torch.repeat_interleave(feature_of_bag, lengths.to(ids.device), output_size=n)
    limit = torch.tensor(list(rows), dtype=torch.int64, device=ids.device)[table] if n else ids
    bad = (ids < 0) | (ids >= limit)
    if mode == BoundsCheckMode.FATAL:
        if offset_warnings:
            k = int(torch.nonzero(repaired != off)[0]) if bool((repaired != off).any()) else TB
            raise TorchBoundsError(f"bounds check (FATAL): offsets[{k}] = {int(off[k])} is invalid for "
                                   f"{n} indices")
        if bool(bad.any()):
            p = int(torch.nonzero(bad)[0])
            raise TorchBoundsError(f"bounds check (FATAL): id {int(ids[p])} at position {p} is outside table "
                                   f"{int(table[p])} ({rows[int(table[p])]} rows)")
        return ids, off, 0
    ids = torch.where(bad, torch.zeros_like(ids), ids)
    warnings = offset_warnings + int(bad.sum()) if mode == BoundsCheckMode.WARNING else 0
    return ids, repaired, warnings
