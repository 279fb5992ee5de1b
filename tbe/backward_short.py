"""Backward, short tier: runs with SL < long_run_threshold, no other program touches their rows.

A persistent grid strides over the runs of its bucket (with several buckets each program finds their
range by a binary search: the transpose's keys put a bucket's runs together) and takes those
shorter than the threshold (the long tiers take the rest), reading each run's start, end,
linear index, row offset, table and bucket (written by the transpose) side by side; the
table's D and output column are one small cached read after them. With one run a program
(``KernelConfig.short_runs`` of the bucket) a program takes one run at a time and gathers its
upstream-gradient rows ``GATHER`` at a time; with R > 1 (rows that fit one column block) it
takes R runs side by side as an [R, BLOCK_D] tile, prefetches their weight rows and adds one
gradient row of each per step, so R independent row loads are in flight even when most runs
hold a single lookup (per-run values are kept [R, 1] so no layout conversion sits in the
loop). Either way the row gradient accumulates in fp32, the optimizer runs once and the row
is written back with plain stores. Rows wider than the bucket's BLOCK_D loop over columns;
row-wise Adagrad then makes two passes (squared sum first, update second), recomputing the
same gradient in the same order so both passes agree bit for bit.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tbe.grid import cdiv, persistent_grid
from tbe.faults import FAULT_ACC_W, FAULT_LANE_MASK, FAULT_MOMENTUM_BF16, FAULT_SHORT_ONE_PASS, kernel_faults
from tbe.layout import row_vector
from tbe.loops import Loop, LoopKind, register_loops
from tbe.optimizers import update_row
from tbe.rounding import round_for_storage, rounding_faults
from tbe.routing import Path
from tbe.vbe import bag_args, feature_of, row_strides


# ----------------------------------------------------------------------------- launch
def backward_short(
    module, tr, bucket: int, grad: torch.Tensor, block_d: int, wide: bool, seed: int, rounding: int,
) -> None:
    """Apply the update to every short run of dimension bucket ``bucket`` (``seed``, ``rounding``: the stores'
    rounding, ``tbe.rounding``). When the runs carry buckets (the module has several) the programs first find the
    range of this one's runs."""
    ranged = tr.run_bucket is not None
    cfg = module.config
    weighted = tr.sorted_psw is not None
    lt = module.layout_tensors
    args = (
        module.weights, module.momentum, grad, grad.stride(0), tr.num_runs,
        tr.run_start, tr.run_linear, tr.run_table, tr.run_bucket if ranged else tr.run_table,
        tr.sorted_bag, tr.sorted_psw if weighted else tr.run_start, tr.offsets, lt["dims"], lt["col_offsets"],
        lt["weights_offsets"], lt["hash_size_cumsum"], tr.batch_size, bucket, cfg.long_run_threshold,
        module.learning_rate, module.eps, seed,
    )
    flags = dict(
        WEIGHTED=weighted, MEAN=module.pooling.value == "mean",
        ADAGRAD=module.optimizer.value == "exact_rowwise_adagrad",
        BLOCK_D=block_d, SHARED=module.layout.shared, **bag_args(tr.vbe, tr.run_start),
        ROUNDING=rounding, RANGED=ranged, num_warps=cfg.bwd_short_num_warps,
    )
    runs = cfg.short_runs(block_d)
    if runs > 1 and not wide:
        grid = persistent_grid(cfg.short_grid_multiplier, cdiv(tr.n, runs), grad.device)
        vec = row_vector(module.layout.dims, module.weights.element_size(), *row_strides(grad, tr.vbe))
        _short_rows_kernel[(grid,)](*args, RUNS=runs, VEC=vec, **flags,
                                    FAULTS=kernel_faults(cfg.faults, FAULT_ACC_W, FAULT_LANE_MASK, FAULT_MOMENTUM_BF16,
                                                         FAULT_SHORT_ONE_PASS, *rounding_faults(rounding)))
        return
    grid = persistent_grid(cfg.short_grid_multiplier, tr.n, grad.device)
    _short_kernel[(grid,)](
        *args, GATHER=cfg.bwd_short_gather_weighted if weighted else cfg.bwd_short_gather_unweighted,
        WIDE=wide, **flags, FAULTS=kernel_faults(cfg.faults, FAULT_ACC_W, *rounding_faults(rounding)),
    )


