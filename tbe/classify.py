"""Long-run classification for the backward: the long runs of one dimension bucket, cut into chunks.

The short tier needs no list: it strides over every run and takes the short ones of its bucket
itself (``tbe.backward_short``). Long runs (SL >= long_run_threshold) are few, so a block of
``classify_block`` runs that holds one reserves its place in the long list with one atomic and
places its runs with a prefix sum (stream compaction); a block with none writes nothing. Long
runs are then expanded into chunks of ``chunk_size`` lookups; each also gets a countdown (its
number of chunks) for the fused long tier. The lists and their counts never leave the device:
later kernels read the counts through device pointers with persistent grids.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from tbe import backend
from tbe.config import KernelConfig
from tbe.faults import FAULT_THRESHOLD_OFF_BY_ONE, kernel_faults
from tbe.grid import cdiv, persistent_grid
from tbe.transpose import Transposed

@dataclasses.dataclass
class Classified:
    """Long-run lists of one dimension bucket (valid prefixes sized by ``counts``, on the device)."""

    counts: torch.Tensor        # [2] int64: long runs, chunks
    long_runs: torch.Tensor     # [n // threshold] run ids (a long run's position here is its long slot)
    chunk_base: torch.Tensor    # [n // threshold] first chunk id of each long slot
    num_chunks: torch.Tensor    # [n // threshold] chunks of each long slot
    countdown: torch.Tensor     # [n // threshold] int32 chunks still to finish (fused tier)
    chunk_slot: torch.Tensor    # [chunk_upper] long slot of each chunk
    chunk_index: torch.Tensor   # [chunk_upper] index of the chunk within its run
    chunk_upper: int            # host-known bound on the number of chunks


def chunk_upper_bound(n: int, config: KernelConfig) -> int:
    """Each long run has SL >= threshold lookups and ceil(SL/chunk) <= SL/chunk + 1 chunks."""
    return max(1, n // config.chunk_size + n // config.long_run_threshold + 1)


def classify(tr: Transposed, bucket: int, config: KernelConfig) -> Classified:
    """List the long runs whose table lies in ``bucket`` and their chunks."""
    n = tr.n
    device = tr.run_start.device
    i64 = dict(dtype=torch.int64, device=device)
    upper = chunk_upper_bound(n, config)
    slots = max(1, n // config.long_run_threshold)  # every long run holds >= threshold of the n lookups
    c = Classified(
        counts=torch.zeros(2, **i64),
        long_runs=torch.empty(slots, **i64),
        chunk_base=torch.empty(slots, **i64), num_chunks=torch.empty(slots, **i64),
        countdown=torch.empty(slots, dtype=torch.int32, device=device),
        chunk_slot=torch.empty(upper, **i64), chunk_index=torch.empty(upper, **i64),
        chunk_upper=upper,
    )
    block = config.classify_block
    ranged = tr.run_bucket is not None
    _classify_kernel[(cdiv(n, block),)](
        tr.run_start, tr.run_bucket if ranged else tr.run_start, tr.num_runs, bucket,
        c.counts, c.long_runs, c.chunk_base, c.num_chunks, c.countdown,
        config.long_run_threshold, config.chunk_size,
        BLOCK=block, FAULTS=kernel_faults(config.faults, FAULT_THRESHOLD_OFF_BY_ONE), RANGED=ranged,
    )
    grid = persistent_grid(config.long_grid_multiplier, n, device)
    _expand_chunks_kernel[(grid,)](
        c.counts, c.chunk_base, c.num_chunks, c.chunk_slot, c.chunk_index, BLOCK=64,
    )
    return c


@triton.jit(do_not_specialize=["BUCKET", "THRESHOLD", "CHUNK"])
def _classify_kernel(
    run_start_ptr, run_bucket_ptr, num_runs_ptr, BUCKET,
    counts_ptr, long_ptr, chunk_base_ptr, num_chunks_ptr, countdown_ptr,
    THRESHOLD, CHUNK, BLOCK: tl.constexpr, FAULTS: tl.constexpr, RANGED: tl.constexpr,
):
    """Block of runs: reserve long slots for its long runs of ``BUCKET`` (every run is in it unless ``RANGED``)."""
    r = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = r < tl.load(num_runs_ptr)
    start = tl.load(run_start_ptr + r, mask=mask, other=0)
    length = tl.load(run_start_ptr + r + 1, mask=mask, other=0) - start
    if FAULT_THRESHOLD_OFF_BY_ONE & FAULTS:  # planted: a run of exactly THRESHOLD lookups is neither short nor long
        is_long = mask & (length > THRESHOLD)
    else:
        is_long = mask & (length >= THRESHOLD)
    if RANGED:
        is_long = is_long & (tl.load(run_bucket_ptr + r, mask=is_long, other=-1) == BUCKET)
    lg = is_long.to(tl.int64)
    n_long = tl.sum(lg, axis=0)
    if n_long > 0:  # one atomic reserves the block's long slots, a prefix sum places each run
        l_base = tl.atomic_add(counts_ptr + 0, n_long)
        l_pos = l_base + tl.cumsum(lg, axis=0) - 1
        nch = tl.where(is_long, (length + CHUNK - 1) // CHUNK, 0)
        c_base = tl.atomic_add(counts_ptr + 1, tl.sum(nch, axis=0))
        c_pos = c_base + tl.cumsum(nch, axis=0) - nch
        tl.store(long_ptr + l_pos, r, mask=is_long)
        tl.store(chunk_base_ptr + l_pos, c_pos, mask=is_long)
        tl.store(num_chunks_ptr + l_pos, nch, mask=is_long)
        tl.store(countdown_ptr + l_pos, nch.to(tl.int32), mask=is_long)


@triton.jit
def _expand_chunks_kernel(counts_ptr, chunk_base_ptr, num_chunks_ptr, chunk_slot_ptr, chunk_index_ptr,
                          BLOCK: tl.constexpr):
    """Write (long slot, chunk index) for every chunk; grid-strides over the device-read long count."""
    num_long = tl.load(counts_ptr + 0)
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
