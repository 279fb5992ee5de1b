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
import triton
import triton.language as tl

from tbe.config import KernelConfig
from tbe.layout import TableLayout


@dataclasses.dataclass
class Transposed:
    """The sorted view of one batch. Arrays named ``run_*`` have ``n`` slots; the first
    ``num_runs[0]`` are valid, the rest are padding (never read by the kernels)."""

    n: int                       # number of lookups
    batch_size: int
    offsets: torch.Tensor        # [T*B + 1] the (checked) offsets as int64, for L(t, b) under MEAN
    linear_dtype: torch.dtype    # int32 or int64
    bag_of: torch.Tensor         # [n] bag t*B + b of each lookup, original order (int32 when T*B fits)
    linear: torch.Tensor         # [n] linear index of each lookup, original order
    perm: torch.Tensor           # [n] int64: original position of each sorted lookup
    sorted_linear: torch.Tensor  # [n]
    sorted_bag: torch.Tensor     # [n] bag of each sorted lookup (table = bag // B), bag_of's dtype
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
    pos = torch.arange(n, device=device, dtype=torch.int64)
    # an int32 key past 2^31 - 1 (only under the int32 fault) wraps exactly as a 32-bit key would
    bag_of, linear = linearize(hash_size_cumsum, indices, offsets, batch_size, ldtype)

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

    # run-length encoding without data-dependent sizes: run r starts where the r-th key change is;
    # padding slots start at n, so each run's length is the next start minus its own (no atomics)
    is_start = torch.ones(n, dtype=torch.bool, device=device)
    if n > 1:
        is_start[1:] = sorted_linear[1:] != sorted_linear[:-1]
    run_id = torch.cumsum(is_start.to(torch.int64), 0) - 1
    num_runs = (run_id[-1:] + 1) if n > 0 else torch.zeros(1, dtype=torch.int64, device=device)
    # starts scatter into their run's slot; non-starts go to a dump slot n that is cut off
    slot = torch.where(is_start, run_id, torch.full_like(run_id, n))
    starts = torch.full((n + 1,), n, dtype=torch.int64, device=device).scatter_(0, slot, pos)
    run_start = starts[:n]
    run_length = starts[1:] - run_start
    run_linear = torch.zeros(n + 1, dtype=ldtype, device=device).scatter_(0, slot, sorted_linear)[:n]
    # int64 whatever the index dtype: the backward kernels read offsets only under MEAN, and one
    # offsets dtype halves their specializations (a copy of T*B + 1 values when they are int32)
    return Transposed(
        n=n, batch_size=batch_size, offsets=offsets.to(torch.int64), linear_dtype=ldtype, bag_of=bag_of,
        linear=linear, perm=perm,
        sorted_linear=sorted_linear, sorted_bag=sorted_bag, sorted_psw=sorted_psw,
        run_linear=run_linear, run_start=run_start, run_length=run_length, num_runs=num_runs,
    )


# ----------------------------------------------------------------------------- linearization
LINEARIZE_BLOCK = 1024


def linearize(hash_size_cumsum: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, batch_size: int,
              ldtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(bag of every lookup, its linear index ``hash_size_cumsum[t] + id`` in ``ldtype``), one kernel.

    The bag of position p is the number of bag ends <= p (a binary search over the offsets). Bags
    are int32 when every bag number fits (32-bit division and modulo in the backward's inner
    loops), else int64; the cast of a linear index to int32 wraps past 2^31 - 1 like a 32-bit key.
    """
    n = indices.numel()
    device = indices.device
    num_bags = offsets.numel() - 1
    bag_dtype = torch.int32 if num_bags <= 2**31 - 1 else torch.int64
    bag_of = torch.empty(n, dtype=bag_dtype, device=device)
    linear = torch.empty(n, dtype=ldtype, device=device)
    if n == 0:
        return bag_of, linear
    _linearize_kernel[(triton.cdiv(n, LINEARIZE_BLOCK),)](
        indices, offsets, hash_size_cumsum, bag_of, linear, n, num_bags, max(batch_size, 1),
        max(1, num_bags).bit_length(), BLOCK=LINEARIZE_BLOCK,
    )
    return bag_of, linear


@triton.jit(do_not_specialize=["N", "NUM_BAGS", "B", "STEPS"])
def _linearize_kernel(indices_ptr, offsets_ptr, hcs_ptr, bag_ptr, linear_ptr, N, NUM_BAGS, B, STEPS,
                      BLOCK: tl.constexpr):
    pos = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = pos < N
    # first bag whose end offsets[k + 1] exceeds pos: lo..hi narrows to it in STEPS halvings
    lo = tl.zeros([BLOCK], dtype=tl.int64)
    hi = tl.zeros([BLOCK], dtype=tl.int64) + NUM_BAGS
    for _ in range(0, STEPS):
        mid = (lo + hi) // 2
        go = lo < hi
        end = tl.load(offsets_ptr + mid + 1, mask=m & go, other=0).to(tl.int64)
        right = go & (end <= pos)
        lo = tl.where(right, mid + 1, lo)
        hi = tl.where(go & ~right, mid, hi)
    bag = lo
    ids = tl.load(indices_ptr + pos, mask=m, other=0).to(tl.int64)
    lin = tl.load(hcs_ptr + bag // B, mask=m, other=0) + ids
    tl.store(bag_ptr + pos, bag.to(bag_ptr.dtype.element_ty), mask=m)
    tl.store(linear_ptr + pos, lin.to(linear_ptr.dtype.element_ty), mask=m)