def side_by_side(cfg) -> bool:
    """Whether any bucket's rows that fit one column block take the side-by-side kernel (``short_runs`` > 1)."""
    return cfg.most_short_runs() > 1


# ----------------------------------------------------------------------------- kernels
@triton.jit
def grad_row(bag, m, B, grad_stride, col0, col_offsets_ptr, SHARED: tl.constexpr, bag_row_ptr, VBE: tl.constexpr):
    """Offset of each lookup's d_out slice: row b of its bag, at the run's output column ``col0``, or with
    ``SHARED`` (features sharing tables: one run's lookups may sit in different columns) at its own feature's;
    with ``VBE`` its bag's own row offset (``tbe.vbe``), which holds the feature's column block too."""
    if VBE:
        return tl.load(bag_row_ptr + bag, mask=m, other=0)
    row = (bag % B).to(tl.int64) * grad_stride  # bags may be int32; row offsets b * stride need 64 bits
    if SHARED:
        return row + tl.load(col_offsets_ptr + bag // B, mask=m, other=0)
    return row + col0


@triton.jit
def gather_grad(
    grad_ptr, grad_stride, sorted_bag_ptr, sorted_psw_ptr, offsets_ptr, B, col0, col_offsets_ptr, cols, cmask,
    start, end, acc_dtype,
    WEIGHTED: tl.constexpr, MEAN: tl.constexpr, GATHER: tl.constexpr, BLOCK_D: tl.constexpr,
    FAULTS: tl.constexpr, STAGES: tl.constexpr, SHARED: tl.constexpr, bag_row_ptr, VBE: tl.constexpr,
):
    """Sum over sorted lookups [start, end) of coef * d_out[b, col + cols] in fp32 (``grad_row``), where
    coef = per-sample weight (if weighted) / L(t, b) (if MEAN). With the accumulate fault
    the running sum is rounded to ``acc_dtype`` (the weights' dtype) after every step. ``STAGES``: the loop's
    software-pipeline depth (1: none)."""
    g = tl.arange(0, GATHER)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for i in tl.range(start, end, GATHER, num_stages=STAGES):
        pos = i + g
        m = pos < end
        bag = tl.load(sorted_bag_ptr + pos, mask=m, other=0)
        row = grad_row(bag, m, B, grad_stride, col0, col_offsets_ptr, SHARED, bag_row_ptr, VBE)
        rows = tl.load(
            grad_ptr + row[:, None] + cols[None, :],
            mask=m[:, None] & cmask[None, :], other=0.0,
        ).to(tl.float32)
        if WEIGHTED or MEAN:
            rows = rows * lookup_coef(sorted_psw_ptr, offsets_ptr, pos, bag, m, WEIGHTED, MEAN)[:, None]
        if FAULT_ACC_W & FAULTS:
            acc = (acc + tl.sum(rows, axis=0)).to(acc_dtype).to(tl.float32)
        else:
            acc += tl.sum(rows, axis=0)
    return acc


@triton.jit
def lookup_coef(sorted_psw_ptr, offsets_ptr, pos, bag, m, WEIGHTED: tl.constexpr, MEAN: tl.constexpr):
    """Each sorted lookup's factor on its gradient row, in ``pos``'s shape: its per-sample weight (if weighted)
    over its bag's length L(t, b) (if MEAN)."""
    coef = tl.full(pos.shape, 1.0, tl.float32)
    if WEIGHTED:
        coef = tl.load(sorted_psw_ptr + pos, mask=m, other=0.0).to(tl.float32)
    if MEAN:
        lo = tl.load(offsets_ptr + bag, mask=m, other=0)
        hi = tl.load(offsets_ptr + bag + 1, mask=m, other=1)
        coef = tl.div_rn(coef, tl.maximum(hi - lo, 1).to(tl.float32))
    return coef


@triton.jit
def _run_block(src, flags: tl.constexpr, d0, cols, cmask):
    """A column block of one short run's gradient (``update_row``'s source): ``gather_grad`` over it."""
    grad_ptr, grad_stride, bag_ptr, psw_ptr, offsets_ptr, B, col0, col_offsets_ptr, start, end, weights_ptr, \
        bag_row_ptr = src
    WEIGHTED: tl.constexpr = flags[0]
    MEAN: tl.constexpr = flags[1]
    GATHER: tl.constexpr = flags[2]
    BLOCK_D: tl.constexpr = flags[3]
    FAULTS: tl.constexpr = flags[4]
    SHARED: tl.constexpr = flags[5]
    VBE: tl.constexpr = flags[6]
    return gather_grad(grad_ptr, grad_stride, bag_ptr, psw_ptr, offsets_ptr, B, col0, col_offsets_ptr, d0 + cols,
                       cmask, start, end, weights_ptr.dtype.element_ty, WEIGHTED, MEAN, GATHER, BLOCK_D, FAULTS,
                       1, SHARED, bag_row_ptr, VBE)


@triton.jit
def bucket_runs(run_bucket_ptr, num_runs, BUCKET, RANGED: tl.constexpr):
    """(first, end) of the runs of ``BUCKET``: with ``RANGED`` a binary search for the first run of it and of the
    next bucket (the runs are in bucket order), else every run. A constexpr: one-bucket modules compile without
    the search, whose registers would lower their occupancy."""
    if RANGED:
        lo = tl.zeros([2], dtype=tl.int64)
        hi = lo + num_runs
        want = BUCKET + tl.arange(0, 2)
        span = num_runs
        while span > 0:
            mid = (lo + hi) // 2
            go = lo < hi
            below = go & (tl.load(run_bucket_ptr + mid, mask=go, other=0) < want)
            lo = tl.where(below, mid + 1, lo)
            hi = tl.where(go & ~below, mid, hi)
            span = span // 2
        first = tl.min(lo, axis=0)
        end = tl.max(lo, axis=0)
    else:
        first = num_runs * 0
        end = num_runs
    return first, end


@triton.jit
def _short_run(r, num_runs, run_start_ptr, run_linear_ptr, table_ptr, run_bucket_ptr, dims_ptr, col_offsets_ptr,
               weights_offsets_ptr, hcs_ptr, BUCKET, THRESHOLD, RANGED: tl.constexpr):
    """(is short in this bucket, start, end, linear index, D, output column, row offset) of runs ``r``
    (any shape): one read of the run's own fields (whether it is short here among them, so the
    gradient gather can start; with one bucket every run is in it), then its table's layout, small and cached:
    D, output column, and where its rows start."""
    valid = r < num_runs
    start = tl.load(run_start_ptr + r, mask=valid, other=0)
    end = tl.load(run_start_ptr + r + 1, mask=valid, other=0)
    lin = tl.load(run_linear_ptr + r, mask=valid, other=0).to(tl.int64)
    t = tl.load(table_ptr + r, mask=valid, other=0)
    short = valid & (end - start < THRESHOLD)
    if RANGED:
        short = short & (tl.load(run_bucket_ptr + r, mask=valid, other=-1) == BUCKET)
    D = tl.load(dims_ptr + t, mask=short, other=1)
    col0 = tl.load(col_offsets_ptr + t, mask=short, other=0)
    row = lin - tl.load(hcs_ptr + t, mask=short, other=0)
    w_row = tl.load(weights_offsets_ptr + t, mask=short, other=0) + row * D
    return short, start, end, lin, D, col0, w_row


@triton.jit(do_not_specialize=["grad_stride", "B", "BUCKET", "THRESHOLD", "seed"])
def _short_kernel(
    weights_ptr, momentum_ptr, grad_ptr, grad_stride, num_runs_ptr,
    run_start_ptr, run_linear_ptr, table_ptr, run_bucket_ptr,
    sorted_bag_ptr, sorted_psw_ptr, offsets_ptr, dims_ptr, col_offsets_ptr,
    weights_offsets_ptr, hcs_ptr,
    B, BUCKET, THRESHOLD, lr, eps, seed,
    WEIGHTED: tl.constexpr, MEAN: tl.constexpr, ADAGRAD: tl.constexpr, GATHER: tl.constexpr,
    BLOCK_D: tl.constexpr, WIDE: tl.constexpr, FAULTS: tl.constexpr, SHARED: tl.constexpr,
    bag_feature_ptr, bag_row_ptr, VBE: tl.constexpr, ROUNDING: tl.constexpr, RANGED: tl.constexpr,
):
    """One run at a time (grid-stride over the bucket's runs, skipping those not short)."""
    first, num_runs = bucket_runs(run_bucket_ptr, tl.load(num_runs_ptr), BUCKET, RANGED)
    r = first + tl.program_id(0).to(tl.int64)
    step = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_D)
    while r < num_runs:
        short, start, end, lin, D, col0, w_off = _short_run(
            r, num_runs, run_start_ptr, run_linear_ptr, table_ptr, run_bucket_ptr, dims_ptr, col_offsets_ptr,
            weights_offsets_ptr, hcs_ptr, BUCKET, THRESHOLD, RANGED)
        if short:
            src = (grad_ptr, grad_stride, sorted_bag_ptr, sorted_psw_ptr, offsets_ptr, B, col0, col_offsets_ptr, start,
                   end, weights_ptr, bag_row_ptr)
            update_row(_run_block, src, (WEIGHTED, MEAN, GATHER, BLOCK_D, FAULTS, SHARED, VBE), weights_ptr + w_off,
                       cols, D,
                       momentum_ptr, lin, lr, eps, ADAGRAD, BLOCK_D, WIDE, seed, ROUNDING, FAULTS)
        r += step


