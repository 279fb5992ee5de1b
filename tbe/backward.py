"""The backward entry point: validate the upstream gradient, transpose, classify, run the tiers.

A step whose forward counted (one small table, ``tbe.routing.counts_backward``) takes the small-table backward
instead: no transpose, no tiers. Otherwise order matters once: the per-sample-weight gradient reads the weights
before any update, so it runs first. After that the short tier and the long tier of every dimension bucket
touch disjoint rows. Nothing here reads a device value on the host.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from tbe.backward_long import backward_long
from tbe.backward_short import backward_short
from tbe.backward_small_table import backward_small_table
from tbe.buckets import block_for_dim, bucket_tables
from tbe.classify import classify
from tbe.forward_dispatch import choose_path
from tbe.grid import cdiv
from tbe.rounding import rounding_of, to_storage
from tbe.routing import counts_backward, fused_long
from tbe.transpose import Transposed, transpose
from tbe.vbe import VbeTensors, bag_args, feature_of


def check_grad_output(module, grad_output: object, batch_size: int, vbe: Optional[VbeTensors] = None) -> torch.Tensor:
    """grad_output must be [B, sum D] (with ``vbe``: the flat [sum B_f * D_f]) of the module's output dtype (or
    fp32) on its device."""
    if not isinstance(grad_output, torch.Tensor):
        raise TypeError(f"grad_output must be a torch.Tensor, got {type(grad_output).__name__}")
    expected = (batch_size, module.layout.total_dim) if vbe is None else (vbe.batch.output_size,)
    if tuple(grad_output.shape) != expected:
        what = "[B, sum D]" if vbe is None else "[sum B_f * D_f]"
        raise ValueError(f"grad_output has shape {tuple(grad_output.shape)}, expected {what} = {list(expected)}")
    if grad_output.dtype not in (module.output_dtype, torch.float32):
        raise TypeError(
            f"grad_output has dtype {grad_output.dtype}, expected the output dtype {module.output_dtype} or float32"
        )
    if grad_output.device.type != module.device.type:
        raise ValueError(f"grad_output is on {grad_output.device}, expected {module.device}")
    return grad_output.contiguous()


def takes_counts(module, num_indices: int, batch_size: int, weighted: bool, vbe: Optional[VbeTensors]) -> bool:
    """Whether this step's backward is the small-table one (its forward's path, asked of the forward's rule)."""
    path = choose_path(module.layout.feature_dims, module.layout.feature_rows, num_indices, batch_size,
                       module.weights.dtype, module.output_dtype, weighted, module.config, vbe is not None)
    return counts_backward(path, module.config)


def transpose_for(module, indices, offsets, per_sample_weights, batch_size, vbe=None) -> Transposed:
    """The transpose of one batch for ``module`` (run in the forward when hoist_transpose is set)."""
    return transpose(module.layout, module.layout_tensors, indices, offsets,
                     per_sample_weights, batch_size, module.config, vbe)


def backward_and_update(
    module,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    per_sample_weights: Optional[torch.Tensor],
    batch_size: int,
    grad_output: torch.Tensor,
    need_psw_grad: bool,
    transposed: Optional[Transposed] = None,
    vbe: Optional[VbeTensors] = None,
) -> Optional[torch.Tensor]:
    """Apply the exact optimizer update in place; return d loss / d per_sample_weights if asked (``vbe``: the
    batch sizes per feature, if they vary)."""
    grad = check_grad_output(module, grad_output, batch_size, vbe)
    cfg = module.config
    n = indices.numel()
    psw_grad = None
    if need_psw_grad:
        psw_grad = torch.zeros_like(per_sample_weights)
    if n == 0 or batch_size == 0:
        return psw_grad
    rounding = rounding_of(cfg.stochastic_rounding, module.weights.dtype)
    if takes_counts(module, n, batch_size, per_sample_weights is not None, vbe):
        backward_small_table(module, indices, offsets, batch_size, grad, module.next_rounding_seed(), rounding)
        return psw_grad
    tr = transposed if transposed is not None else transpose_for(
        module, indices, offsets, per_sample_weights, batch_size, vbe)
    if need_psw_grad:
        per_sample_weight_grad(module, indices, tr, grad, psw_grad)

    dims = module.layout.feature_dims
    buckets = sorted(bucket_tables(dims, cfg).items())
    fused = fused_long(n, cfg)
    seed = module.next_rounding_seed()
    for k, (block_d, tables) in enumerate(buckets):
        max_dim = max(dims[t] for t in tables)
        wide = max_dim > block_d
        backward_short(module, tr, k, grad, block_d, wide, seed, rounding)
        cls = classify(tr, k, cfg)
        backward_long(module, tr, cls, grad, block_d, wide, max_dim, fused, seed, rounding)
    return psw_grad


