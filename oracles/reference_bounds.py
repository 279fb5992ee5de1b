"""Reference bounds check: a plain sequential Python reading of the semantics, no kernels.

It walks the bags one by one as the rules are stated (clamp each bag's start and end,
then check its ids), independent of the prefix-maximum formulation the Triton kernels
use. ``fbgemm_compat=True`` reproduces FBGEMM's CPU ``bounds_check_indices`` instead,
which differs from ours in two documented places:

- id -1: FBGEMM treats it as a pruned row (left as -1, not counted, not fatal);
  ours treats every negative id as bad (set to 0, counted, fatal).
- offsets[0] > 0: FBGEMM keeps it (ids before it belong to no bag and are never checked);
  ours repairs it to 0 (one warning for bag 0, fatal under FATAL), so every id is in a bag.

Everything else (the per-bag clamp, the counts, which inputs FATAL rejects) is shared.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import torch

from tbe.layout import check_batch_sizes
from tbe.modes import BoundsCheckMode


@dataclasses.dataclass
class BoundsResult:
    """Repaired copies, the warning count of this call, and FATAL's verdict."""

    indices: torch.Tensor
    offsets: torch.Tensor
    warnings: int
    fatal: bool  # FATAL would raise on this input (in any mode: whether the input is invalid)
    first_bad: Optional[tuple[str, int]]  # ("offsets", entry) or ("id", position) FATAL names first


def reference_bounds_check(
    rows_per_table: Sequence[int],
    indices: torch.Tensor,
    offsets: torch.Tensor,
    mode: BoundsCheckMode,
    fbgemm_compat: bool = False,
    batch_size_per_feature: Optional[Sequence[int]] = None,
) -> BoundsResult:
    """Repair (indices, offsets) per ``mode`` the slow, obvious way; inputs are not modified.
    Results are on the inputs' device; a batch that is already valid comes back as it is.
    ``rows_per_table``: the rows of each feature's table; ``batch_size_per_feature``: each feature's number of
    bags (VBE), else every feature has (len(offsets) - 1) / len(rows_per_table)."""
    T = len(rows_per_table)
    if batch_size_per_feature is None:
        sizes = [(offsets.numel() - 1) // T if T else 0] * T
    else:
        sizes = list(check_batch_sizes(batch_size_per_feature, T))
        if offsets.numel() != sum(sizes) + 1:
            raise ValueError(f"offsets has {offsets.numel()} entries, expected sum(batch_size_per_feature) + 1 = "
                             f"{sum(sizes) + 1}")
    if _already_valid(rows_per_table, indices, offsets, sizes):
        # nothing to repair: the walk below would return these same values, 0 warnings, not fatal
        return BoundsResult(indices.clone(), offsets.clone(), 0, False, None)
    result = _walk(rows_per_table, indices.cpu(), offsets.cpu(), mode, fbgemm_compat, sizes)
    result.indices, result.offsets = result.indices.to(indices.device), result.offsets.to(offsets.device)
    return result


def _already_valid(rows_per_table: Sequence[int], indices: torch.Tensor, offsets: torch.Tensor,
                   sizes: Sequence[int]) -> bool:
    """Offsets start at 0, never decrease and end at len(indices), and every id lies in [0, E_t) of
    its table: checked with whole-tensor ops on the inputs' device (one host read), so a large
    valid batch is not walked id by id in Python."""
    T, n = len(rows_per_table), indices.numel()
    off = offsets.to(torch.int64)
    if T == 0 or off.numel() != sum(sizes) + 1 or off.numel() < 2:
        return False
    last_bag = torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(off.device)
    table_end = off[last_bag].contiguous()  # end of each table's ids (valid offsets: its last bag's end)
    rows = torch.tensor([int(r) for r in rows_per_table], dtype=torch.int64, device=indices.device)
    ids = indices.to(torch.int64)
    table_of = torch.searchsorted(table_end, torch.arange(n, device=indices.device), right=True)
    in_range = (ids >= 0) & (ids < rows[table_of.clamp(max=T - 1)]) & (table_of < T)
    ok = (off[0] == 0) & (off[-1] == n) & (off[1:] >= off[:-1]).all() & in_range.all()
    return bool(ok)


def _walk(
    rows_per_table: Sequence[int],
    indices: torch.Tensor,
    offsets: torch.Tensor,
    mode: BoundsCheckMode,
    fbgemm_compat: bool,
    sizes: Sequence[int],
) -> BoundsResult:
    """The sequential walk over bags and ids (CPU tensors in and out)."""
    rows = [int(r) for r in rows_per_table]
    T = len(rows)
    ids = [int(x) for x in indices.tolist()]
    off = [int(x) for x in offsets.tolist()]
    raw_off = list(off)
    n = len(ids)
    TB = len(off) - 1
    bag_table = [t for t, size in enumerate(sizes) for _ in range(size)]
    warnings = 0
    first_bad: Optional[tuple[str, int]] = None

    # offsets: the last entry first, then each bag's (start, end) in order, as FBGEMM walks them
    if off[TB] != n:
        warnings += 1
        off[TB] = n
    for k in range(TB):
        start, end = off[k], off[k + 1]
        bad = start < 0 or start > end or end > n
        if k == 0 and not fbgemm_compat and start != 0:
            bad = True
        if bad:
            warnings += 1
            start = 0 if (k == 0 and not fbgemm_compat) else min(max(start, 0), n)
            end = max(start, min(end, n))
            off[k], off[k + 1] = start, end
    offsets_bad = off != raw_off
    if offsets_bad:
        first_bad = ("offsets", next(i for i in range(len(off)) if off[i] != raw_off[i]))

    # ids: each bag's ids against its table's rows; first_bad by position (bags are in order)
    id_bad_positions = []
    for k in range(TB):
        t = bag_table[k]
        for p in range(off[k], off[k + 1]):
            x = ids[p]
            if fbgemm_compat and x == -1:
                continue
            if x < 0 or x >= rows[t]:
                id_bad_positions.append(p)
    if first_bad is None and id_bad_positions:
        first_bad = ("id", id_bad_positions[0])
    fatal = first_bad is not None

    if mode == BoundsCheckMode.NONE or mode == BoundsCheckMode.FATAL:
        return BoundsResult(indices.clone(), offsets.clone(), 0, fatal, first_bad)
    for p in id_bad_positions:
        ids[p] = 0
    if mode == BoundsCheckMode.WARNING:
        warnings += len(id_bad_positions)
    else:
        warnings = 0
    return BoundsResult(
        torch.tensor(ids, dtype=indices.dtype), torch.tensor(off, dtype=offsets.dtype),
        warnings, fatal, first_bad,
    )