@triton.jit(do_not_specialize=["grad_stride", "B", "BUCKET", "THRESHOLD", "seed"])
def _short_rows_kernel(
    weights_ptr, momentum_ptr, grad_ptr, grad_stride, num_runs_ptr,
    run_start_ptr, run_linear_ptr, table_ptr, run_bucket_ptr,
    sorted_bag_ptr, sorted_psw_ptr, offsets_ptr, dims_ptr, col_offsets_ptr,
    weights_offsets_ptr, hcs_ptr,
    B, BUCKET, THRESHOLD, lr, eps, seed,
    WEIGHTED: tl.constexpr, MEAN: tl.constexpr, ADAGRAD: tl.constexpr, RUNS: tl.constexpr,
    BLOCK_D: tl.constexpr, VEC: tl.constexpr, FAULTS: tl.constexpr, SHARED: tl.constexpr,
    bag_feature_ptr, bag_row_ptr, VBE: tl.constexpr, ROUNDING: tl.constexpr, RANGED: tl.constexpr,
):
    """RUNS runs at once (rows within one column block), lanes of runs not short in this bucket
    idle: one gradient row of each per step. Every D and row offset is a multiple of VEC
    (``tbe.layout.row_vector``); rounding them down to one changes nothing and lets the compiler read
    and write VEC-wide vectors. Planted faults: ``lane_mask_narrow`` lets rows narrower than 32 use
    every lane of the block; ``momentum_low_precision`` reads the momentum back rounded to bf16."""
    first, num_runs = bucket_runs(run_bucket_ptr, tl.load(num_runs_ptr), BUCKET, RANGED)
    lane = tl.arange(0, RUNS)[:, None]
    cols = tl.arange(0, BLOCK_D)[None, :]
    wdt = weights_ptr.dtype.element_ty
    base = first + tl.program_id(0).to(tl.int64) * RUNS
    step = tl.num_programs(0) * RUNS
    while base < num_runs:
        rm, start, end, lin, D, col0, w_rows = _short_run(
            base + lane, num_runs, run_start_ptr, run_linear_ptr, table_ptr, run_bucket_ptr, dims_ptr,
            col_offsets_ptr, weights_offsets_ptr, hcs_ptr, BUCKET, THRESHOLD, RANGED)
        D = D // VEC * VEC
        w_rows = w_rows // VEC * VEC
        length = tl.where(rm, end - start, 0)
        if FAULT_LANE_MASK & FAULTS:  # planted: lanes past a narrow row's D stay on
            cmask = rm & (cols < tl.where(D < 32, BLOCK_D, D))
        else:
            cmask = rm & (cols < D)
        w = tl.load(weights_ptr + w_rows + cols, mask=cmask, other=0.0).to(tl.float32)  # prefetched
        if ADAGRAD:
            m_old = tl.load(momentum_ptr + lin, mask=rm, other=0.0)
            if FAULT_MOMENTUM_BF16 & FAULTS:  # planted: the state loses its low bits on every read
                m_old = m_old.to(tl.bfloat16).to(tl.float32)
        acc = tl.zeros([RUNS, BLOCK_D], dtype=tl.float32)
        for i in range(0, tl.max(length)):
            m = rm & (i < length)
            pos = start + i
            bag = tl.load(sorted_bag_ptr + pos, mask=m, other=0)
            g_row = grad_row(bag, m, B, grad_stride, col0, col_offsets_ptr, SHARED, bag_row_ptr, VBE) // VEC * VEC
            rows = tl.load(grad_ptr + g_row + cols, mask=m & cmask, other=0.0).to(tl.float32)
            if WEIGHTED or MEAN:
                rows = rows * lookup_coef(sorted_psw_ptr, offsets_ptr, pos, bag, m, WEIGHTED, MEAN)
            if FAULT_ACC_W & FAULTS:
                acc = (acc + rows).to(wdt).to(tl.float32)
            else:
                acc += rows
        if ADAGRAD:
            # idle lanes (past the last run) have D = 0: divide them by 1, not 0/0, which the interpreter reports
            m_new = m_old + tl.div_rn(tl.sum(acc * acc, axis=1, keep_dims=True), tl.maximum(D, 1).to(tl.float32))
            tl.store(momentum_ptr + lin, m_new, mask=rm)
            w_new = w - tl.div_rn(lr + tl.zeros_like(m_new), tl.sqrt_rn(m_new) + eps) * acc
        else:
            w_new = w - lr * acc
        tl.store(weights_ptr + w_rows + cols, round_for_storage(w_new, wdt, seed, lin, cols, ROUNDING,
                                                                FAULTS), mask=cmask)
        if FAULT_SHORT_ONE_PASS & FAULTS:  # planted: the grid-stride loop stops after its first pass
            base = num_runs
        else:
            base += step