# ----------------------------------------------------------------------------- psw gradient
PSW_BLOCK_N = 16


def per_sample_weight_grad(module, indices, tr: Transposed, grad: torch.Tensor, out: torch.Tensor) -> None:
    """out[i] = dot(d_out[b, cols_t], w[t, id_i]) (/ L(t, b) for MEAN), fp32 accumulation, from
    the weights before the update. One launch over all lookups; columns loop up to max D."""
    lt = module.layout_tensors
    max_dim = module.layout.max_dim
    block_d = block_for_dim(max_dim, module.config)  # a configured bucket: one variant per bucket, not per D
    _psw_grad_kernel[(cdiv(tr.n, PSW_BLOCK_N),)](
        module.weights, grad, grad.stride(0), indices, tr.bag_of, tr.offsets,
        lt["weights_offsets"], lt["dims"], lt["col_offsets"], out, tr.n, tr.batch_size, max_dim,
        MEAN=module.pooling.value == "mean", BLOCK_N=PSW_BLOCK_N, BLOCK_D=block_d, **bag_args(tr.vbe, tr.offsets),
    )


@triton.jit(do_not_specialize=["grad_stride", "N", "B", "MAX_D"])
def _psw_grad_kernel(
    weights_ptr, grad_ptr, grad_stride, indices_ptr, bag_of_ptr, offsets_ptr,
    weights_offsets_ptr, dims_ptr, col_offsets_ptr, out_ptr, N, B, MAX_D,
    MEAN: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    bag_feature_ptr, bag_row_ptr, VBE: tl.constexpr,
):
    pos = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = pos < N
    bag = tl.load(bag_of_ptr + pos, mask=m, other=0)
    t = feature_of(bag, m, B, bag_feature_ptr, VBE)
    ids = tl.load(indices_ptr + pos, mask=m, other=0).to(tl.int64)
    D = tl.load(dims_ptr + t, mask=m, other=1)
    w_row = tl.load(weights_offsets_ptr + t, mask=m, other=0) + ids * D
    if VBE:
        g_row = tl.load(bag_row_ptr + bag, mask=m, other=0)
    else:
        b = (bag - t * B).to(tl.int64)  # bags may be int32; row offsets b * stride need 64 bits
        g_row = b * grad_stride + tl.load(col_offsets_ptr + t, mask=m, other=0)
    cols = tl.arange(0, BLOCK_D)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for d0 in range(0, MAX_D, BLOCK_D):
        c = d0 + cols
        mm = m[:, None] & (c[None, :] < D[:, None])
        w = tl.load(weights_ptr + w_row[:, None] + c[None, :], mask=mm, other=0.0).to(tl.float32)
        d = tl.load(grad_ptr + g_row[:, None] + c[None, :], mask=mm, other=0.0).to(tl.float32)
        acc += tl.sum(w * d, axis=1)
    if MEAN:
        lo = tl.load(offsets_ptr + bag, mask=m, other=0)
        hi = tl.load(offsets_ptr + bag + 1, mask=m, other=1)
        acc = tl.div_rn(acc, tl.maximum(hi - lo, 1).to(tl.float32))
    tl.store(out_ptr + pos, to_storage(acc, out_ptr.dtype.element_ty), mask=m)
