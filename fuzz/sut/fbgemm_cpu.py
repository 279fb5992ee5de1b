"""The ``fbgemm-cpu`` SUT: FBGEMM's ``SplitTableBatchedEmbeddingBagsCodegen`` on the CPU, fuzzed itself.

It reuses what ``oracles.fbgemm_cpu`` knows of FBGEMM's TBE: it starts from zero weights
(the adapter writes the given ones), rounds stochastically unless told not to (the
adapter turns that off), updates in place, has fp32/fp16 weights and outputs only and
needs D % 4 == 0. Bounds checking is FBGEMM's own (``bounds_check_mode``); it repairs the
batch in place (the adapter hands it copies) and, on the CPU, resets its warning counter
on every call (the adapter zeroes it before each forward and sums the counts, which
also suits the CUDA op, which only adds). FBGEMM logs every repaired id on stderr; the
adapter silences file descriptor 2 around forwards under WARNING so campaign output
stays readable. ``FbgemmInstance`` serves the CUDA adapter too (``fuzz.sut.fbgemm_cuda``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import Iterator, Optional

import torch

from fuzz.errors import FatalBoundsCheck
from fuzz.sut.protocol import SUT, Capabilities, TBEParams
from oracles import fbgemm_cpu
from oracles.fbgemm_import import import_fbgemm
from tbe.modes import BoundsCheckMode, Optimizer, Pooling

CAPABILITIES = Capabilities(
    weights_dtypes=fbgemm_cpu.SUPPORTED_NAMES, output_dtypes=fbgemm_cpu.SUPPORTED_NAMES, dim_multiple=4,
    devices=("cpu",), memory_safe=True,  # its bounds check runs in every mode fed bad ids (fatal, warning, ignore)
    feature_table_map=True, vbe=True,  # batch_size_per_feature_per_rank, one rank
    vbe_index_dtypes=("int64",),  # int32 ids with VBE corrupt its heap: oracles.findings.FBGEMM_CPU_VBE_INT32_HEAP
)


@contextlib.contextmanager
def quiet_stderr(enabled: bool = True) -> Iterator[None]:
    """Send file descriptor 2 to /dev/null while FBGEMM's C++ code logs (Python exceptions still propagate)."""
    if not enabled:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def build_codegen(p: TBEParams, device: str):
    """FBGEMM's training TBE for ``p`` on ``device`` ("cpu": HOST/CPU, "cuda": DEVICE/CUDA)."""
    import_fbgemm()
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    where = (EmbeddingLocation.HOST, ComputeDevice.CPU) if device == "cpu" else \
        (EmbeddingLocation.DEVICE, ComputeDevice.CUDA)
    opt = {Optimizer.EXACT_SGD: EmbOptimType.EXACT_SGD,
           Optimizer.EXACT_ROWWISE_ADAGRAD: EmbOptimType.EXACT_ROWWISE_ADAGRAD}[Optimizer(p.optimizer)]
    pool = {Pooling.SUM: PoolingMode.SUM, Pooling.MEAN: PoolingMode.MEAN}[Pooling(p.pooling)]
    return SplitTableBatchedEmbeddingBagsCodegen(
        [(int(e), int(d), *where) for e, d in p.tables],
        optimizer=opt, learning_rate=p.learning_rate, eps=p.eps,
        weights_precision=fbgemm_cpu._sparse_type(p.weights_dtype),
        output_dtype=fbgemm_cpu._sparse_type(p.output_dtype),
        pooling_mode=pool, stochastic_rounding=False,
        bounds_check_mode=fbgemm_cpu.bounds_check_mode(BoundsCheckMode(p.bounds_check)),
        feature_table_map=list(p.feature_table_map) or None,
    )


def _from_bounds_check(e: BaseException) -> bool:
    """Whether ``e`` came out of FBGEMM's bounds-check op (not out of its lookup, which also raises)."""
    return any("bounds_check_indices" in (f.line or "") for f in traceback.extract_tb(e.__traceback__))


class FbgemmInstance:
    """One FBGEMM training TBE holding the given tables; forward, backward, state read-back."""

    device = "cpu"

    def __init__(self, p: TBEParams) -> None:
        self.params = p
        self.mode = BoundsCheckMode(p.bounds_check)
        self.tbe = build_codegen(p, self.device)
        with torch.no_grad():
            for dst, src in zip(self.tbe.split_embedding_weights(), p.initial_weights or ()):
                dst.copy_(src.to(dst.device))
            for states in self.rowwise_states():
                states.zero_()
        self._warnings = 0
        self._out: Optional[torch.Tensor] = None
        self._psw: Optional[torch.Tensor] = None

    def rowwise_states(self) -> list[torch.Tensor]:
        if Optimizer(self.params.optimizer) != Optimizer.EXACT_ROWWISE_ADAGRAD:
            return []
        return [s[0] for s in self.tbe.split_optimizer_states()]

    def forward(self, indices, offsets, per_sample_weights=None, batch_size_per_feature=None) -> torch.Tensor:
        psw = None
        if per_sample_weights is not None:
            psw = per_sample_weights.to(self.device, torch.float32).clone().requires_grad_(torch.is_grad_enabled())
        self.tbe.bounds_check_warning.zero_()
        vbe = {} if batch_size_per_feature is None else \
            {"batch_size_per_feature_per_rank": [[int(b)] for b in batch_size_per_feature]}
        try:
            with quiet_stderr(self.mode == BoundsCheckMode.WARNING and torch.device(self.device).type == "cpu"):
                out = self.tbe(indices.to(self.device).clone(), offsets.to(self.device).clone(), psw, **vbe)
        except RuntimeError as e:
            if self.mode == BoundsCheckMode.FATAL and _from_bounds_check(e):  # its TORCH_CHECK rejected the batch
                raise FatalBoundsCheck(str(e).splitlines()[0]) from e
            raise
        self._warnings += int(self.tbe.bounds_check_warning[0])
        self._out, self._psw = out, psw
        return out

    def backward(self, grad_output: torch.Tensor) -> Optional[torch.Tensor]:
        out, self._out = self._out, None
        out.backward(grad_output.to(out.device, out.dtype))
        return None if self._psw is None else self._psw.grad

    def weights(self) -> list[torch.Tensor]:
        return [w.detach().cpu().clone() for w in self.tbe.split_embedding_weights()]

    def momentum(self) -> Optional[list[torch.Tensor]]:
        states = self.rowwise_states()
        return [s.detach().cpu().clone().reshape(-1) for s in states] if states else None

    def bounds_check_warnings(self) -> int:
        return self._warnings


def _available() -> Optional[str]:
    return None if fbgemm_cpu.available() else "fbgemm_gpu's CPU TBE does not import (pip install fbgemm-gpu-cpu)"


def factory() -> SUT:
    return SUT("fbgemm-cpu", CAPABILITIES, FbgemmInstance, _available,
               "FBGEMM's SplitTableBatchedEmbeddingBagsCodegen on the CPU (HOST / ComputeDevice.CPU)")
