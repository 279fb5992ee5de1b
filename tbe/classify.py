"""Run classification for the backward: short runs vs long runs, long runs cut into chunks.

Per dimension bucket, a block of ``classify_block`` runs reserves its place in each output
list with one atomic per list and places its runs with a prefix sum (stream compaction),
so the lists and their counts never leave the device. Each short slot also gets its run's
record (first sorted position, length, linear index, table, the row's offset in the packed
weights), so the short tier reads one record instead of chasing run -> table -> row. Long runs (SL >= long_run_threshold)
are then expanded into chunks of ``chunk_size`` lookups; each long run also gets a
countdown (its number of chunks) for the fused long tier. Later kernels read the counts
through device pointers with persistent grids.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from tbe import backend
from tbe.config import KernelConfig
from tbe.transpose import Transposed

# counts[k] layout per bucket: number of short runs, long runs, chunks
SHORT, LONG, CHUNKS = 0, 1, 2


def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors persistent grids are sized from (2 under the interpreter,
    where programs run one after another anyway)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 2


def persistent_grid(multiplier: int, upper: int, device: torch.device) -> int:
    """multiplier x SMs programs, never more than the host-known upper bound of work items."""
    return max(1, min(multiplier * num_sms(device), upper))


@dataclasses.dataclass
class Classified:
    """Run lists of one dimension bucket (valid prefixes sized by ``counts``, on the device)."""

    counts: torch.Tensor        # [3] int64: short runs, long runs, chunks
    short_runs: torch.Tensor    # [n] run ids
    short_start: torch.Tensor   # [n] first sorted position of each short slot's run
    short_length: torch.Tensor  # [n] its segment length
    short_linear: torch.Tensor  # [n] its linear index (the optimizer state's row)
    short_wrow: torch.Tensor    # [n] element offset of its row in the packed weights
    short_table: torch.Tensor   # [n] its table
    long_runs: torch.Tensor     # [n] run ids (a long run's position here is its long slot)
    chunk_base: torch.Tensor    # [n] first chunk id of each long slot
    num_chunks: torch.Tensor    # [n] chunks of each long slot
    countdown: torch.Tensor     # [n] int32 chunks still to finish (fused tier)
    chunk_slot: torch.Tensor    # [chunk_upper] long slot of each chunk
    chunk_index: torch.Tensor   # [chunk_upper] index of the chunk within its run
    chunk_upper: int            # host-known bound on the number of chunks


def chunk_upper_bound(n: int, config: KernelConfig) -> int:
    """Each long run has SL >= threshold lookups and ceil(SL/chunk) <= SL/chunk + 1 chunks."""
    return max(1, n // config.chunk_size + n // config.long_run_threshold + 1)


def classify(
    tr: Transposed, layout_tensors: dict[str, torch.Tensor], bucket: int, config: KernelConfig
) -> Classified:
    """Split the runs whose table lies in ``bucket`` into short and long lists and chunks."""
    n = tr.n
    device = tr.run_start.device
    i64 = dict(dtype=torch.int64, device=device)
    upper = chunk_upper_bound(n, config)
    c = Classified(
        counts=torch.zeros(3, **i64),
        short_runs=torch.empty(n, **i64), short_start=torch.empty(n, **i64), short_length=torch.empty(n, **i64),
        short_linear=torch.empty(n, **i64), short_wrow=torch.empty(n, **i64), short_table=torch.empty(n, **i64),
        long_runs=torch.empty(n, **i64),
        chunk_base=torch.empty(n, **i64), num_chunks=torch.empty(n, **i64),
        countdown=torch.empty(n, dtype=torch.int32, device=device),
        chunk_slot=torch.empty(upper, **i64), chunk_index=torch.empty(upper, **i64),
        chunk_upper=upper,
    )
    block = config.classify_block
    lt = layout_tensors
    _classify_kernel[(triton.cdiv(n, block),)](
        tr.run_start, tr.run_linear, tr.sorted_bag, tr.num_runs, lt["bucket_of_table"],
        lt["dims"], lt["weights_offsets"], lt["hash_size_cumsum"], tr.batch_size, bucket,
        c.counts, c.short_runs, c.short_start, c.short_length, c.short_linear, c.short_wrow, c.short_table,
        c.long_runs, c.chunk_base, c.num_chunks, c.countdown,
        config.long_run_threshold, config.chunk_size,
        BLOCK=block, FAULT_OFF_BY_ONE=config.has_fault("long_threshold_off_by_one"),
    )
    grid = persistent_grid(config.long_grid_multiplier, n, device)
    _expand_chunks_kernel[(grid,)](
        c.counts, c.chunk_base, c.num_chunks, c.chunk_slot, c.chunk_index, BLOCK=64,
    )
    return c


@triton.jit(do_not_specialize=["B", "BUCKET", "THRESHOLD", "CHUNK"])
def _classify_kernel(
    run_start_ptr, run_linear_ptr, sorted_bag_ptr, num_runs_ptr, bucket_of_table_ptr,
    dims_ptr, weights_offsets_ptr, hcs_ptr, B, BUCKET,
    counts_ptr, short_ptr, short_start_ptr, short_length_ptr, short_linear_ptr, short_wrow_ptr, short_table_ptr,
    long_ptr, chunk_base_ptr, num_chunks_ptr, countdown_ptr,
    THRESHOLD, CHUNK, BLOCK: tl.constexpr, FAULT_OFF_BY_ONE: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    num_runs = tl.load(num_runs_ptr)
    mask = r < num_runs
    start = tl.load(run_start_ptr + r, mask=mask, other=0)
    length = tl.load(run_start_ptr + r + 1, mask=mask, other=0) - start
    bag = tl.load(sorted_bag_ptr + start, mask=mask, other=0)
    t = bag // B
    bk = tl.load(bucket_of_table_ptr + t, mask=mask, other=-1)
    mask = mask & (bk == BUCKET)
    if FAULT_OFF_BY_ONE:
        is_long = mask & (length > THRESHOLD)
        is_short = mask & (length < THRESHOLD)
    else:
        is_long = mask & (length >= THRESHOLD)
        is_short = mask & (length < THRESHOLD)
    # short list: one atomic reserves the block's space, a prefix sum places each run
    s = is_short.to(tl.int64)
    s_base = tl.atomic_add(counts_ptr + 0, tl.sum(s, axis=0))
    s_pos = s_base + tl.cumsum(s, axis=0) - 1
    lin = tl.load(run_linear_ptr + r, mask=is_short, other=0).to(tl.int64)
    w_row = (tl.load(weights_offsets_ptr + t, mask=is_short, other=0)
             + (lin - tl.load(hcs_ptr + t, mask=is_short, other=0)) * tl.load(dims_ptr + t, mask=is_short, other=0))
    tl.store(short_ptr + s_pos, r, mask=is_short)
    tl.store(short_start_ptr + s_pos, start, mask=is_short)
    tl.store(short_length_ptr + s_pos, length, mask=is_short)
    tl.store(short_linear_ptr + s_pos, lin, mask=is_short)
    tl.store(short_wrow_ptr + s_pos, w_row, mask=is_short)
    tl.store(short_table_ptr + s_pos, t, mask=is_short)
    # long list and its chunk ranges
    lg = is_long.to(tl.int64)
    l_base = tl.atomic_add(counts_ptr + 1, tl.sum(lg, axis=0))
    l_pos = l_base + tl.cumsum(lg, axis=0) - 1
    nch = tl.where(is_long, (length + CHUNK - 1) // CHUNK, 0)
    c_base = tl.atomic_add(counts_ptr + 2, tl.sum(nch, axis=0))
    c_pos = c_base + tl.cumsum(nch, axis=0) - nch
    tl.store(long_ptr + l_pos, r, mask=is_long)
    tl.store(chunk_base_ptr + l_pos, c_pos, mask=is_long)
    tl.store(num_chunks_ptr + l_pos, nch, mask=is_long)
    tl.store(countdown_ptr + l_pos, nch.to(tl.int32), mask=is_long)


@triton.jit
def _expand_chunks_kernel(counts_ptr, chunk_base_ptr, num_chunks_ptr, chunk_slot_ptr, chunk_index_ptr,
                          BLOCK: tl.constexpr):
    """Write (long slot, chunk index) for every chunk; grid-strides over the device-read long count."""
    num_long = tl.load(counts_ptr + 1)
    s = tl.program_id(0).to(tl.int64)
    step = tl.num_programs(0)
    k = tl.arange(0, BLOCK)
    while s < num_long:
        base = tl.load(chunk_base_ptr + s)
        nch = tl.load(num_chunks_ptr + s)
        k0 = 0
        while k0 < nch:
            kk = k0 + k
            m = kk < nch
            tl.store(chunk_slot_ptr + base + kk, s + 0 * kk, mask=m)
            tl.store(chunk_index_ptr + base + kk, kk, mask=m)
            k0 += BLOCK
        s += step
