"""Index transpose for the backward: linearize, sort stably, run-length encode.

Every lookup becomes a key ``sort_base[t] + id`` (its linear index ``hash_size_cumsum[t] + id``, with the
tables laid out bucket by bucket: ``tbe.buckets.bucket_sort_base``); a stable sort puts all lookups of one
(table, row) next to each other and the runs of one dimension bucket together, and the run-length encoding
turns each group into a run (linear index, start; a run ends where the next one starts). Everything stays on the device
with sizes known on the host (the number of lookups bounds the number of runs; the true count
lives in a device tensor), so nothing here syncs with the host. Three kernels besides the sort:
linearize, count the runs of each block of sorted positions, write the runs (and each sorted
lookup's bag) with one small scan of the block counts between them.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import triton
import triton.language as tl

from tbe.buckets import several_buckets
from tbe.config import KernelConfig
from tbe.faults import FAULT_RUNS_PER_FEATURE, kernel_faults
from tbe.grid import cdiv
from tbe.layout import INT32_MAX, TableLayout
from tbe.vbe import VbeTensors, feature_of


@dataclasses.dataclass
class Transposed:
    """The sorted view of one batch. ``run_linear`` has ``n`` slots and ``run_start`` ``n + 1``; the first
    ``num_runs[0]`` runs are valid and ``run_start[num_runs[0]] == n``, so run ``r`` spans sorted positions
    ``run_start[r]`` to ``run_start[r + 1]``; the slots past those are padding (never read by the kernels)."""

    n: int                       # number of lookups
    batch_size: int
    offsets: torch.Tensor        # [bags + 1] the (checked) offsets as int64, for L(t, b) under MEAN
    linear_dtype: torch.dtype    # int32 or int64: run_linear's (``linear_dtype_for``)
    bag_of: torch.Tensor         # [n] bag (t*B + b; VBE: see tbe.vbe) of each lookup, original order (int32 when
                                 # the bag count fits)
    key: torch.Tensor            # [n] sort key of each lookup, original order (the linear index when the
                                 # layout's buckets are in table order), in ``key_dtype_for``
    perm: torch.Tensor           # [n] int64: original position of each sorted lookup
    sorted_key: torch.Tensor     # [n]
    sorted_bag: torch.Tensor     # [n] bag of each sorted lookup (feature = bag // B), bag_of's dtype
    sorted_psw: Optional[torch.Tensor]  # [n] per-sample weights in sorted order, or None
    run_linear: torch.Tensor     # [n] linear index of each run (runs in key order: bucket by bucket)
    run_table: torch.Tensor      # [n] int32 feature of each run (its first lookup's bag's)
    run_bucket: Optional[torch.Tensor]  # [n] int32 backward dimension bucket of each run's table; None when the
                                        # layout has one bucket (every run is in it)
    run_start: torch.Tensor      # [n + 1] first sorted position of each run, then n: int32 when n fits
    num_runs: torch.Tensor       # [1] int64, on the device
    vbe: Optional[VbeTensors] = None  # per-feature batch sizes: bags are then found through its tables

    @property
    def run_length(self) -> torch.Tensor:
        """[n] segment length SL of each run (one subtraction; the kernels read ``run_start`` twice instead)."""
        return self.run_start[1:] - self.run_start[:-1]


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


# the sort keys' narrow dtypes, narrowest first, each with the most rows (in all) whose keys it holds
NARROW_KEYS = ((2**8, torch.uint8), (2**15, torch.int16))


def key_dtype_for(layout: TableLayout, config: KernelConfig) -> torch.dtype:
    """The sort keys' dtype: under ``index_dtype='auto'`` the narrowest that holds every key (the radix sort
    makes one pass per key byte: one for up to 256 rows in all, two for up to 32,768), else the linear dtype."""
    ldtype = linear_dtype_for(layout, config)
    if config.index_dtype != "auto" or config.has_fault("int32_linearize_past_limit"):
        return ldtype
    for most, dtype in NARROW_KEYS:
        if layout.total_rows <= most:
            return dtype
    return ldtype


def transpose(
    layout: TableLayout,
    layout_tensors: dict[str, torch.Tensor],
    indices: torch.Tensor,
    offsets: torch.Tensor,
    per_sample_weights: Optional[torch.Tensor],
    batch_size: int,
    config: KernelConfig,
    vbe: Optional[VbeTensors] = None,
) -> Transposed:
    """Sort the (bounds-checked) batch by key and split it into runs (``layout_tensors``:
    ``tbe.buckets.device_layout``, for the keys and each run's linear index, row and bucket)."""
    n = indices.numel()
    ldtype = linear_dtype_for(layout, config)
    # an int32 key past 2^31 - 1 (only under the int32 fault) wraps exactly as a 32-bit key would
    bag_of, key = linearize(layout_tensors["sort_base"], indices, offsets, batch_size, key_dtype_for(layout, config),
                            vbe)

    sorted_key, perm = torch.sort(key, stable=True)
    sorted_psw = None
    if per_sample_weights is not None:
        if config.has_fault("unstable_weighted_pairing"):
            # a second, separately computed sort whose ties come out in a different order:
            # sorting the reversed keys stably yields each run in reverse original order,
            # an order any unstable sort is free to produce
            rev = torch.sort(key.flip(0), stable=True).indices
            psw_perm = (n - 1) - rev
        else:
            psw_perm = perm
        sorted_psw = per_sample_weights[psw_perm]
    sorted_bag, run_linear, run_table, run_bucket, run_start, num_runs = run_length_encode(
        sorted_key, perm, bag_of, batch_size, ldtype, layout_tensors, several_buckets(layout, config), vbe,
        config.faults)
    # int64 whatever the index dtype: the backward kernels read offsets only under MEAN, and one
    # offsets dtype halves their specializations (a copy of T*B + 1 values when they are int32)
    return Transposed(
        n=n, batch_size=batch_size, offsets=offsets.to(torch.int64), linear_dtype=ldtype, bag_of=bag_of,
        key=key, perm=perm,
        sorted_key=sorted_key, sorted_bag=sorted_bag, sorted_psw=sorted_psw,
        run_linear=run_linear, run_table=run_table, run_bucket=run_bucket, run_start=run_start, num_runs=num_runs,
        vbe=vbe,
    )


# ----------------------------------------------------------------------------- linearization
LINEARIZE_BLOCK = 1024


def linearize(key_base: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, batch_size: int,
              key_dtype: torch.dtype, vbe: Optional[VbeTensors] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(bag of every lookup, its key ``key_base[t] + id`` in ``key_dtype``), one kernel.

    The bag of position p is the number of bag ends <= p: a binary search over the offsets, first for
    a block's first and last positions, then for each position between the two bags those found. Bags
    are int32 when every bag number fits (32-bit division and modulo in the backward's inner
    loops), else int64; the cast of a key to int32 wraps past 2^31 - 1 like a 32-bit key.
    """
    n = indices.numel()
    device = indices.device
    num_bags = offsets.numel() - 1
    bag_dtype = torch.int32 if num_bags <= INT32_MAX else torch.int64
    bag_of = torch.empty(n, dtype=bag_dtype, device=device)
    key = torch.empty(n, dtype=key_dtype, device=device)
    if n == 0:
        return bag_of, key
    _linearize_kernel[(cdiv(n, LINEARIZE_BLOCK),)](
        indices, offsets, key_base, bag_of, key, n, num_bags, max(batch_size, 1),
        max(1, num_bags).bit_length(), offsets if vbe is None else vbe.bag_feature, BLOCK=LINEARIZE_BLOCK,
        VBE=vbe is not None,
    )
    return bag_of, key


@triton.jit(do_not_specialize=["N", "NUM_BAGS", "B", "STEPS"])
def _linearize_kernel(indices_ptr, offsets_ptr, key_base_ptr, bag_ptr, key_ptr, N, NUM_BAGS, B, STEPS,
                      bag_feature_ptr, BLOCK: tl.constexpr, VBE: tl.constexpr):
    first = tl.program_id(0).to(tl.int64) * BLOCK
    pos = first + tl.arange(0, BLOCK)
    m = pos < N
    # the bags of the block's first and last positions bound every bag in the block
    ends = first + tl.arange(0, 2) * (tl.minimum(first + BLOCK, N) - 1 - first)
    edge = _bag_search(offsets_ptr, ends, tl.zeros([2], dtype=tl.int64), tl.zeros([2], dtype=tl.int64) + NUM_BAGS,
                       ends >= 0, STEPS)
    lo_bag = tl.min(edge, axis=0)
    hi_bag = tl.max(edge, axis=0)
    span = hi_bag - lo_bag
    steps = span * 0
    while span > 0:  # bit_length(hi_bag - lo_bag) halvings
        steps += 1
        span = span // 2
    bag = _bag_search(offsets_ptr, pos, tl.zeros([BLOCK], dtype=tl.int64) + lo_bag,
                      tl.zeros([BLOCK], dtype=tl.int64) + hi_bag, m, steps)
    ids = tl.load(indices_ptr + pos, mask=m, other=0).to(tl.int64)
    key = tl.load(key_base_ptr + feature_of(bag, m, B, bag_feature_ptr, VBE), mask=m, other=0) + ids
    tl.store(bag_ptr + pos, bag.to(bag_ptr.dtype.element_ty), mask=m)
    tl.store(key_ptr + pos, key.to(key_ptr.dtype.element_ty), mask=m)


@triton.jit
def _bag_search(offsets_ptr, pos, lo, hi, m, steps):
    """The first bag in [lo, hi] whose end offsets[k + 1] exceeds pos (hi when none below it does), in
    ``steps`` >= bit_length(hi - lo) halvings."""
    for _ in range(0, steps):
        mid = (lo + hi) // 2
        go = lo < hi
        end = tl.load(offsets_ptr + mid + 1, mask=m & go, other=0).to(tl.int64)
        right = go & (end <= pos)
        lo = tl.where(right, mid + 1, lo)
        hi = tl.where(go & ~right, mid, hi)
    return lo


# ----------------------------------------------------------------------------- run-length encoding
RUN_BLOCK = 1024
RUN_WARPS = 8  # warps of the pass that writes the runs: its gathers of each lookup's bag wait on memory


def run_length_encode(sorted_key: torch.Tensor, perm: torch.Tensor, bag_of: torch.Tensor, batch_size: int,
                      linear_dtype: torch.dtype, layout_tensors: dict[str, torch.Tensor], buckets: bool,
                      vbe: Optional[VbeTensors] = None, planted: tuple[str, ...] = ()):
    """(sorted_bag, run_linear (in ``linear_dtype``), run_table, run_bucket, run_start, num_runs) of the sorted keys:
    a run starts where the key changes. Each block of ``RUN_BLOCK`` sorted positions counts its run starts; an
    inclusive scan of the counts places each block's runs; the second pass writes them with their table and, when
    the layout has several ``buckets``, their bucket (so the short tier knows whether a run is its own in one read,
    without chasing its first lookup), and gathers each sorted lookup's bag. Each run costs the tiers its bytes
    twice (written here, read there), so run_start is int32 where n fits and a run's weight row is left for the
    tiers to compute from its table and linear index."""
    n = sorted_key.numel()
    device = sorted_key.device
    sorted_bag = torch.empty_like(bag_of)
    run_linear = torch.empty(n, dtype=linear_dtype, device=device)
    run_table = torch.empty(n, dtype=torch.int32, device=device)
    run_bucket = torch.empty(n, dtype=torch.int32, device=device) if buckets else None
    run_start = torch.empty(n + 1, dtype=torch.int32 if n < INT32_MAX else torch.int64, device=device)
    num_runs = torch.empty(1, dtype=torch.int64, device=device)  # the last block writes it
    if n == 0:
        run_start.zero_()
        num_runs.zero_()
        return sorted_bag, run_linear, run_table, run_bucket, run_start, num_runs
    blocks = cdiv(n, RUN_BLOCK)
    block_runs = torch.empty(blocks, dtype=torch.int64, device=device)
    fault_bits = kernel_faults(planted, FAULT_RUNS_PER_FEATURE)
    B = max(batch_size, 1)
    bag_feature = bag_of if vbe is None else vbe.bag_feature
    _count_runs_kernel[(blocks,)](sorted_key, perm, bag_of, block_runs, n, B, bag_feature, BLOCK=RUN_BLOCK,
                                  FAULTS=fault_bits, VBE=vbe is not None)
    runs_through = torch.cumsum(block_runs, 0)
    lt = layout_tensors
    _write_runs_kernel[(blocks,)](sorted_key, perm, bag_of, runs_through, lt["hash_size_cumsum"], lt["sort_base"],
                                  lt["bucket_of_table"], sorted_bag, run_linear, run_table,
                                  run_bucket if buckets else run_table, run_start, num_runs, n, B, bag_feature,
                                  BLOCK=RUN_BLOCK, FAULTS=fault_bits, VBE=vbe is not None, BUCKETS=buckets,
                                  num_warps=RUN_WARPS)
    return sorted_bag, run_linear, run_table, run_bucket, run_start, num_runs


@triton.jit
def _run_starts(sorted_ptr, perm_ptr, bag_of_ptr, pos, m, B, bag_feature_ptr, FAULTS: tl.constexpr,
                VBE: tl.constexpr):
    """(key, whether a run starts) at sorted positions ``pos``: where the key changes."""
    key = tl.load(sorted_ptr + pos, mask=m, other=0)
    prev = tl.load(sorted_ptr + pos - 1, mask=m & (pos > 0), other=0)
    start = m & ((pos == 0) | (key != prev))
    if FAULT_RUNS_PER_FEATURE & FAULTS:  # planted: also where the feature changes
        feature = feature_of(tl.load(bag_of_ptr + tl.load(perm_ptr + pos, mask=m, other=0), mask=m, other=0),
                             m, B, bag_feature_ptr, VBE)
        had = m & (pos > 0)
        before = feature_of(tl.load(bag_of_ptr + tl.load(perm_ptr + pos - 1, mask=had, other=0), mask=had, other=0),
                            had, B, bag_feature_ptr, VBE)
        start = start | (m & (feature != before))
    return key, start


@triton.jit(do_not_specialize=["N", "B"])
def _count_runs_kernel(sorted_ptr, perm_ptr, bag_of_ptr, block_runs_ptr, N, B, bag_feature_ptr, BLOCK: tl.constexpr,
                       FAULTS: tl.constexpr, VBE: tl.constexpr):
    pos = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    _, start = _run_starts(sorted_ptr, perm_ptr, bag_of_ptr, pos, pos < N, B, bag_feature_ptr, FAULTS, VBE)
    tl.store(block_runs_ptr + tl.program_id(0), tl.sum(start.to(tl.int64), axis=0))


@triton.jit(do_not_specialize=["N", "B"])
def _write_runs_kernel(sorted_ptr, perm_ptr, bag_of_ptr, runs_through_ptr, hcs_ptr, sort_base_ptr,
                       bucket_of_table_ptr, sorted_bag_ptr, run_linear_ptr, run_table_ptr, run_bucket_ptr,
                       run_start_ptr, num_runs_ptr, N, B, bag_feature_ptr, BLOCK: tl.constexpr,
                       FAULTS: tl.constexpr, VBE: tl.constexpr, BUCKETS: tl.constexpr):
    pid = tl.program_id(0)
    pos = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = pos < N
    key, start = _run_starts(sorted_ptr, perm_ptr, bag_of_ptr, pos, m, B, bag_feature_ptr, FAULTS, VBE)
    before = tl.load(runs_through_ptr + pid - 1, mask=pid > 0, other=0)
    run = before + tl.cumsum(start.to(tl.int64), axis=0) - 1
    tl.store(run_start_ptr + run, pos.to(run_start_ptr.dtype.element_ty), mask=start)
    src = tl.load(perm_ptr + pos, mask=m, other=0)
    bag = tl.load(bag_of_ptr + src, mask=m, other=0)
    tl.store(sorted_bag_ptr + pos, bag, mask=m)
    t = feature_of(bag, m, B, bag_feature_ptr, VBE)
    row = key.to(tl.int64) - tl.load(sort_base_ptr + t, mask=start, other=0)
    linear = tl.load(hcs_ptr + t, mask=start, other=0) + row
    tl.store(run_linear_ptr + run, linear.to(run_linear_ptr.dtype.element_ty), mask=start)
    tl.store(run_table_ptr + run, t.to(tl.int32), mask=start)
    if BUCKETS:
        tl.store(run_bucket_ptr + run, tl.load(bucket_of_table_ptr + t, mask=start, other=0).to(tl.int32),
                 mask=start)
    if pid == tl.num_programs(0) - 1:  # the last block closes the last run
        total = tl.load(runs_through_ptr + pid)
        tl.store(run_start_ptr + total, N.to(run_start_ptr.dtype.element_ty))
        tl.store(num_runs_ptr, total)
