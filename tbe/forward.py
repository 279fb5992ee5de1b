"""Forward, generic path: pooled gather of table rows into the [B, sum D] output.

A program walks up to ``BAGS`` bags of one table; inside a bag it loads ``GATHER`` rows at once as one
[GATHER, BLOCK_D] tile, so that many independent row loads are in flight, and accumulates in fp32. Launches
are bucketed by next_pow2(D); ``KernelConfig.forward_tile`` gives each bucket its gather width, bags and warps,
and ``KernelConfig.forward_bags`` lets a batch of long bags give each program one bag at run time (one
specialization either way).
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from tbe.bounds_check import ForwardCheck, check_id_tile, kernel_args
from tbe.buckets import bucket_tensors
from tbe.config import KernelConfig
from tbe.faults import FAULT_DROP_WIDE, FAULT_FWD_SKIP_LAST, FAULT_MEAN_RAW_LEN, FAULT_VBE_LAST_OFFSET, kernel_faults
from tbe.grid import cdiv
from tbe.layout import row_vector
from tbe.loops import Loop, LoopKind, register_loops
from tbe.modes import Pooling
from tbe.rounding import to_storage
from tbe.routing import Path
from tbe.vbe import VbeTensors


# ----------------------------------------------------------------------------- launch
def forward_generic(
    weights: torch.Tensor,
    layout_tensors: dict[str, torch.Tensor],
    dims: list[int],
    indices: torch.Tensor,
    offsets: torch.Tensor,
    per_sample_weights: Optional[torch.Tensor],
    batch_size: int,
    pooling: Pooling,
    output_dtype: torch.dtype,
    config: KernelConfig,
    out: Optional[torch.Tensor] = None,
    table_subset: Optional[list[int]] = None,
    check: Optional[ForwardCheck] = None,
    vbe: Optional[VbeTensors] = None,
) -> torch.Tensor:
    """Pool every bag of every table (or of ``table_subset``) into ``out`` [B, sum D], or with ``vbe`` into the
    flat VBE output (``batch_size``: the largest B_f).

    With a fused ``check`` the kernel validates and repairs ids as it loads them (offsets
    must already be repaired) and writes the repaired ids to ``check.indices_out``.
    """
    total_dim = sum(dims)
    if out is None:
        shape = (batch_size, total_dim) if vbe is None else (vbe.batch.output_size,)
        out = torch.empty(shape, dtype=output_dtype, device=weights.device)
    if batch_size == 0:
        return out
    weighted = per_sample_weights is not None
    psw = per_sample_weights if weighted else indices  # placeholder pointer, never read
    if vbe is not None:  # each feature's block starts at a multiple of its rows' D: rows are D apart
        vec = row_vector(dims, weights.element_size())
    else:
        vec = row_vector(dims, weights.element_size(), out.stride(0)) if out.stride(1) == 1 else 1
    for block_d, tables in bucket_tensors(dims, config, weights.device, table_subset):
        gather, tile_bags, warps = config.forward_tile(block_d, weighted)
        bags = config.forward_bags(tile_bags, indices.numel(), offsets.numel() - 1)
        grid = (cdiv(batch_size, bags), tables.numel())
        _forward_kernel[grid](
            weights, layout_tensors["weights_offsets"], layout_tensors["dims"], layout_tensors["col_offsets"],
            tables, indices, offsets, psw, out, batch_size, out.stride(0) if vbe is None else 0,
            offsets if vbe is None else vbe.bag_base, offsets if vbe is None else vbe.out_base, len(dims), bags,
            MEAN=int(pooling == Pooling.MEAN), WEIGHTED=weighted, BAGS=tile_bags, GATHER=gather, BLOCK_D=block_d,
            VEC=vec, VBE=vbe is not None,
            **kernel_args(check, indices, offsets,
                          kernel_faults(config.faults, FAULT_FWD_SKIP_LAST, FAULT_MEAN_RAW_LEN, FAULT_DROP_WIDE,
                                        FAULT_VBE_LAST_OFFSET)),
            num_warps=warps,
        )
    return out


# ----------------------------------------------------------------------------- kernel
@triton.jit(do_not_specialize=["B", "out_stride", "num_features", "bags_per_program", "num_indices", "MEAN"])
def _forward_kernel(
    weights_ptr, weights_offsets_ptr, dims_ptr, col_offsets_ptr, table_ids_ptr,
    indices_ptr, offsets_ptr, psw_ptr, out_ptr, B, out_stride, bag_base_ptr, out_base_ptr, num_features,
    bags_per_program, MEAN,
    WEIGHTED: tl.constexpr, BAGS: tl.constexpr, GATHER: tl.constexpr,
    BLOCK_D: tl.constexpr, VEC: tl.constexpr, VBE: tl.constexpr,
    rows_ptr, ids_out_ptr, warn_ptr, record_ptr, raw_offsets_ptr, num_indices,
    CHECK: tl.constexpr, CHECK_WRITE: tl.constexpr, CHECK_COUNT: tl.constexpr, CHECK_RECORD: tl.constexpr,
    FAULTS: tl.constexpr,
):
    """``bags_per_program`` (at most ``BAGS``) bags of one table. Every D and row offset is a multiple of VEC
    (``tbe.layout.row_vector``); rounding them down to one changes nothing and lets the compiler read and write
    VEC-wide vectors. With ``VBE`` feature t has its own count of bags from ``bag_base[t]`` and its rows, D apart,
    from ``out_base[t]`` (``B`` is then the largest count; ``num_features``, F, is read by a planted fault alone)."""
    t = tl.load(table_ids_ptr + tl.program_id(1))
    D = tl.load(dims_ptr + t) // VEC * VEC
    w_base = tl.load(weights_offsets_ptr + t) // VEC * VEC
    if VBE:
        first = tl.load(bag_base_ptr + t)
        num_bags = tl.load(bag_base_ptr + t + 1) - first
        col0 = tl.load(out_base_ptr + t)
        out_stride = D
    else:
        first = t * B
        num_bags = B
        col0 = tl.load(col_offsets_ptr + t)
    if CHECK:
        num_rows = tl.load(rows_ptr + t)
    g = tl.arange(0, GATHER)
    cols = tl.arange(0, BLOCK_D)
    for j in tl.static_range(BAGS):
        b = tl.program_id(0).to(tl.int64) * bags_per_program + j
        if (j < bags_per_program) & (b < num_bags):
            start = tl.load(offsets_ptr + first + b).to(tl.int64)
            end = tl.load(offsets_ptr + first + b + 1).to(tl.int64)
            stop = end
            if FAULT_FWD_SKIP_LAST & FAULTS:
                if end - start > 1:
                    stop = end - 1
            out_b = b
            if VBE:
                if FAULT_VBE_LAST_OFFSET & FAULTS:  # planted: the last feature's rows one late, wrapping in its block
                    if t == num_features - 1:
                        out_b = (b + 1) % num_bags
            out_row = (out_b * out_stride + col0) // VEC * VEC
            for d0 in range(0, D, BLOCK_D):
                c = d0 + cols
                cmask = c < D
                acc = tl.zeros([BLOCK_D], dtype=tl.float32)
                for i in range(start, stop, GATHER):
                    pos = i + g
                    m = pos < stop
                    ids = tl.load(indices_ptr + pos, mask=m, other=0).to(tl.int64)
                    if CHECK:  # fused bounds check: side effects on the first column block only
                        ids = check_id_tile(
                            ids, pos, m & (d0 == 0), num_rows, ids_out_ptr, warn_ptr, record_ptr,
                            num_indices, CHECK_WRITE, CHECK_COUNT, CHECK_RECORD, FAULTS,
                        )
                    rows = tl.load(
                        weights_ptr + w_base + ids[:, None] * D + c[None, :],
                        mask=m[:, None] & cmask[None, :], other=0.0,
                    ).to(tl.float32)
                    if WEIGHTED:
                        w = tl.load(psw_ptr + pos, mask=m, other=0.0).to(tl.float32)
                        rows = rows * w[:, None]
                    acc += tl.sum(rows, axis=0)
                if MEAN != 0:  # a run-time flag: one branch per bag costs nothing, a variant per pooling would
                    length = tl.maximum(end - start, 1).to(tl.float32)
                    if FAULT_MEAN_RAW_LEN & FAULTS:  # planted: the caller's unrepaired bag length
                        raw_len = tl.load(raw_offsets_ptr + first + b + 1) - tl.load(raw_offsets_ptr + first + b)
                        length = tl.maximum(raw_len.to(tl.int64), 1).to(tl.float32)
                    acc = acc / length
                if FAULT_DROP_WIDE & FAULTS:  # planted: columns past 1,024 come out zero
                    acc = tl.where(c < 1024, acc, 0.0)
                tl.store(out_ptr + out_row + c, to_storage(acc, out_ptr.dtype.element_ty), mask=cmask)


# ----------------------------------------------------------------------------- loops
def _bags(a) -> list[tuple[int, int]]:
    """(first bag, bag count) of each table the launch pools."""
    tables = a["table_ids_ptr"].tolist()
    if a["VBE"]:
        base = a["bag_base_ptr"].tolist()
        return [(base[t], base[t + 1] - base[t]) for t in tables]
    return [(t * a["B"], a["B"]) for t in tables]


def _bag_lengths(a) -> torch.Tensor:
    off = a["offsets_ptr"].to(torch.int64)
    lengths = off[1:] - off[:-1]
    return torch.cat([lengths[first: first + n] for first, n in _bags(a)])


register_loops(
    Loop("_forward_kernel", Path.FWD_GENERIC, "bags of a program", LoopKind.TILE,
         lambda a, grid: [(n, a["bags_per_program"]) for _, n in _bags(a)]),
    Loop("_forward_kernel", Path.FWD_GENERIC, "a bag's ids", LoopKind.TILE,
         lambda a, grid: [(_bag_lengths(a), a["GATHER"])]),
)
