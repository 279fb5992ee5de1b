"""Bounds checking with FBGEMM's BoundsCheckMode semantics, as Triton kernels.

Three pieces: a small kernel that repairs offsets, a standalone kernel that checks and
repairs ids, and ``check_id_tile``, the same id check as a jit helper that the forward
kernels call on every tile of ids they load (``KernelConfig.fused_bounds_check``).

Semantics (per call; ``n`` = len(indices), bag k = offsets[k] .. offsets[k+1]):

- offsets are repaired to ``o[0] = 0``, ``o[-1] = n`` and ``o[k] = max(o[k-1], min(offsets[k], n))``:
  exactly what FBGEMM's sequential per-bag clamp produces, written as a prefix maximum.
- an id is bad when it is negative or >= E_t of its bag's table; WARNING and IGNORE set it
  to 0 (its per-sample weight is kept), NONE trusts the input and checks nothing.
- WARNING adds one to the counter per bad id, one per bag whose (start, end) had to be
  repaired and one when offsets[-1] != n (FBGEMM's count; FBGEMM zeroes its counter every
  call, ``TritonTBE.bounds_check_warnings`` accumulates over calls).
- FATAL raises ``BoundsCheckError`` from the host: kernels write the first offending
  offsets entry and the first bad id position into a small record, never assert on device.

Known differences from FBGEMM's CPU ``bounds_check_indices`` (see oracles/reference_bounds.py):
id -1 is bad here (FBGEMM skips it as a pruned row), and offsets[0] > 0 is repaired to 0
(FBGEMM leaves it, so the ids before it belong to no bag and are never checked).
Caller tensors are never written: repairs go to fresh copies.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import triton
import triton.language as tl

from tbe.config import KernelConfig
from tbe.faults import FAULT_ID_OFF_BY_ONE, kernel_faults
from tbe.grid import cdiv
from tbe.modes import BoundsCheckMode
from tbe.vbe import VbeTensors


class BoundsCheckError(ValueError):
    """Raised under BoundsCheckMode.FATAL for an out-of-range id or broken offsets.

    ``kind`` is "offsets" or "id"; ``position`` the offending entry of offsets or indices;
    ``table``, ``sample`` and ``bag`` (= table * B + sample, or with VBE the feature's first bag + sample)
    locate it; ``value`` is the bad entry.
    """

    def __init__(self, message: str, kind: str, position: int, value: int, table: int, sample: int, bag: int):
        super().__init__(message)
        self.kind, self.position, self.value = kind, position, value
        self.table, self.sample, self.bag = table, sample, bag


# ----------------------------------------------------------------------------- host side
FOLD_BLOCKS = 4  # up to this many blocks of block maxima, the offsets repair takes two launches instead of three


@dataclasses.dataclass
class CheckState:
    """Device buffers of one check: the warning counter and the first-offender record.

    ``record[0]`` is the first offsets entry the repair changed, ``record[1]`` the first bad id position; both
    start at max(len(offsets), len(indices)), past the end of either, so that one fill sets them on the device
    (setting one entry from the host is a pageable copy, which makes the host wait for the GPU's queue). Only FATAL
    reads it: other modes pass the counter in its place, which no kernel then writes as a record.
    """

    mode: BoundsCheckMode
    warning: torch.Tensor
    record: torch.Tensor

    @property
    def count(self) -> bool:
        return self.mode == BoundsCheckMode.WARNING

    @property
    def write(self) -> bool:
        """Whether repaired ids go to a copy (FATAL only reads: valid inputs come back as they are)."""
        return self.mode in (BoundsCheckMode.WARNING, BoundsCheckMode.IGNORE)

    @property
    def fatal(self) -> bool:
        return self.mode == BoundsCheckMode.FATAL


@dataclasses.dataclass
class ForwardCheck:
    """What a forward kernel needs beyond the batch: the fused id check and the caller's raw offsets.

    With ``fused`` the forward checks ids as it loads them and writes repairs to ``indices_out``;
    ``raw_offsets`` serves the planted fault fwd_mean_wrong_length; ``faults``: the fused check's FAULTS bits.
    """

    raw_offsets: torch.Tensor
    fused: bool = False
    state: Optional[CheckState] = None
    rows: Optional[torch.Tensor] = None
    indices_out: Optional[torch.Tensor] = None
    faults: int = 0


def new_state(mode: BoundsCheckMode, indices: torch.Tensor, offsets: torch.Tensor,
              warning_count: Optional[torch.Tensor]) -> CheckState:
    device = indices.device
    if warning_count is None or mode != BoundsCheckMode.WARNING:
        warning_count = torch.zeros(1, dtype=torch.int64, device=device)
    elif warning_count.dtype != torch.int64 or warning_count.numel() != 1:
        raise ValueError(
            f"warning_count must be a one-element int64 tensor, got {warning_count.dtype} "
            f"with {warning_count.numel()} elements"
        )
    if mode != BoundsCheckMode.FATAL:
        return CheckState(mode, warning_count, warning_count)
    record = torch.full((2,), max(offsets.numel(), indices.numel()), dtype=torch.int64, device=device)
    return CheckState(mode, warning_count, record)


INT32_LIMIT = 2 ** 31


def copy_dtype(indices: torch.Tensor, max_rows: Optional[int]) -> torch.dtype:
    """The dtype of the standalone check's repaired copies: int32 where every repaired id and offset fits (fewer
    than 2^31 ids, tables of at most 2^31 rows, ``max_rows`` given), which halves the copy's writes and every later
    read of it; else the inputs' own."""
    if max_rows is None or indices.dtype != torch.int64 or indices.numel() >= INT32_LIMIT or max_rows > INT32_LIMIT:
        return indices.dtype
    return torch.int32


def repair_offsets(
    indices: torch.Tensor, offsets: torch.Tensor, state: CheckState, config: KernelConfig,
    dtype: Optional[torch.dtype] = None, block_max: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Repaired copy of ``offsets`` (in ``dtype``, default the same); counts bad bags and records the first bad
    entry.

    The repair is a prefix maximum, computed so that no program walks all the offsets: each block's maximum,
    each block's carry (the maximum of the blocks before it), then each block's own scan. Up to ``FOLD_BLOCKS``
    blocks, each repair program takes its carry from the block maxima itself (two launches; the reads grow as the
    square of the blocks); past that a third launch, between the two, scans them. One block needs no carry: one
    launch. ``block_max``: the block maxima, already computed (``check_ids`` of one feature takes them in its
    launch)."""
    fixed = torch.empty_like(offsets, dtype=dtype or offsets.dtype)
    n, block = offsets.numel(), config.bounds_check_block
    blocks = cdiv(n, block)
    fold = blocks <= FOLD_BLOCKS * block
    if block_max is None:
        block_max = torch.empty(blocks, dtype=torch.int64, device=offsets.device)
        if blocks > 1:
            _offsets_block_max_kernel[(blocks,)](offsets, block_max, n, indices.numel(), BLOCK=block, num_warps=4)
    carry = block_max if fold else torch.empty(blocks + 1, dtype=torch.int64, device=offsets.device)
    if not fold:
        _carry_scan_kernel[(1,)](block_max, carry, blocks, BLOCK=block, num_warps=4)
    _repair_offsets_kernel[(blocks,)](
        offsets, fixed, carry, state.warning, state.record, n, indices.numel(),
        COUNT=state.count, RECORD=state.fatal, FOLD=fold, BLOCK=block, num_warps=4,
    )
    return fixed


def check_ids(
    indices: torch.Tensor, fixed_offsets: torch.Tensor, rows_per_table: torch.Tensor,
    batch_size: int, state: CheckState, config: KernelConfig, vbe: Optional[VbeTensors] = None,
    dtype: Optional[torch.dtype] = None, block_max: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Standalone id check over valid (repaired) offsets: repaired copy of ``indices`` (in ``dtype``, default the
    same) under WARNING/IGNORE.

    With ``block_max`` (one feature, no VBE: no id needs the offsets to find its table, so ``fixed_offsets`` may be
    the caller's raw ones) the same launch also writes the offsets' block maxima there, for ``repair_offsets``:
    one launch fewer on a single table, where the check's launches weigh most against a short forward."""
    num_bags = fixed_offsets.numel() - 1
    dtype = dtype or indices.dtype
    blocks_max = 0 if block_max is None or block_max.numel() == 1 else block_max.numel()  # one block: no maximum
    if not state.write:
        out = indices  # FATAL: nothing is written, a valid batch comes back unchanged
    elif num_bags == 0:
        out = indices.to(dtype, copy=True)  # no bags: no id belongs to a table, nothing to check
    else:
        out = torch.empty_like(indices, dtype=dtype)
    n = 0 if num_bags == 0 else indices.numel()
    if n == 0 and blocks_max == 0:
        return out
    features = rows_per_table.numel()
    if blocks_max and (features != 1 or vbe is not None):
        raise ValueError(f"check_ids: block maxima need one feature and no VBE, got {features} features")
    block = config.bounds_check_block
    _check_ids_kernel[(blocks_max + cdiv(n, block),)](
        indices, fixed_offsets, rows_per_table, out, state.warning, state.record, batch_size, n,
        features, (features - 1).bit_length(), fixed_offsets if vbe is None else vbe.bag_base,
        fixed_offsets if block_max is None else block_max, blocks_max, fixed_offsets.numel(), indices.numel(),
        WRITE=state.write, COUNT=state.count, RECORD=state.fatal,
        FAULTS=kernel_faults(config.faults, FAULT_ID_OFF_BY_ONE), BLOCK=block, VBE=vbe is not None,
        MAXIMA=blocks_max > 0, num_warps=4,
    )
    return out


def raise_if_fatal(
    state: CheckState, indices: torch.Tensor, offsets: torch.Tensor, fixed_offsets: torch.Tensor,
    rows_per_table: torch.Tensor, batch_size: int, vbe: Optional[VbeTensors] = None,
) -> None:
    """Under FATAL, read the record (one host sync) and raise naming the first offender."""
    if not state.fatal:
        return
    bad_entry, bad_pos = state.record.tolist()
    n, num_entries = indices.numel(), offsets.numel()
    B = max(batch_size, 1)

    def locate(bag: int) -> tuple[int, int]:
        return divmod(bag, B) if vbe is None else vbe.batch.locate(bag)
    if bad_entry < num_entries:
        value = int(offsets[bad_entry])
        bag = max(bad_entry - 1, 0)
        t, b = locate(bag)
        if num_entries == 1:
            why = f"must equal len(indices) = {n} (the batch has no bags)"
        elif bad_entry == 0:
            why = "must be 0"
        elif bad_entry == num_entries - 1 and value != n:
            why = f"must equal len(indices) = {n}"
        else:
            why = (f"must lie in [offsets[{bad_entry - 1}] = {int(offsets[bad_entry - 1])}, "
                   f"len(indices) = {n}]")
        where = "" if num_entries == 1 else f"; it bounds bag {bag} (table {t}, sample {b})"
        raise BoundsCheckError(
            f"bounds check (FATAL): offsets[{bad_entry}] = {value} {why}{where}",
            "offsets", bad_entry, value, t, b, bag,
        )
    if bad_pos < n:
        value = int(indices[bad_pos])
        off = fixed_offsets.to(torch.int64)
        bag = int(torch.searchsorted(off[1:], torch.tensor([bad_pos], device=off.device), right=True)[0])
        t, b = locate(bag)
        rows = int(rows_per_table[t])
        raise BoundsCheckError(
            f"bounds check (FATAL): indices[{bad_pos}] = {value} is out of range for table {t} "
            f"(rows 0..{rows - 1}); bag {bag} (table {t}, sample {b}), element {bad_pos - int(off[bag])} of the bag",
            "id", bad_pos, value, t, b, bag,
        )


def one_table_maxima(offsets: torch.Tensor, rows_per_table: torch.Tensor, config: KernelConfig,
                     vbe: Optional[VbeTensors] = None) -> Optional[torch.Tensor]:
    """On one feature (one table, no VBE) the ids need no offsets to find their table, so the standalone check runs
    the id check first and its launch also takes the offsets' block maxima: the buffer for them, which
    ``check_ids`` then ``repair_offsets`` take. None elsewhere (the repair runs first and the id check reads the
    repaired offsets)."""
    if rows_per_table.numel() != 1 or vbe is not None:
        return None
    return torch.empty(cdiv(offsets.numel(), config.bounds_check_block), dtype=torch.int64, device=offsets.device)


def bounds_check(
    indices: torch.Tensor,
    offsets: torch.Tensor,
    rows_per_table: torch.Tensor,
    batch_size: int,
    mode: BoundsCheckMode,
    warning_count: Optional[torch.Tensor] = None,
    config: Optional[KernelConfig] = None,
    vbe: Optional[VbeTensors] = None,
    max_rows: Optional[int] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Standalone check: (indices, offsets) repaired per ``mode`` into copies; FATAL raises.

    Under WARNING the number of repairs is added to ``warning_count`` (int64, one element).
    NONE returns the inputs untouched (the caller vouches for them: bad ids then read
    outside the table). With ``max_rows`` (the largest table's rows) the copies may be int32 (``copy_dtype``).
    """
    if mode == BoundsCheckMode.NONE:
        return indices, offsets
    config = config or KernelConfig()
    state = new_state(mode, indices, offsets, warning_count)
    dtype = copy_dtype(indices, max_rows) if state.write else None
    block_max = one_table_maxima(offsets, rows_per_table, config, vbe)
    if block_max is not None:
        fixed_indices = check_ids(indices, offsets, rows_per_table, batch_size, state, config, None, dtype,
                                  block_max)
        fixed_offsets = repair_offsets(indices, offsets, state, config, dtype, block_max)
    else:
        fixed_offsets = repair_offsets(indices, offsets, state, config, dtype)
        fixed_indices = check_ids(indices, fixed_offsets, rows_per_table, batch_size, state, config, vbe, dtype)
    raise_if_fatal(state, indices, offsets, fixed_offsets, rows_per_table, batch_size, vbe)
    if state.fatal:
        return indices, offsets
    return fixed_indices, fixed_offsets


def begin_fused(
    indices: torch.Tensor, offsets: torch.Tensor, rows_per_table: torch.Tensor,
    mode: BoundsCheckMode, warning_count: Optional[torch.Tensor], config: KernelConfig,
) -> tuple[torch.Tensor, ForwardCheck]:
    """Fused check, part one: repair offsets now, hand the forward what it needs to check ids."""
    state = new_state(mode, indices, offsets, warning_count)
    fixed_offsets = repair_offsets(indices, offsets, state, config)
    out = None
    if state.write:
        # positions outside every bag exist only when there are no bags; the forward writes the rest
        out = indices.clone() if offsets.numel() == 1 else torch.empty_like(indices)
    return fixed_offsets, ForwardCheck(offsets, True, state, rows_per_table, out,
                                       kernel_faults(config.faults, FAULT_ID_OFF_BY_ONE))


def finish_fused(check: ForwardCheck, indices: torch.Tensor, offsets: torch.Tensor, fixed_offsets: torch.Tensor,
                 batch_size: int, vbe: Optional[VbeTensors] = None) -> torch.Tensor:
    """Fused check, part two (after the forward): raise under FATAL, else the repaired ids."""
    raise_if_fatal(check.state, indices, offsets, fixed_offsets, check.rows, batch_size, vbe)
    return check.indices_out if check.indices_out is not None else indices


def kernel_args(check: Optional[ForwardCheck], indices: torch.Tensor, offsets: torch.Tensor, faults: int) -> dict:
    """Pointer and constexpr arguments the forward kernels take for the fused check, and their ``FAULTS``: the
    forward's own bits (``faults``) and, with a fused check, the check's."""
    fused = check is not None and check.fused
    state = check.state if fused else None
    placeholder = offsets  # a valid pointer never read when its constexpr is off
    return dict(
        rows_ptr=check.rows if fused else placeholder,
        ids_out_ptr=check.indices_out if fused and check.indices_out is not None else indices,
        warn_ptr=state.warning if fused else placeholder,
        record_ptr=state.record if fused else placeholder,
        raw_offsets_ptr=check.raw_offsets if check is not None else offsets,
        num_indices=indices.numel(),
        CHECK=fused,
        CHECK_WRITE=fused and state.write,
        CHECK_COUNT=fused and state.count,
        CHECK_RECORD=fused and state.fatal,
        FAULTS=faults | (check.faults if fused else 0),
    )


# ----------------------------------------------------------------------------- kernels
@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b)


@triton.jit
def check_id_tile(
    ids, pos, mask, num_rows, ids_out_ptr, warn_ptr, record_ptr, num_indices,
    WRITE: tl.constexpr, COUNT: tl.constexpr, RECORD: tl.constexpr, FAULTS: tl.constexpr,
):
    """Repair a tile of int64 ids (bad -> 0); store the repair, count it, record the first bad position.

    ``mask`` selects the lanes that are real lookups and that this call owns (a forward
    that revisits ids for a second column block passes an all-false mask for the side effects
    and uses only the returned tile).
    """
    limit = num_rows
    if FAULT_ID_OFF_BY_ONE & FAULTS:  # planted: an id equal to the row count passes
        limit = num_rows + 1
    out_of_range = (ids < 0) | (ids >= limit)
    fixed = tl.where(out_of_range, 0, ids)
    bad = out_of_range & mask
    if WRITE:
        tl.store(ids_out_ptr + pos, fixed.to(ids_out_ptr.dtype.element_ty), mask=mask)
    if COUNT or RECORD:
        nbad = tl.sum(bad.to(tl.int32))  # axis=None: over the whole tile, 1-D or 2-D
        if nbad > 0:
            if COUNT:
                tl.atomic_add(warn_ptr, nbad.to(tl.int64))
            if RECORD:
                first = tl.min(tl.where(bad, pos, num_indices))
                tl.atomic_min(record_ptr + 1, first.to(tl.int64))
    return fixed


@triton.jit
def _clamped_offsets(offsets_ptr, i, m, n, last):
    """Each entry as the repair sees it before the prefix maximum: min(offsets[i], n), 0 first, n last."""
    raw = tl.load(offsets_ptr + i, mask=m, other=0).to(tl.int64)
    v = tl.minimum(raw, n)
    v = tl.where(i == 0, 0, v)
    v = tl.where(i == last, n, v)  # with no bags the single entry is the last: n wins
    return raw, tl.where(m, v, 0)  # 0 for lanes past the end: the prefix maximum starts at offsets[0] = 0


@triton.jit
def _offsets_block_max(offsets_ptr, block_max_ptr, b, num_entries, num_indices, BLOCK: tl.constexpr):
    """The largest clamped entry of block b, stored at block_max[b]."""
    i = b.to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    last = num_entries.to(tl.int64) - 1
    _, v = _clamped_offsets(offsets_ptr, i, i <= last, num_indices.to(tl.int64), last)
    tl.store(block_max_ptr + b, tl.max(v, axis=0))


@triton.jit(do_not_specialize=["num_entries", "num_indices"])
def _offsets_block_max_kernel(offsets_ptr, block_max_ptr, num_entries, num_indices, BLOCK: tl.constexpr):
    """Program b: the largest clamped entry of block b."""
    _offsets_block_max(offsets_ptr, block_max_ptr, tl.program_id(0), num_entries, num_indices, BLOCK)


@triton.jit(do_not_specialize=["num_blocks"])
def _carry_scan_kernel(block_max_ptr, carry_ptr, num_blocks, BLOCK: tl.constexpr):
    """One program: carry[b] = the maximum of blocks 0 .. b-1 (carry[0] = 0), one entry per block."""
    lane = tl.arange(0, BLOCK).to(tl.int64)
    running = tl.load(block_max_ptr) * 0
    tl.store(carry_ptr, running)
    for s in range(0, num_blocks, BLOCK):
        i = s + lane
        m = i < num_blocks
        inclusive = tl.maximum(tl.associative_scan(tl.load(block_max_ptr + i, mask=m, other=0), 0, _max_combine),
                               running)
        tl.store(carry_ptr + i + 1, inclusive, mask=m)
        running = tl.max(inclusive, axis=0)


@triton.jit(do_not_specialize=["num_entries", "num_indices"])
def _repair_offsets_kernel(
    offsets_ptr, out_ptr, carry_ptr, warn_ptr, record_ptr, num_entries, num_indices,
    COUNT: tl.constexpr, RECORD: tl.constexpr, FOLD: tl.constexpr, BLOCK: tl.constexpr,
):
    """Program b repairs block b: its own prefix maximum over the carry of the blocks before it. ``FOLD``: the carry
    pointer holds the block maxima, and the program takes the maximum of those before b (block 0 reads none).
    ``RECORD`` (FATAL): the first entry the repair changed goes to the record."""
    b = tl.program_id(0)
    n = num_indices.to(tl.int64)
    last = num_entries.to(tl.int64) - 1
    first_raw = tl.load(offsets_ptr).to(tl.int64)
    i = b.to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    m = i <= last
    raw, v = _clamped_offsets(offsets_ptr, i, m, n, last)
    if FOLD:
        lane = tl.arange(0, BLOCK)
        carry = tl.zeros([BLOCK], dtype=tl.int64)  # 0 for block 0, as the scan's
        for s in range(0, b, BLOCK):
            carry = tl.maximum(carry, tl.load(carry_ptr + s + lane, mask=s + lane < b, other=0))
        carry = tl.max(carry, axis=0)
    else:
        carry = tl.load(carry_ptr + b)
    fixed = tl.maximum(tl.associative_scan(v, 0, _max_combine), carry)
    tl.store(out_ptr + i, fixed.to(out_ptr.dtype.element_ty), mask=m)
    if COUNT:
        # bag i-1 ends at entry i: it needed repair iff its end moved (bag 0 also if its start did)
        expected_end = tl.where(i == last, n, raw)
        bag_bad = (i >= 1) & m & ((fixed != expected_end) | ((i == 1) & (first_raw != 0)))
        last_bad = (i == last) & (raw != n)
        tl.atomic_add(warn_ptr, tl.sum(bag_bad.to(tl.int64) + last_bad.to(tl.int64), axis=0))
    if RECORD:
        changed = m & (fixed != raw)
        tl.atomic_min(record_ptr, tl.min(tl.where(changed, i, last + 1), axis=0))


@triton.jit(do_not_specialize=["B", "num_indices", "num_features", "steps", "blocks_max", "num_entries", "num_ids"])
def _check_ids_kernel(
    indices_ptr, offsets_ptr, rows_ptr, out_ptr, warn_ptr, record_ptr, B, num_indices, num_features, steps,
    bag_base_ptr, block_max_ptr, blocks_max, num_entries, num_ids,
    WRITE: tl.constexpr, COUNT: tl.constexpr, RECORD: tl.constexpr, FAULTS: tl.constexpr, BLOCK: tl.constexpr,
    VBE: tl.constexpr, MAXIMA: tl.constexpr,
):
    """The first ``blocks_max`` programs (``MAXIMA``, one feature) take the block maxima of the raw offsets
    (``num_entries`` of them, ``num_ids`` ids); every other checks a block of ids (``_check_ids_block``)."""
    q = tl.program_id(0)  # this program's block of ids, once the block-maxima programs are counted off
    if MAXIMA:
        if q < blocks_max:
            _offsets_block_max(offsets_ptr, block_max_ptr, q, num_entries, num_ids, BLOCK)
        q -= blocks_max
    if q >= 0:
        _check_ids_block(
            q, indices_ptr, offsets_ptr, rows_ptr, out_ptr, warn_ptr, record_ptr, B, num_indices,
            num_features, steps, bag_base_ptr, WRITE, COUNT, RECORD, FAULTS, BLOCK, VBE,
        )


@triton.jit
def _check_ids_block(
    q, indices_ptr, offsets_ptr, rows_ptr, out_ptr, warn_ptr, record_ptr, B, num_indices, num_features, steps,
    bag_base_ptr,
    WRITE: tl.constexpr, COUNT: tl.constexpr, RECORD: tl.constexpr, FAULTS: tl.constexpr, BLOCK: tl.constexpr,
    VBE: tl.constexpr,
):
    """Check ids q * BLOCK .. + BLOCK against their feature's table: each id's feature is the last one whose first
    id is at or before it, found by a binary search of ``steps`` = ceil(log2(features)) steps over the features'
    first ids (``offsets`` at each feature's first bag: ``f * B``, or ``bag_base[f]``)."""
    pos = q.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = pos < num_indices
    lo = tl.zeros([BLOCK], dtype=tl.int64)
    hi = lo + num_features
    for _ in range(steps):  # invariant: first(lo) <= pos < first(hi), first(num_features) = num_indices
        mid = (lo + hi) // 2
        if VBE:
            first_bag = tl.load(bag_base_ptr + mid, mask=m, other=0)
        else:
            first_bag = mid * B
        first = tl.load(offsets_ptr + first_bag, mask=m, other=0).to(tl.int64)
        lo = tl.where(first <= pos, mid, lo)
        hi = tl.where(first <= pos, hi, mid)
    num_rows = tl.load(rows_ptr + lo, mask=m, other=0)
    ids = tl.load(indices_ptr + pos, mask=m, other=0).to(tl.int64)
    check_id_tile(ids, pos, m, num_rows, out_ptr, warn_ptr, record_ptr, num_indices, WRITE, COUNT, RECORD, FAULTS)
