"""Standalone bounds check with FBGEMM's BoundsCheckMode semantics (vectorised torch ops).

FATAL raises naming the first offending table, bag and id; WARNING repairs and counts;
IGNORE repairs silently; NONE returns the inputs untouched. Repairs go to copies: the
caller's tensors are never modified.
"""

from __future__ import annotations

import torch

from tbe.modes import BoundsCheckMode


class BoundsCheckError(ValueError):
    """Raised under BoundsCheckMode.FATAL for an out-of-range id or broken offsets."""


def bounds_check(
    indices: torch.Tensor,
    offsets: torch.Tensor,
    rows_per_table: torch.Tensor,
    batch_size: int,
    mode: BoundsCheckMode,
    warning_count: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (indices, offsets), repaired per ``mode``; adds repairs to ``warning_count`` under WARNING."""
    if mode == BoundsCheckMode.NONE:
        return indices, offsets
    num_tables = rows_per_table.numel()
    n = indices.numel()
    # offsets: clamp each to [0, n] and make them non-decreasing
    off64 = offsets.to(torch.int64)
    fixed = off64.clamp(0, n)
    fixed[0] = 0
    fixed[-1] = n
    fixed = torch.cummax(fixed, 0).values
    bad_offsets = fixed != off64
    # ids: bag of each lookup from the repaired offsets, table = bag // B
    bag_of = torch.searchsorted(fixed[1:], torch.arange(n, device=indices.device), right=True)
    table_of = torch.div(bag_of, max(batch_size, 1), rounding_mode="floor").clamp(max=num_tables - 1)
    ids = indices.to(torch.int64)
    bad_ids = (ids < 0) | (ids >= rows_per_table[table_of])
    if mode == BoundsCheckMode.FATAL:
        if bool(bad_offsets.any()):
            pos = int(torch.nonzero(bad_offsets)[0])
            raise BoundsCheckError(
                f"offsets[{pos}] = {int(off64[pos])} is invalid (offsets must start at 0, "
                f"not decrease and end at len(indices) = {n})"
            )
        if bool(bad_ids.any()):
            pos = int(torch.nonzero(bad_ids)[0])
            b = int(bag_of[pos])
            t = int(table_of[pos])
            raise BoundsCheckError(
                f"indices[{pos}] = {int(ids[pos])} is out of range for table {t} "
                f"(rows {int(rows_per_table[t])}), bag {b} (sample {b - t * batch_size})"
            )
        return indices, offsets
    if mode == BoundsCheckMode.WARNING and warning_count is not None:
        warning_count += bad_ids.sum() + bad_offsets.sum()
    new_indices = torch.where(bad_ids, torch.zeros_like(indices), indices)
    return new_indices.contiguous(), fixed.to(offsets.dtype).contiguous()
