"""Backward, long tiers: runs with SL >= long_run_threshold, split into chunk_size chunks.

Two-kernel tier (default, deterministic): every chunk program writes its fp32 partial sum into
its own workspace slot [chunk, D]; the apply kernel then sums a run's partials in a fixed order
(``bwd_apply_parts`` chunks a step, summed as a block) and updates the row once. Fused tier
(``fused_long_tier``): every chunk atomically adds its partial into the run's workspace row,
passes a CTA barrier, and counts the run's countdown down with an acq_rel gpu-scope atomic; the
program that sees 1 left applies the update. Its float sums depend on the order the atomics land
in, so on a GPU the fused tier is not bit-deterministic (the interpreter runs programs in
order). Both tiers run one chunk kernel; its ``FUSED`` constexpr picks the hand-off. With
``bwd_long_vector`` a two-kernel chunk reads gradient rows in 16-byte vectors and sums its gathers as one
block; the fused tier keeps the per-gather sum, whose timing its race stress was calibrated on
(``docs/guides/races.md``).
Faults: ``skip_last_chunk_update`` drops the last chunk of every split run; ``no_fence``
makes the countdown relaxed; ``no_barrier`` skips the CTA barrier and counts down from one
lane of a block-wide atomic, so the compiler has no shared-memory broadcast of a scalar
atomic's result to guard with a barrier of its own (which hides a missing one).
Two faults live only in very long runs: ``drop_chunk_past_4096`` drops chunk 4,096 (the
4,097th) of a run split into more than 4,096 chunks; ``zero_update_past_2p20`` zeroes the
gradient of runs longer than 4,096 x chunk_size lookups (2^20 at the default chunk size
256), like a 12-bit chunk counter or a 2^20 length limit gone wrong. ``hang_narrow_long_run``
stops the chunk loop's advance for rows narrower than 32 columns: the kernel never returns.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tbe.backward_short import gather_grad, grad_row, lookup_coef, row_of_run
from tbe.classify import Classified
from tbe.grid import persistent_grid
from tbe.faults import (
    FAULT_ACC_W, FAULT_APPLY_WHOLE_PARTS, FAULT_DROP_CHUNK, FAULT_HANG_NARROW, FAULT_NO_BARRIER,
    FAULT_SKIP_LAST_CHUNK, FAULT_ZERO_LONG, kernel_faults,
)
from tbe.layout import row_vector
from tbe.loops import Loop, LoopKind, register_loops
from tbe.optimizers import update_row
from tbe.rounding import NEAREST, rounding_faults
from tbe.routing import Path
from tbe.vbe import bag_args, row_strides

FAULT_CHUNK_LIMIT = 4096  # chunks per run past which the large-run faults act
_CHUNK_LIMIT = tl.constexpr(FAULT_CHUNK_LIMIT)


# ----------------------------------------------------------------------------- launch
def backward_long(
    module, tr, cls: Classified, grad: torch.Tensor, block_d: int, wide: bool, max_dim: int, fused: bool,
    seed: int, rounding: int,
) -> None:
    """Apply the update to every long run of one bucket (``max_dim``: widest table in it; ``seed``, ``rounding``:
    the stores' rounding, ``tbe.rounding``)."""
    cfg = module.config
    weighted = tr.sorted_psw is not None
    lt = module.layout_tensors
    device = grad.device
    ws_stride = max_dim
    # the block sum (VEC-wide where rows allow) in the two-kernel tier; the fused tier keeps gather_grad's
    # per-gather sum, the timing its race stress (fuzz.memcheck.race_stress) was calibrated on
    vector = cfg.bwd_long_vector and not fused
    vec = row_vector(module.layout.dims, grad.element_size(), *row_strides(grad, tr.vbe)) if vector else 1
    common = dict(
        WEIGHTED=weighted, MEAN=module.pooling.value == "mean",
        ADAGRAD=module.optimizer.value == "exact_rowwise_adagrad",
        GATHER=cfg.bwd_long_gather, STAGES=cfg.bwd_long_stages, VECTOR=vector, VEC=vec,
        BLOCK_D=block_d, WIDE=wide,
        SHARED=module.layout.shared, **bag_args(tr.vbe, tr.run_start), num_warps=cfg.bwd_long_num_warps,
    )
    chunk_faults = (FAULT_ACC_W, FAULT_SKIP_LAST_CHUNK, FAULT_DROP_CHUNK, FAULT_ZERO_LONG, FAULT_HANG_NARROW)
    run_args = (
        module.weights, module.momentum, grad, grad.stride(0),
        cls.counts, cls.long_runs, cls.chunk_base, cls.num_chunks, cls.chunk_slot, cls.chunk_index,
        tr.run_linear, tr.run_start, tr.sorted_bag,
        tr.sorted_psw if weighted else tr.run_start, tr.offsets,
        lt["weights_offsets"], lt["dims"], lt["col_offsets"], lt["hash_size_cumsum"],
        tr.batch_size, module.learning_rate, module.eps, cfg.chunk_size, ws_stride, seed,
    )
    chunk_grid = persistent_grid(cfg.long_grid_multiplier, cls.chunk_upper, device)
    if fused:
        # one fp32 row per long slot; at most n / threshold long runs
        slots = max(1, tr.n // cfg.long_run_threshold)
        ws = module.workspaces.take("fused partial sums", (slots, ws_stride), torch.float32)
        if not cfg.has_fault("fused_workspace_uninitialized"):  # planted: the last step's sums stay
            ws.zero_()
        _chunk_kernel[(chunk_grid,)](
            *run_args, ws, cls.countdown, FUSED=True, ROUNDING=rounding,
            SEM="relaxed" if (cfg.has_fault("no_fence") or not cfg.fence) else "acq_rel",
            FAULTS=kernel_faults(cfg.faults, *chunk_faults, FAULT_NO_BARRIER, *rounding_faults(rounding)), **common,
        )
        return
    ws = module.workspaces.take("chunk partial sums", (cls.chunk_upper, ws_stride), torch.float32)
    _chunk_kernel[(chunk_grid,)](*run_args, ws, ws, FUSED=False, SEM="relaxed", ROUNDING=NEAREST.value,
                                 FAULTS=kernel_faults(cfg.faults, *chunk_faults), **common)
    apply_grid = persistent_grid(cfg.long_grid_multiplier, max(1, tr.n // cfg.long_run_threshold), device)
    # the apply kernel reads only the workspace and the rows: no gradient, weight or offsets pointer and no
    # gradient flag in its signature, so their dtypes do not multiply its specializations
    _apply_kernel[(apply_grid,)](
        module.weights, module.momentum, cls.counts, cls.long_runs, cls.chunk_base, cls.num_chunks,
        tr.run_linear, tr.run_start, tr.sorted_bag, lt["weights_offsets"], lt["dims"], lt["col_offsets"],
        lt["hash_size_cumsum"], tr.batch_size, module.learning_rate, module.eps, ws_stride, ws, seed,
        ADAGRAD=common["ADAGRAD"], BLOCK_D=block_d, WIDE=wide, bag_feature_ptr=common["bag_feature_ptr"],
        VBE=common["VBE"], ROUNDING=rounding, PARTS=cfg.bwd_apply_parts,
        FAULTS=kernel_faults(cfg.faults, FAULT_APPLY_WHOLE_PARTS, *rounding_faults(rounding)),
        num_warps=cfg.bwd_long_num_warps,
    )


# ----------------------------------------------------------------------------- kernels
@triton.jit
def _run_of_chunk(
    c, long_ptr, chunk_base_ptr, num_chunks_ptr, chunk_slot_ptr, chunk_index_ptr,
    run_start_ptr, CHUNK, FAULTS: tl.constexpr,
):
    """(long slot, run, lookup range [start, end), factor on the chunk's partial) of chunk ``c``;
    the factor is 1 except where a planted fault drops the chunk."""
    s = tl.load(chunk_slot_ptr + c)
    k = tl.load(chunk_index_ptr + c)
    run = tl.load(long_ptr + s)
    run_start = tl.load(run_start_ptr + run)
    run_end = tl.load(run_start_ptr + run + 1)  # where the next run starts
    start = run_start + k * CHUNK
    end = tl.minimum(start + CHUNK, run_end)
    nch = tl.load(num_chunks_ptr + s)
    keep = 1.0
    if FAULT_SKIP_LAST_CHUNK & FAULTS:
        keep = tl.where((k == nch - 1) & (nch > 1), 0.0, keep)
    if FAULT_DROP_CHUNK & FAULTS:
        keep = tl.where((nch > _CHUNK_LIMIT) & (k == _CHUNK_LIMIT), 0.0, keep)
    if FAULT_ZERO_LONG & FAULTS:
        keep = tl.where((run_end - run_start - 1) // _CHUNK_LIMIT >= CHUNK, 0.0, keep)  # SL > limit * CHUNK
    return s, run, start, end, keep


@triton.jit
def _gather_block(
    grad_ptr, grad_stride, sorted_bag_ptr, sorted_psw_ptr, offsets_ptr, B, col0, col_offsets_ptr, cols, cmask,
    start, end, WEIGHTED: tl.constexpr, MEAN: tl.constexpr, GATHER: tl.constexpr, BLOCK_D: tl.constexpr,
    VEC: tl.constexpr, STAGES: tl.constexpr, SHARED: tl.constexpr, bag_row_ptr, VBE: tl.constexpr,
):
    """``gather_grad``'s sum over sorted lookups [start, end), read ``VEC`` wide: each gather's rows are added
    into a [GATHER, BLOCK_D] block, summed over the gathers once at the end, so a layout that spreads a gather's
    rows over warps meets them once per chunk rather than once per gather. Every D and row offset is a multiple
    of VEC (``tbe.layout.row_vector``); rounding the row offset down to one changes nothing."""
    g = tl.arange(0, GATHER)
    acc = tl.zeros([GATHER, BLOCK_D], dtype=tl.float32)
    for i in tl.range(start, end, GATHER, num_stages=STAGES):
        pos = i + g
        m = pos < end
        bag = tl.load(sorted_bag_ptr + pos, mask=m, other=0)
        row = grad_row(bag, m, B, grad_stride, col0, col_offsets_ptr, SHARED, bag_row_ptr, VBE) // VEC * VEC
        rows = tl.load(grad_ptr + row[:, None] + cols[None, :], mask=m[:, None] & cmask[None, :],
                       other=0.0).to(tl.float32)
        if WEIGHTED or MEAN:
            rows = rows * lookup_coef(sorted_psw_ptr, offsets_ptr, pos, bag, m, WEIGHTED, MEAN)[:, None]
        acc += rows
    return tl.sum(acc, axis=0)


@triton.jit
def _workspace_block(src, flags: tl.constexpr, d0, cols, cmask):
    """A column block of a long run's gradient (``update_row``'s source): its workspace rows summed ``PARTS`` at a
    time, in a fixed order."""
    ws_ptr, nparts, ws_stride = src
    VOLATILE: tl.constexpr = flags[0]
    PARTS: tl.constexpr = flags[1]
    FAULTS: tl.constexpr = flags[2]
    g = tl.zeros(cols.shape, dtype=tl.float32)
    k = tl.arange(0, PARTS)
    for p in range(0, nparts, PARTS):
        part = p + k
        if FAULT_APPLY_WHOLE_PARTS & FAULTS:  # planted: a partial group of PARTS rows is dropped
            pm = part < nparts // PARTS * PARTS
        else:
            pm = part < nparts
        rows = tl.load(ws_ptr + part[:, None] * ws_stride + d0 + cols[None, :],
                       mask=pm[:, None] & cmask[None, :], other=0.0, volatile=VOLATILE)
        g += tl.sum(rows, axis=0)
    return g


@triton.jit
def _apply_from_workspace(
    ws_ptr, nparts, ws_stride, w_row, momentum_ptr, lin, D, lr, eps,
    ADAGRAD: tl.constexpr, BLOCK_D: tl.constexpr, WIDE: tl.constexpr, VOLATILE: tl.constexpr,
    PARTS: tl.constexpr, seed, ROUNDING: tl.constexpr, FAULTS: tl.constexpr,
):
    """Sum ``nparts`` consecutive workspace rows, ``PARTS`` at a time in a fixed order (the row's gradient), and
    update the row (its stores rounded by ``ROUNDING``)."""
    update_row(_workspace_block, (ws_ptr, nparts, ws_stride), (VOLATILE, PARTS, FAULTS), w_row, tl.arange(0, BLOCK_D), D,
               momentum_ptr, lin, lr, eps, ADAGRAD, BLOCK_D, WIDE, seed, ROUNDING, FAULTS)


@triton.jit(do_not_specialize=["grad_stride", "B", "CHUNK", "ws_stride", "seed"])
def _chunk_kernel(
    weights_ptr, momentum_ptr, grad_ptr, grad_stride,
    counts_ptr, long_ptr, chunk_base_ptr, num_chunks_ptr, chunk_slot_ptr, chunk_index_ptr,
    run_linear_ptr, run_start_ptr, sorted_bag_ptr, sorted_psw_ptr, offsets_ptr,
    weights_offsets_ptr, dims_ptr, col_offsets_ptr, hcs_ptr,
    B, lr, eps, CHUNK, ws_stride, seed, ws_ptr, countdown_ptr,
    WEIGHTED: tl.constexpr, MEAN: tl.constexpr, ADAGRAD: tl.constexpr, GATHER: tl.constexpr, STAGES: tl.constexpr,
    VECTOR: tl.constexpr, VEC: tl.constexpr, BLOCK_D: tl.constexpr, WIDE: tl.constexpr,
    FUSED: tl.constexpr, SEM: tl.constexpr, FAULTS: tl.constexpr, SHARED: tl.constexpr,
    bag_feature_ptr, bag_row_ptr, VBE: tl.constexpr, ROUNDING: tl.constexpr,
):
    """One program per chunk (grid-stride). Two-kernel tier: the chunk writes its fp32 partial into
    workspace row ``c`` (no atomics, no order effects). Fused: it adds the partial atomically into its
    run's row ``s`` and counts the run down; the last chunk to count down applies the update."""
    num = tl.load(counts_ptr + 1)
    c = tl.program_id(0).to(tl.int64)
    step = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_D)
    wdt = weights_ptr.dtype.element_ty
    while c < num:
        s, run, start, end, keep = _run_of_chunk(c, long_ptr, chunk_base_ptr, num_chunks_ptr, chunk_slot_ptr,
                                                 chunk_index_ptr, run_start_ptr, CHUNK, FAULTS)
        lin, D, col0, w_row = row_of_run(run, run_linear_ptr, run_start_ptr, sorted_bag_ptr,
                                          weights_offsets_ptr, dims_ptr, col_offsets_ptr, hcs_ptr, weights_ptr, B,
                                          bag_feature_ptr, VBE)
        if VECTOR:
            D = D // VEC * VEC  # no change (row_vector), but the column mask is then whole vectors
        for d0 in range(0, D, BLOCK_D):
            cm = (d0 + cols) < D
            if VECTOR and not (FAULT_ACC_W & FAULTS):
                g = _gather_block(grad_ptr, grad_stride, sorted_bag_ptr, sorted_psw_ptr, offsets_ptr, B, col0,
                                  col_offsets_ptr, d0 + cols, cm, start, end, WEIGHTED, MEAN, GATHER, BLOCK_D, VEC,
                                  STAGES, SHARED, bag_row_ptr, VBE)
            else:
                g = gather_grad(grad_ptr, grad_stride, sorted_bag_ptr, sorted_psw_ptr, offsets_ptr, B, col0,
                                col_offsets_ptr, d0 + cols, cm, start, end, wdt, WEIGHTED, MEAN, GATHER, BLOCK_D,
                                FAULTS, STAGES, SHARED, bag_row_ptr, VBE)
            if FUSED:
                tl.atomic_add(ws_ptr + s * ws_stride + d0 + cols, g * keep, mask=cm, sem="relaxed", scope="gpu")
            else:
                tl.store(ws_ptr + c * ws_stride + d0 + cols, g * keep, mask=cm)
        if FUSED:
            if FAULT_NO_BARRIER & FAULTS:
                # no barrier, and one lane counts down while the block sums its result; no shared-memory
                # broadcast of a scalar atomic brings a compiler barrier in its place
                lane0 = cols == 0
                old = tl.atomic_add(countdown_ptr + s + 0 * cols, -1, mask=lane0, sem=SEM, scope="gpu")
                remaining = tl.sum(tl.where(lane0, old, 0), axis=0)
            else:
                # every warp's adds are done before the release below is issued
                tl.debug_barrier()
                remaining = tl.atomic_add(countdown_ptr + s, -1, sem=SEM, scope="gpu")
            if remaining == 1:
                _apply_from_workspace(ws_ptr + s * ws_stride, 1, ws_stride, w_row, momentum_ptr, lin, D, lr, eps,
                                      ADAGRAD, BLOCK_D, WIDE, True, 1, seed, ROUNDING, FAULTS)
        if FAULT_HANG_NARROW & FAULTS:  # planted: a narrow row's chunk loop stops advancing
            c += tl.where(D < 32, 0, step)
        else:
            c += step


@triton.jit(do_not_specialize=["B", "ws_stride", "seed"])
def _apply_kernel(
    weights_ptr, momentum_ptr, counts_ptr, long_ptr, chunk_base_ptr, num_chunks_ptr,
    run_linear_ptr, run_start_ptr, sorted_bag_ptr, weights_offsets_ptr, dims_ptr, col_offsets_ptr, hcs_ptr,
    B, lr, eps, ws_stride, ws_ptr, seed,
    ADAGRAD: tl.constexpr, BLOCK_D: tl.constexpr, WIDE: tl.constexpr, bag_feature_ptr, VBE: tl.constexpr,
    ROUNDING: tl.constexpr, FAULTS: tl.constexpr, PARTS: tl.constexpr,
):
    """One program per long run (grid-stride): sum its chunk partials in chunk order, ``PARTS`` a step, update
    once."""
    num_long = tl.load(counts_ptr + 0)
    s = tl.program_id(0).to(tl.int64)
    step = tl.num_programs(0)
    while s < num_long:
        run = tl.load(long_ptr + s)
        lin, D, col0, w_row = row_of_run(run, run_linear_ptr, run_start_ptr, sorted_bag_ptr,
                                          weights_offsets_ptr, dims_ptr, col_offsets_ptr, hcs_ptr, weights_ptr, B,
                                          bag_feature_ptr, VBE)
        base = tl.load(chunk_base_ptr + s)
        nparts = tl.load(num_chunks_ptr + s)
        _apply_from_workspace(ws_ptr + base * ws_stride, nparts, ws_stride, w_row, momentum_ptr, lin, D, lr, eps,
                              ADAGRAD, BLOCK_D, WIDE, False, PARTS, seed, ROUNDING, FAULTS)
        s += step


# ----------------------------------------------------------------------------- loops
def _long_lengths(a) -> torch.Tensor:
    """Lengths of the long runs of the launch's bucket (``tbe.classify``'s list)."""
    start = a["run_start_ptr"].to(torch.int64)
    runs = a["long_ptr"][: int(a["counts_ptr"][0])].to(torch.int64)
    return start[runs + 1] - start[runs]


def _chunk_lengths(a) -> torch.Tensor:
    """The distinct chunk lengths of those runs: whole chunks of CHUNK and each run's last, shorter one."""
    lengths, chunk = _long_lengths(a), a["CHUNK"]
    whole = torch.full((int((lengths >= chunk).any()),), chunk, dtype=torch.int64, device=lengths.device)
    return torch.cat([whole, lengths % chunk])


def _long_loops(path: Path, fused: bool) -> list[Loop]:
    when = (lambda a: bool(a["FUSED"])) if fused else (lambda a: not a["FUSED"])
    launched = (lambda c: c.fused_long_tier) if fused else (lambda c: True)
    busy = lambda a: when(a) and int(a["counts_ptr"][1]) > 0  # noqa: E731  (a workspace is used only with chunks)
    loops = [
        Loop("_chunk_kernel", path, "chunks", LoopKind.GRID_STRIDE, lambda a, grid: [(int(a["counts_ptr"][1]), grid[0])],
             when=when, programs=lambda c, sms: c.long_grid_multiplier * sms, launched=launched),
        Loop("_chunk_kernel", path, "a long run's chunks", LoopKind.TILE,
             lambda a, grid: [(_long_lengths(a), a["CHUNK"])], when=when, launched=launched),
        Loop("_chunk_kernel", path, "a chunk's lookups", LoopKind.TILE,
             lambda a, grid: [(_chunk_lengths(a), a["GATHER"])], when=when, launched=launched),
        Loop("_chunk_kernel", path, "partial sums", LoopKind.WORKSPACE, lambda a, grid: "ws_ptr", when=busy,
             launched=launched),
    ]
    return loops


register_loops(
    *_long_loops(Path.BWD_LONG, fused=False),
    *_long_loops(Path.BWD_FUSED, fused=True),
    Loop("_apply_kernel", Path.BWD_LONG, "long runs", LoopKind.GRID_STRIDE,
         lambda a, grid: [(int(a["counts_ptr"][0]), grid[0])], programs=lambda c, sms: c.long_grid_multiplier * sms),
    Loop("_apply_kernel", Path.BWD_LONG, "a run's chunk partials", LoopKind.TILE,
         lambda a, grid: [(a["num_chunks_ptr"][: int(a["counts_ptr"][0])], a["PARTS"])]),
)
