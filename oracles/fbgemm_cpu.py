"""FBGEMM's CPU TBE as a second, independent oracle.

Wraps ``SplitTableBatchedEmbeddingBagsCodegen`` on the CPU (EXACT_SGD and
EXACT_ROWWISE_ADAGRAD, fp32/fp16 weights, SUM/MEAN, weighted, int32/int64) with our
weights loaded into it; features may share tables (its ``feature_table_map``). Known facts: FBGEMM starts from zero weights (we write ours),
rounds stochastically unless told not to, updates in place, has no BF16 weights on the
CPU, and with MEAN pooling and per-sample weights its backward does not divide by L. Variable batch per feature
(VBE): its CPU TBE takes ``batch_size_per_feature_per_rank`` in the forward and backward of both optimizers; this
oracle passes one rank (``[[B_f] for each feature]``), its output then flat as ours.
"""

from __future__ import annotations

import functools
from typing import Optional, Sequence

import torch

from oracles.fbgemm_import import import_fbgemm
from tbe.modes import BoundsCheckMode, Optimizer, Pooling

SUPPORTED_WEIGHTS = (torch.float32, torch.float16)
SUPPORTED_NAMES = ("fp32", "fp16")


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether fbgemm_gpu's CPU ops load in this environment."""
    try:
        import_fbgemm()
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (  # noqa: F401
            SplitTableBatchedEmbeddingBagsCodegen,
        )
    except Exception:  # noqa: BLE001  (any load failure means the oracle is absent)
        return False
    return True


def supports(weights_dtype: torch.dtype, output_dtype: torch.dtype, dims: Sequence[int] = ()) -> bool:
    """FBGEMM's CPU TBE handles fp32/fp16 weights and outputs (its CPU forward raises
    NotImplementedError for bf16) and only embedding dims that are multiples of 4 (it
    asserts so when it builds its state)."""
    return (
        weights_dtype in SUPPORTED_WEIGHTS
        and output_dtype in SUPPORTED_WEIGHTS
        and all(d % 4 == 0 for d in dims)
    )


def _sparse_type(dtype: torch.dtype):
    from fbgemm_gpu.split_embedding_configs import SparseType

    return {torch.float32: SparseType.FP32, torch.float16: SparseType.FP16, torch.bfloat16: SparseType.BF16}[dtype]


def bounds_check_mode(mode: BoundsCheckMode):
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import BoundsCheckMode as FBMode

    return getattr(FBMode, mode.name)


class FbgemmTBE:
    """One FBGEMM CPU TBE holding a copy of our tables; forward and training step on CPU copies."""

    def __init__(
        self,
        specs: Sequence[tuple[int, int]],
        optimizer: Optimizer,
        learning_rate: float,
        eps: float,
        weights_dtype: torch.dtype,
        output_dtype: torch.dtype,
        pooling: Pooling,
        bounds_check: BoundsCheckMode = BoundsCheckMode.NONE,
        feature_table_map: Sequence[int] = (),
    ) -> None:
        """``feature_table_map``: the table each feature reads (empty: one feature per table), FBGEMM's own
        argument."""
        if not supports(weights_dtype, output_dtype, [d for _, d in specs]):
            raise ValueError(
                f"FBGEMM CPU TBE does not support weights {weights_dtype} / output {output_dtype} "
                f"/ dims {[d for _, d in specs]}"
            )
        from fbgemm_gpu.split_embedding_configs import EmbOptimType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice,
            SplitTableBatchedEmbeddingBagsCodegen,
        )

        opt = {Optimizer.EXACT_SGD: EmbOptimType.EXACT_SGD,
               Optimizer.EXACT_ROWWISE_ADAGRAD: EmbOptimType.EXACT_ROWWISE_ADAGRAD}[optimizer]
        pool = {Pooling.SUM: PoolingMode.SUM, Pooling.MEAN: PoolingMode.MEAN}[pooling]
        self.tbe = SplitTableBatchedEmbeddingBagsCodegen(
            [(int(e), int(d), EmbeddingLocation.HOST, ComputeDevice.CPU) for e, d in specs],
            optimizer=opt,
            learning_rate=learning_rate,
            eps=eps,
            weights_precision=_sparse_type(weights_dtype),
            output_dtype=_sparse_type(output_dtype),
            pooling_mode=pool,
            stochastic_rounding=False,
            bounds_check_mode=bounds_check_mode(bounds_check),
            feature_table_map=list(feature_table_map) or None,
        )
        self.optimizer = optimizer

    def load(self, tables: Sequence[torch.Tensor], momentum: Optional[Sequence[torch.Tensor]] = None) -> None:
        """Write our per-table weights (and row-wise momentum) into FBGEMM's buffers."""
        with torch.no_grad():
            for dst, src in zip(self.tbe.split_embedding_weights(), tables):
                dst.copy_(src.detach().cpu())
            if momentum is not None and self.optimizer == Optimizer.EXACT_ROWWISE_ADAGRAD:
                for dst, src in zip(self.tbe.split_optimizer_states(), momentum):
                    dst[0].copy_(src.detach().cpu().view_as(dst[0]))

    def weights(self) -> list[torch.Tensor]:
        return [w.detach().clone() for w in self.tbe.split_embedding_weights()]

    def momentum(self) -> list[torch.Tensor]:
        if self.optimizer != Optimizer.EXACT_ROWWISE_ADAGRAD:
            return []
        return [s[0].detach().clone().view(-1) for s in self.tbe.split_optimizer_states()]

    def forward(
        self, indices: torch.Tensor, offsets: torch.Tensor, per_sample_weights: Optional[torch.Tensor] = None,
        batch_size_per_feature: Optional[Sequence[int]] = None,
    ) -> torch.Tensor:
        psw = None if per_sample_weights is None else per_sample_weights.detach().cpu().float()
        with torch.no_grad():
            return self._call(indices, offsets, psw, batch_size_per_feature).detach().clone()

    def _call(self, indices, offsets, psw, batch_size_per_feature):
        """FBGEMM's forward; with ``batch_size_per_feature`` its VBE forward for one rank."""
        if batch_size_per_feature is None:
            return self.tbe(indices.cpu(), offsets.cpu(), psw)
        return self.tbe(indices.cpu(), offsets.cpu(), psw,
                        batch_size_per_feature_per_rank=[[int(b)] for b in batch_size_per_feature])

    def step(
        self,
        indices: torch.Tensor,
        offsets: torch.Tensor,
        per_sample_weights: Optional[torch.Tensor],
        grad_output: torch.Tensor,
        batch_size_per_feature: Optional[Sequence[int]] = None,
    ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """One training step: forward, backward with ``grad_output``; returns (output, psw grad)."""
        psw = None
        if per_sample_weights is not None:
            psw = per_sample_weights.detach().cpu().float().requires_grad_(True)
        out = self._call(indices, offsets, psw, batch_size_per_feature)
        out.backward(grad_output.detach().cpu().to(out.dtype))
        return out.detach().clone(), None if psw is None else psw.grad.detach().clone()
