"""The ``triton`` SUT (the default): this project's TritonTBE, tuned by a KernelConfig, with planted faults.

Under the Triton interpreter it runs on the CPU, compiled on a CUDA device otherwise.
"""

from __future__ import annotations

from typing import Optional

import torch

from fuzz.errors import FatalBoundsCheck
from fuzz.sut.protocol import SUT, Capabilities, TBEParams
from tbe import KernelConfig, TritonTBE
from tbe.backend import INTERPRETED
from tbe.bounds_check import BoundsCheckError


class TritonInstance:
    def __init__(self, p: TBEParams) -> None:
        self.module = TritonTBE(
            list(p.tables), optimizer=p.optimizer, learning_rate=p.learning_rate, eps=p.eps,
            weights_dtype=p.weights_dtype, output_dtype=p.output_dtype, pooling=p.pooling,
            bounds_check=p.bounds_check, config=p.config or KernelConfig(), seed=p.seed,
            feature_table_map=p.feature_table_map,
        )
        if p.initial_weights is not None:
            self.module.load_weights([w.to(self.module.device) for w in p.initial_weights])
        self.device = self.module.device
        self._out: Optional[torch.Tensor] = None
        self._psw: Optional[torch.Tensor] = None

    def forward(self, indices, offsets, per_sample_weights=None, batch_size_per_feature=None) -> torch.Tensor:
        psw = None
        if per_sample_weights is not None:
            psw = per_sample_weights.to(self.device).clone().requires_grad_(torch.is_grad_enabled())
        try:
            out = self.module(indices.to(self.device), offsets.to(self.device), psw,
                              batch_size_per_feature=batch_size_per_feature)
        except BoundsCheckError as e:
            raise FatalBoundsCheck(str(e), e.kind, e.position) from e
        self._out, self._psw = out, psw
        return out

    def backward(self, grad_output: torch.Tensor) -> Optional[torch.Tensor]:
        self._out.backward(grad_output.to(self.device))
        self._out = None
        return None if self._psw is None else self._psw.grad

    def packed_weights(self) -> torch.Tensor:  # the live buffer: fuzz.sut.protocol.packed_weights copies it
        return self.module.weights.detach()

    def weights(self) -> list[torch.Tensor]:
        return [w.detach().cpu().clone() for w in self.module.split_embedding_weights()]

    def packed_momentum(self) -> torch.Tensor:
        return self.module.momentum.detach()

    def momentum(self) -> Optional[list[torch.Tensor]]:
        states = self.module.split_optimizer_states()
        return [s[0].detach().cpu().clone() for s in states] if states and states[0] else None

    def bounds_check_warnings(self) -> int:
        return int(self.module.bounds_check_warnings[0])


def factory() -> SUT:
    caps = Capabilities(devices=("cpu",) if INTERPRETED else ("cuda",), kernel_config=True, planted_faults=True,
                        project_kernels=True, triton_kernels=True, feature_table_map=True, vbe=True)
    return SUT("triton", caps, TritonInstance,
               description="this project's Triton TBE (" + ("Triton interpreter" if INTERPRETED else "compiled") + ")")