@triton.jit
def row_of_run(run, run_linear_ptr, run_start_ptr, sorted_bag_ptr, weights_offsets_ptr, dims_ptr,
            col_offsets_ptr, hcs_ptr, weights_ptr, B, bag_feature_ptr, VBE: tl.constexpr):
    """(linear index, D, output column offset, weight-row pointer) of a run."""
    lin = tl.load(run_linear_ptr + run).to(tl.int64)
    t = feature_of(tl.load(sorted_bag_ptr + tl.load(run_start_ptr + run)), True, B, bag_feature_ptr, VBE)
    D = tl.load(dims_ptr + t)
    w_row = weights_ptr + tl.load(weights_offsets_ptr + t) + (lin - tl.load(hcs_ptr + t)) * D
    return lin, D, tl.load(col_offsets_ptr + t), w_row


# ----------------------------------------------------------------------------- loops
def _short_lengths(a) -> torch.Tensor:
    """Lengths of the runs ``_short_kernel`` updates: short ones of its bucket."""
    n = int(a["num_runs_ptr"].reshape(-1)[0])
    start = a["run_start_ptr"][: n + 1].to(torch.int64)
    length = start[1:] - start[:-1]
    mine = length < a["THRESHOLD"]
    if a.get("RANGED"):
        mine &= a["run_bucket_ptr"][:n].to(torch.int64) == a["BUCKET"]
    return length[mine]


