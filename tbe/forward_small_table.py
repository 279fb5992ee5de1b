"""Forward, small-table path: a pooled sum as counts times the whole table, on tensor cores.

When one small table (E <= 64 rows) is read many times per bag, every row repeats, so a bag's sum is
sum_r count(bag, r) * row_r. A program takes ``small_table_bags_per_program`` bags side by side: each
step reads the next ``small_table_histogram_ids`` ids of every bag and adds their one-hot rows into
counts [bags, rows] (one compare a row per id, no gather, no histogram op), and every ``FLUSH`` ids a
bag ``tl.dot`` multiplies the counts by the table [rows, D] into the fp32 sum (a count up to 2,048 is
exact in fp16, and the fp16 products are exact in fp32). An id costs one compare a row (the rows padded to
``ROWS_MIN``) and no load of a table row, so the path pays where E is small and bags are long.

Eligibility is a pure function of host-known values, so choosing the path never syncs:
the pooling condition is on the mean bag length, ``len(indices) >= small_table_min_pooling * B``,
not on the minimum (which would need the offsets on the host). The kernel is exact for
any bag length, short or empty bags included; the condition only says when it pays.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from tbe.bounds_check import ForwardCheck, check_id_tile, kernel_args
from tbe.buckets import next_pow2
from tbe.config import KernelConfig
from tbe.faults import FAULT_MEAN_RAW_LEN, kernel_faults
from tbe.grid import cdiv
from tbe.modes import Pooling
from tbe.routing import FLUSH, counting_step

DOT_MIN = 16  # tl.dot needs M, N, K >= 16 (compiled and interpreted)
# the compare [bags, ids, rows] compiles to a fast layout at 64 rows and two warps: fewer rows or more warps ran
# 2-20x slower on an H100 (benchmarks/results/sweep_small_counts_h100.jsonl), so small tables pad to 64 rows
ROWS_MIN = 64
NUM_WARPS = 2


# ----------------------------------------------------------------------------- eligibility
def ineligible_reason(
    dims: list[int],
    rows: list[int],
    num_indices: int,
    batch_size: int,
    weights_dtype: torch.dtype,
    output_dtype: torch.dtype,
    weighted: bool,
    config: KernelConfig,
    vbe: bool = False,
) -> Optional[str]:
    """Why this launch may not take the small-table path, or None when it may (``vbe``: batch sizes vary per
    feature)."""
    if not config.small_table_path:
        return "KernelConfig.small_table_path is off"
    if vbe:
        return "variable batch per feature (the path takes one fixed batch)"
    if len(dims) != 1:
        return f"{len(dims)} tables (the path takes a single feature)"
    E, D = rows[0], dims[0]
    if E > config.small_table_max_rows:
        return f"E={E} > small_table_max_rows={config.small_table_max_rows}"
    if not config.small_table_min_dim <= D <= config.small_table_max_dim:
        return f"D={D} outside [{config.small_table_min_dim}, {config.small_table_max_dim}]"
    if weights_dtype != torch.float16:
        return f"weights {weights_dtype} (the path takes fp16)"
    if output_dtype != torch.float32:
        return f"output {output_dtype} (the path writes fp32)"
    if weighted:
        return "per-sample weights (the path counts unweighted ids)"
    if batch_size < 1:
        return "empty batch"
    if num_indices < config.small_table_min_pooling * batch_size:
        return (f"mean bag length {num_indices / batch_size:.3g} < "
                f"small_table_min_pooling={config.small_table_min_pooling}")
    return None


def eligible(*args, **kwargs) -> bool:
    """Whether the launch takes the small-table path (arguments as ``ineligible_reason``)."""
    return ineligible_reason(*args, **kwargs) is None


# ----------------------------------------------------------------------------- launch
def wide_ids(indices: torch.Tensor) -> torch.Tensor:
    """The ids as the small-table kernels read them: int64. On int32 ids their compare compiles to a layout that
    ran 4x slower in the forward and 15x in the backward on an H100, where widening costs one copy."""
    return indices if indices.dtype == torch.int64 else indices.to(torch.int64)


def forward_small_table(
    weights: torch.Tensor,
    dims: list[int],
    rows: list[int],
    indices: torch.Tensor,
    offsets: torch.Tensor,
    batch_size: int,
    pooling: Pooling,
    config: KernelConfig,
    check: Optional[ForwardCheck] = None,
) -> torch.Tensor:
    """Pooled fp32 output [B, D] of one eligible small table (see ``eligible``)."""
    E, D = rows[0], dims[0]
    out = torch.empty((batch_size, D), dtype=torch.float32, device=weights.device)
    bags = config.small_table_bags_per_program
    grid = (cdiv(batch_size, bags),)
    indices = wide_ids(indices)
    _small_table_kernel[grid](
        weights, indices, offsets, out, batch_size, E, D, out.stride(0),
        MEAN=pooling == Pooling.MEAN,
        BAGS=bags, M=max(DOT_MIN, bags), H=counting_step(config),
        ROWS=max(ROWS_MIN, next_pow2(E)), BLOCK_D=max(DOT_MIN, next_pow2(D)), FLUSH=FLUSH,
        **kernel_args(check, indices, offsets, kernel_faults(config.faults, FAULT_MEAN_RAW_LEN)),
        num_warps=NUM_WARPS,
    )
    return out


# ----------------------------------------------------------------------------- kernel
@triton.jit(do_not_specialize=["B", "E", "D", "out_stride", "num_indices"])
def _small_table_kernel(
    weights_ptr, indices_ptr, offsets_ptr, out_ptr, B, E, D, out_stride,
    MEAN: tl.constexpr, BAGS: tl.constexpr, M: tl.constexpr, H: tl.constexpr,
    ROWS: tl.constexpr, BLOCK_D: tl.constexpr, FLUSH: tl.constexpr,
    rows_ptr, ids_out_ptr, warn_ptr, record_ptr, raw_offsets_ptr, num_indices,
    CHECK: tl.constexpr, CHECK_WRITE: tl.constexpr, CHECK_COUNT: tl.constexpr, CHECK_RECORD: tl.constexpr,
    FAULTS: tl.constexpr,
):
    """Bags pid*BAGS .. +BAGS (rows of an [M, ...] tile, M >= BAGS): counts [M, ROWS] @ table [ROWS, BLOCK_D]."""
    pid = tl.program_id(0).to(tl.int64)
    r = tl.arange(0, M)
    bag = pid * BAGS + r
    bag_ok = (r < BAGS) & (bag < B)
    start = tl.load(offsets_ptr + bag, mask=bag_ok, other=0).to(tl.int64)
    end = tl.load(offsets_ptr + bag + 1, mask=bag_ok, other=0).to(tl.int64)
    length = tl.where(bag_ok, end - start, 0)
    longest = tl.max(length, axis=0)

    rcol = tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_D)
    cmask = cols < D
    table = tl.load(
        weights_ptr + rcol[:, None] * D + cols[None, :],
        mask=(rcol[:, None] < E) & cmask[None, :], other=0.0,
    ).to(tl.float16)
    acc = tl.zeros([M, BLOCK_D], dtype=tl.float32)
    h = tl.arange(0, H)
    for f0 in range(0, longest, FLUSH):
        counts = tl.zeros([M, ROWS], dtype=tl.int32)
        for k in range(f0, tl.minimum(f0 + FLUSH, longest), H):
            pos = start[:, None] + k + h[None, :]
            m = pos < end[:, None]
            ids = tl.load(indices_ptr + pos, mask=m, other=0).to(tl.int64)
            if CHECK:
                ids = check_id_tile(ids, pos, m, E, ids_out_ptr, warn_ptr, record_ptr, num_indices,
                                    CHECK_WRITE, CHECK_COUNT, CHECK_RECORD, FAULTS)
            counts += one_hot_counts(ids, m, E, rcol)
        acc += tl.dot(counts.to(tl.float16), table, out_dtype=tl.float32)

    if MEAN:
        denom = length
        if FAULT_MEAN_RAW_LEN & FAULTS:  # planted: the caller's unrepaired bag length
            denom = (tl.load(raw_offsets_ptr + bag + 1, mask=bag_ok, other=1)
                     - tl.load(raw_offsets_ptr + bag, mask=bag_ok, other=0)).to(tl.int64)
        acc = acc / tl.maximum(denom, 1).to(tl.float32)[:, None]
    tl.store(out_ptr + bag[:, None] * out_stride + cols[None, :], acc, mask=bag_ok[:, None] & cmask[None, :])


@triton.jit
def one_hot_counts(ids, m, E, rcol):
    """How many of each bag's ids (a [bags, ids] tile, lanes ``m`` live) name each row ``rcol``: one compare a row
    per id; an id past the table counts nowhere. The small-table backward counts with it too."""
    row = tl.where(m & (ids >= 0) & (ids < E), ids, -1).to(tl.int32)
    return tl.sum((row[:, :, None] == rcol[None, None, :]).to(tl.int32), axis=1)
