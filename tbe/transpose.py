"""Index transpose for the backward: linearize, sort stably, run-length encode.

Every lookup becomes ``hash_size_cumsum[t] + id``; a stable sort puts all lookups of one
(table, row) next to each other, and the run-length encoding turns each group into a run
(linear index, start, length). Everything stays on the device with sizes known on the host
(the number of lookups bounds the number of runs; the true count lives in a device
tensor), so nothing here syncs with the host.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from tbe.config import KernelConfig
from tbe.layout import TableLayout


@dataclasses.dataclass
class Transposed:
    """The sorted view of one batch. Arrays named ``run_*`` have ``n`` slots; the first
    ``num_runs[0]`` are valid, the rest are padding (never read by the kernels)."""

    n: int                       # number of lookups
    batch_size: int
    offsets: torch.Tensor        # [T*B + 1] the (checked) offsets, for L(t, b) under MEAN
    linear_dtype: torch.dtype    # int32 or int64
    bag_of: torch.Tensor         # [n] int64: bag t*B + b of each lookup, original order
    linear: torch.Tensor         # [n] linear index of each lookup, original order
    perm: torch.Tensor           # [n] int64: original position of each sorted lookup
    sorted_linear: torch.Tensor  # [n]
    sorted_bag: torch.Tensor     # [n] int64: bag of each sorted lookup (table = bag // B)
    sorted_psw: Optional[torch.Tensor]  # [n] per-sample weights in sorted order, or None
    run_linear: torch.Tensor     # [n] linear index of each run
    run_start: torch.Tensor      # [n] int64: first sorted position of each run
    run_length: torch.Tensor     # [n] int64: segment length SL of each run
    num_runs: torch.Tensor       # [1] int64, on the device


def linear_dtype_for(layout: TableLayout, config: KernelConfig) -> torch.dtype:
    """int32 when every linear index fits (or the int32 fault forces it), else int64."""
    if config.has_fault("int32_linearize_past_limit"):
        return torch.int32
    if config.index_dtype == "int64":
        return torch.int64
    if config.index_dtype == "int32":
        if not layout.fits_int32:
            raise ValueError(
                f"KernelConfig.index_dtype='int32' but the layout has {layout.total_rows} rows in all; "
                f"linear indices up to {layout.total_rows - 1} do not fit in int32"
            )
        return torch.int32
    return torch.int32 if layout.fits_int32 else torch.int64


def transpose(
    layout: TableLayout,
    hash_size_cumsum: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    per_sample_weights: Optional[torch.Tensor],
    batch_size: int,
    config: KernelConfig,
) -> Transposed:
    """Sort the (bounds-checked) batch by linear index and split it into runs."""
    device = indices.device
    n = indices.numel()
    ldtype = linear_dtype_for(layout, config)
    # bag of each lookup: the number of bag ends <= position (empty bags end where they start)
    pos = torch.arange(n, device=device, dtype=torch.int64)
    bag_of = torch.searchsorted(offsets[1:].to(torch.int64), pos, right=True)
    table_of = torch.div(bag_of, max(batch_size, 1), rounding_mode="floor")
    linear64 = hash_size_cumsum[table_of] + indices.to(torch.int64)
    # the int32 fault truncates (wraps) exactly as a 32-bit key would on the device
    linear = linear64.to(ldtype)

    sorted_linear, perm = torch.sort(linear, stable=True)
    sorted_bag = bag_of[perm]
    sorted_psw = None
    if per_sample_weights is not None:
        if config.has_fault("unstable_weighted_pairing"):
            # a second, separately computed sort whose ties come out in a different order:
            # sorting the reversed keys stably yields each run in reverse original order,
            # an order any unstable sort is free to produce
            rev = torch.sort(linear.flip(0), stable=True).indices
            psw_perm = (n - 1) - rev
        else:
            psw_perm = perm
        sorted_psw = per_sample_weights[psw_perm]

    # run-length encoding without data-dependent sizes
    is_start = torch.ones(n, dtype=torch.bool, device=device)
    if n > 1:
        is_start[1:] = sorted_linear[1:] != sorted_linear[:-1]
    run_id = torch.cumsum(is_start.to(torch.int64), 0) - 1
    num_runs = (run_id[-1:] + 1) if n > 0 else torch.zeros(1, dtype=torch.int64, device=device)
    # starts scatter into their run's slot; non-starts go to a dump slot n that is cut off
    slot = torch.where(is_start, run_id, torch.full_like(run_id, n))
    run_start = torch.zeros(n + 1, dtype=torch.int64, device=device).scatter_(0, slot, pos)[:n]
    run_linear = torch.zeros(n + 1, dtype=ldtype, device=device).scatter_(0, slot, sorted_linear)[:n]
    run_length = torch.zeros(n, dtype=torch.int64, device=device).scatter_add_(
        0, run_id, torch.ones(n, dtype=torch.int64, device=device)
    )
    return Transposed(
        n=n, batch_size=batch_size, offsets=offsets, linear_dtype=ldtype, bag_of=bag_of, linear=linear, perm=perm,
        sorted_linear=sorted_linear, sorted_bag=sorted_bag, sorted_psw=sorted_psw,
        run_linear=run_linear, run_start=run_start, run_length=run_length, num_runs=num_runs,
    )
