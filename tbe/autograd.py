"""The autograd function joining the Triton forward to the in-kernel-optimizer backward."""

from __future__ import annotations

from typing import Any, Optional

import torch

from tbe.forward_dispatch import finish_bounds, pooled_forward


class TBEFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        placeholder: torch.Tensor,
        per_sample_weights: Optional[torch.Tensor],
        module: Any,
        indices: torch.Tensor,
        offsets: torch.Tensor,
        batch_size: int,
        check: Any = None,
        vbe: Any = None,
    ) -> torch.Tensor:
        out = pooled_forward(
            module.weights, module.layout_tensors, module.layout.feature_dims, module.layout.feature_rows,
            indices, offsets, per_sample_weights, batch_size, module.pooling, module.output_dtype,
            module.config, check, vbe,
        )
        if check is not None:  # fused bounds check: FATAL raises now; the backward sees repaired ids
            indices = finish_bounds(check, indices, offsets, batch_size, vbe)
        ctx.module = module
        ctx.batch_size = batch_size
        ctx.vbe = vbe
        ctx.backward_done = False
        ctx.save_for_backward(indices, offsets, per_sample_weights)
        ctx.transposed = None
        if module.config.hoist_transpose:  # sort the batch now; the backward reuses it (a counting one sorts nothing)
            from tbe.backward import takes_counts, transpose_for

            if not takes_counts(module, indices.numel(), batch_size, per_sample_weights is not None, vbe):
                ctx.transposed = transpose_for(module, indices, offsets, per_sample_weights, batch_size, vbe)
        return out

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor):
        from tbe.backward import backward_and_update

        if ctx.backward_done:
            raise RuntimeError(
                "TritonTBE backward called twice on one forward: the optimizer update was already "
                "applied in place; run a new forward before the next backward"
            )
        ctx.backward_done = True
        indices, offsets, per_sample_weights = ctx.saved_tensors
        psw_grad = backward_and_update(
            ctx.module, indices, offsets, per_sample_weights, ctx.batch_size, grad_output,
            need_psw_grad=per_sample_weights is not None and ctx.needs_input_grad[1],
            transposed=ctx.transposed, vbe=ctx.vbe,
        )
        ctx.transposed = None
        return None, psw_grad, None, None, None, None, None, None