def _num_runs(a) -> int:
    """Runs the launch strides over: its bucket's when ranged, else all."""
    n = int(a["num_runs_ptr"].reshape(-1)[0])
    if not a.get("RANGED"):
        return n
    return int((a["run_bucket_ptr"][:n].to(torch.int64) == a["BUCKET"]).sum())


register_loops(
    Loop("_short_kernel", Path.BWD_SHORT, "runs", LoopKind.GRID_STRIDE, lambda a, grid: [(_num_runs(a), grid[0])],
         programs=lambda c, sms: c.short_grid_multiplier * sms),
    Loop("_short_kernel", Path.BWD_SHORT, "a run's lookups", LoopKind.TILE,
         lambda a, grid: [(_short_lengths(a), a["GATHER"])]),
    Loop("_short_rows_kernel", Path.BWD_SHORT, "runs", LoopKind.GRID_STRIDE,
         lambda a, grid: [(_num_runs(a), grid[0] * a["RUNS"])],
         programs=lambda c, sms: c.short_grid_multiplier * sms * c.most_short_runs(), launched=side_by_side),
    Loop("_short_rows_kernel", Path.BWD_SHORT, "runs side by side", LoopKind.TILE,
         lambda a, grid: [(_num_runs(a), a["RUNS"])], launched=side_by_side),
)
