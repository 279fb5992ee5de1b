"""Backward, small-table path: one small table's row gradients as counts^T @ d_out, with no transpose.

When the forward counted (``tbe.forward_small_table``), every row repeats within a bag, so row r's gradient
is sum_b count(b, r) * d_out[b] (times 1 / L_b under MEAN). A persistent program takes tiles of
``small_table_bags_per_program`` bags, counts their ids as the forward does, and adds counts^T [rows, bags] @
d_out [bags, D] into an fp32 [rows, D] sum by an IEEE fp32 ``tl.dot``: counts of any size and gradients far
below fp16's range stay exact operands. A tile holding a non-finite gradient adds it only to the rows its bag
read (a plain product would spread 0 x inf = NaN to every row). Each program writes its sums and the rows it read
to a workspace; the apply kernel adds the programs' sums in a fixed order, one row a program, and updates only
the rows some bag read, once, through ``tbe.optimizers.apply_row``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tbe.buckets import next_pow2
from tbe.faults import kernel_faults
from tbe.forward_small_table import DOT_MIN, NUM_WARPS, ROWS_MIN, one_hot_counts, wide_ids
from tbe.grid import cdiv, persistent_grid
from tbe.optimizers import apply_row
from tbe.rounding import rounding_faults
from tbe.routing import FLUSH, counting_step

# count programs an SM: each writes a [rows, D] fp32 sum the apply kernel reads back; two an SM ran 10-45% slower
# on an H100 and eight no faster (benchmarks/results/sweep_small_backward_h100.jsonl)
PROGRAMS_PER_SM = 4
APPLY_PARTS = 16     # program sums the apply kernel adds a step


# ----------------------------------------------------------------------------- launch
def backward_small_table(module, indices: torch.Tensor, offsets: torch.Tensor, batch_size: int,
                         grad: torch.Tensor, seed: int, rounding: int) -> None:
    """Apply the update of one step of an eligible single small table (``tbe.routing.counts_backward``) in place
    (``seed``, ``rounding``: the stores' rounding, ``tbe.rounding``)."""
    cfg = module.config
    E, D = module.layout.feature_rows[0], module.layout.feature_dims[0]
    bags = cfg.small_table_bags_per_program
    rows, block_d = max(ROWS_MIN, next_pow2(E)), max(DOT_MIN, next_pow2(D))
    programs = persistent_grid(PROGRAMS_PER_SM, cdiv(batch_size, bags), grad.device)
    sums = module.workspaces.take("small-table row sums", (programs, rows, block_d), torch.float32)
    read = module.workspaces.take("small-table rows read", (programs, rows), torch.int32)
    _small_table_grad_kernel[(programs,)](
        wide_ids(indices), offsets, grad, grad.stride(0), sums, read, batch_size, E, D,
        MEAN=module.pooling.value == "mean", BAGS=bags, M=max(DOT_MIN, bags), H=counting_step(cfg),
        ROWS=rows, BLOCK_D=block_d, FLUSH=FLUSH, num_warps=NUM_WARPS,
    )
    _small_table_apply_kernel[(E,)](
        module.weights, module.momentum, sums, read, programs, D, module.learning_rate, module.eps, seed,
        ADAGRAD=module.optimizer.value == "exact_rowwise_adagrad", ROWS=rows, BLOCK_D=block_d, PARTS=APPLY_PARTS,
        ROUNDING=rounding, FAULTS=kernel_faults(cfg.faults, *rounding_faults(rounding)),
    )


# ----------------------------------------------------------------------------- kernels
@triton.jit(do_not_specialize=["grad_stride", "B", "E", "D"])
def _small_table_grad_kernel(
    indices_ptr, offsets_ptr, grad_ptr, grad_stride, sums_ptr, read_ptr, B, E, D,
    MEAN: tl.constexpr, BAGS: tl.constexpr, M: tl.constexpr, H: tl.constexpr,
    ROWS: tl.constexpr, BLOCK_D: tl.constexpr, FLUSH: tl.constexpr,
):
    """Program p sums tiles p, p + programs, ... of BAGS bags into sums[p] [ROWS, BLOCK_D] and marks the rows
    they read in read[p] [ROWS]."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    r = tl.arange(0, M)
    h = tl.arange(0, H)
    rcol = tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_D)
    cmask = cols < D
    acc = tl.zeros([ROWS, BLOCK_D], dtype=tl.float32)
    read = tl.zeros([ROWS], dtype=tl.int32)
    for tile in range(pid, tl.cdiv(B, BAGS), programs):
        bag = tile * BAGS + r.to(tl.int64)
        bag_ok = (r < BAGS) & (bag < B)
        start = tl.load(offsets_ptr + bag, mask=bag_ok, other=0).to(tl.int64)
        end = tl.load(offsets_ptr + bag + 1, mask=bag_ok, other=0).to(tl.int64)
        length = tl.where(bag_ok, end - start, 0)
        g = tl.load(grad_ptr + bag[:, None] * grad_stride + cols[None, :],
                    mask=bag_ok[:, None] & cmask[None, :], other=0.0).to(tl.float32)
        if MEAN:  # each lookup's coefficient, as the other tiers take it (tbe.backward_short.lookup_coef)
            g = g * tl.div_rn(tl.full([M], 1.0, tl.float32), tl.maximum(length, 1).to(tl.float32))[:, None]
        finite = tl.abs(g) < float("inf")
        g_finite = tl.where(finite, g, 0.0)
        hit = tl.zeros([M, ROWS], dtype=tl.int32)  # which rows each bag read
        longest = tl.max(length, axis=0)
        for f0 in range(0, longest, FLUSH):
            counts = tl.zeros([M, ROWS], dtype=tl.int32)
            for k in range(f0, tl.minimum(f0 + FLUSH, longest), H):
                pos = start[:, None] + k + h[None, :]
                m = pos < end[:, None]
                ids = tl.load(indices_ptr + pos, mask=m, other=0).to(tl.int64)
                counts += one_hot_counts(ids, m, E, rcol)
            acc += tl.dot(tl.trans(counts.to(tl.float32)), g_finite, input_precision="ieee")
            hit = tl.maximum(hit, tl.minimum(counts, 1))
        read = tl.maximum(read, tl.max(hit, axis=0))
        if tl.max(tl.where(finite, 0, 1)) > 0:  # rare: a non-finite gradient reaches only the rows its bag read
            acc += _non_finite(tl.trans(hit.to(tl.float32)), g)
    base = pid.to(tl.int64) * ROWS
    tl.store(sums_ptr + (base + rcol[:, None]) * BLOCK_D + cols[None, :], acc,
             mask=(rcol[:, None] < E) & cmask[None, :])
    tl.store(read_ptr + base + rcol, read, mask=rcol < E)


@triton.jit
def _non_finite(hit_t, g):
    """The non-finite part of hit_t [ROWS, M] @ g [M, BLOCK_D] over the bags each row was read by: NaN where
    they hold a NaN or both infinities, else the infinity they hold, else 0 (to add to the finite sum)."""
    pos = tl.dot(hit_t, (g == float("inf")).to(tl.float32), input_precision="ieee") > 0
    neg = tl.dot(hit_t, (g == -float("inf")).to(tl.float32), input_precision="ieee") > 0
    nan = tl.dot(hit_t, (g != g).to(tl.float32), input_precision="ieee") > 0
    inf = tl.where(pos, float("inf"), tl.where(neg, -float("inf"), 0.0))
    return tl.where(nan | (pos & neg), float("nan"), inf)


@triton.jit(do_not_specialize=["programs", "D", "seed"])
def _small_table_apply_kernel(
    weights_ptr, momentum_ptr, sums_ptr, read_ptr, programs, D, lr, eps, seed,
    ADAGRAD: tl.constexpr, ROWS: tl.constexpr, BLOCK_D: tl.constexpr, PARTS: tl.constexpr,
    ROUNDING: tl.constexpr, FAULTS: tl.constexpr,
):
    """Row program_id(0): its gradient is the programs' sums added in order, PARTS at a time; a row no bag read
    keeps its weights and state."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    cmask = cols < D
    parts = tl.arange(0, PARTS)
    acc = tl.zeros([PARTS, BLOCK_D], dtype=tl.float32)
    read = tl.zeros([PARTS], dtype=tl.int32)
    for p0 in range(0, programs, PARTS):
        p = p0 + parts
        pm = p < programs
        acc += tl.load(sums_ptr + ((p.to(tl.int64) * ROWS + row) * BLOCK_D)[:, None] + cols[None, :],
                       mask=pm[:, None] & cmask[None, :], other=0.0)
        read = tl.maximum(read, tl.load(read_ptr + p.to(tl.int64) * ROWS + row, mask=pm, other=0))
    if tl.max(read, axis=0) > 0:
        g = tl.sum(acc, axis=0)
        apply_row(weights_ptr + row * D, cols, cmask, g, momentum_ptr, row, D, lr, eps, ADAGRAD, seed, ROUNDING,
                  FAULTS)
