"""TritonTBE: an nn.Module shaped like FBGEMM's SplitTableBatchedEmbeddingBagsCodegen.

The module owns the packed weights and optimizer state; its output takes part in
autograd, and ``backward()`` applies the exact optimizer update in place, once per
distinct (table, row), as FBGEMM's training TBE does. ``feature_table_map`` (as FBGEMM's)
names the table each feature of a batch reads; features of one table update its rows once.
``config.stochastic_rounding`` rounds fp16 and bf16 updates stochastically (``tbe.rounding``; fp32 weights
have nothing to round), each step drawing from ``rounding_seed``, which the step then advances by one.
``batch_size_per_feature`` (FBGEMM's ``batch_size_per_feature_per_rank`` for one rank) gives each feature its own
batch size (VBE); the output is then flat, each feature's [B_f, D_f] block after the one before.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from torch import nn

from tbe import backend
from tbe.autograd import TBEFunction
from tbe.batch import validate_batch
from tbe.buckets import device_layout
from tbe.config import KernelConfig
from tbe.forward_dispatch import choose_path, prepare_bounds
from tbe.layout import TableLayout, VariableBatch, check_feature_table_map, parse_specs, seeded_weights
from tbe.modes import BoundsCheckMode, Optimizer, Pooling, parse_enum, parse_float_dtype
from tbe.routing import Path
from tbe.vbe import vbe_tensors
from tbe.workspace import Workspaces


def _check_hyper(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return value


class TritonTBE(nn.Module):
    def __init__(
        self,
        embedding_specs: Sequence,
        optimizer: str | Optimizer = "exact_sgd",
        learning_rate: float = 0.01,
        eps: float = 1.0e-8,
        weights_dtype: torch.dtype | str = torch.float32,
        output_dtype: torch.dtype | str = torch.float32,
        pooling: str | Pooling = "sum",
        bounds_check: str | BoundsCheckMode = "warning",
        config: Optional[KernelConfig] = None,
        device: Optional[torch.device | str] = None,
        seed: int = 0,
        feature_table_map: Optional[Sequence[int]] = None,
    ) -> None:
        super().__init__()
        specs = parse_specs(embedding_specs)
        self.layout = TableLayout(specs, check_feature_table_map(
            () if feature_table_map is None else feature_table_map, len(specs)))
        self.optimizer = parse_enum(Optimizer, "optimizer", optimizer)
        self.pooling = parse_enum(Pooling, "pooling", pooling)
        self.bounds_check_mode = parse_enum(BoundsCheckMode, "bounds_check", bounds_check)
        self.learning_rate = _check_hyper("learning_rate", learning_rate)
        self.eps = _check_hyper("eps", eps)
        self.weights_dtype = parse_float_dtype("weights_dtype", weights_dtype)
        self.output_dtype = parse_float_dtype("output_dtype", output_dtype)
        if config is None:
            config = KernelConfig()
        if not isinstance(config, KernelConfig):
            raise TypeError(f"config must be a KernelConfig, got {type(config).__name__}")
        self.config = config
        self.rounding_seed = int(seed)  # the next step's stochastic-rounding seed
        self.device = torch.device(device) if device is not None else backend.default_device()
        if backend.INTERPRETED and self.device.type != "cpu":
            raise ValueError(f"device={self.device} but kernels run in the Triton interpreter (CPU only)")
        if not backend.INTERPRETED and self.device.type != "cuda":
            raise ValueError(f"device={self.device} but compiled Triton kernels need a CUDA device")

        layout = self.layout
        self.register_buffer(
            "weights", torch.empty(layout.total_elements, dtype=self.weights_dtype, device=self.device)
        )
        n_state = layout.total_rows if self.optimizer == Optimizer.EXACT_ROWWISE_ADAGRAD else 0
        self.register_buffer("momentum", torch.zeros(n_state, dtype=torch.float32, device=self.device))
        self.register_buffer("bounds_check_warnings", torch.zeros(1, dtype=torch.int64, device=self.device))
        # gives the output a grad_fn; the real update is applied in place by the backward
        self.placeholder = nn.Parameter(torch.zeros(0, device=self.device))
        self.layout_tensors = device_layout(layout, config, self.device)
        self.workspaces = Workspaces(self.device)
        self.copy_max_rows = self._copy_max_rows()
        self.reset_weights(seed)

    # ------------------------------------------------------------------ weights and state
    def reset_weights(self, seed: int = 0) -> None:
        """``seeded_weights(layout, weights_dtype, seed)``, drawn on the module's device, and zero optimizer state."""
        with torch.no_grad():
            self.weights.copy_(seeded_weights(self.layout, self.weights_dtype, seed, self.device))
            self.momentum.zero_()

    def split_embedding_weights(self) -> list[torch.Tensor]:
        """Per-table [E_t, D_t] views of the packed weights (writes go through)."""
        return [
            self.weights[off: off + s.rows * s.dim].view(s.rows, s.dim)
            for off, s in zip(self.layout.weights_offsets, self.layout.specs)
        ]

    def split_optimizer_states(self) -> list[list[torch.Tensor]]:
        """Per-table optimizer state, as FBGEMM lists it: [[momentum_t]] for row-wise Adagrad, [[]] for SGD."""
        if self.optimizer != Optimizer.EXACT_ROWWISE_ADAGRAD:
            return [[] for _ in self.layout.specs]
        cs = self.layout.hash_size_cumsum
        return [[self.momentum[cs[t]: cs[t + 1]]] for t in range(self.layout.num_tables)]

    def load_weights(self, tables: Sequence[torch.Tensor]) -> None:
        """Copy per-table [E_t, D_t] tensors into the packed weights."""
        if len(tables) != self.layout.num_tables:
            raise ValueError(f"load_weights got {len(tables)} tables, expected {self.layout.num_tables}")
        for t, (dst, src) in enumerate(zip(self.split_embedding_weights(), tables)):
            if tuple(src.shape) != tuple(dst.shape):
                raise ValueError(f"load_weights: table {t} has shape {tuple(src.shape)}, expected {tuple(dst.shape)}")
            with torch.no_grad():
                dst.copy_(src)

    def next_rounding_seed(self) -> int:
        """The seed of this step's stochastic rounding; advances ``rounding_seed`` so the next step draws anew."""
        seed = self.rounding_seed
        self.rounding_seed = (seed + 1) % (1 << 62)
        return seed

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        indices: torch.Tensor,
        offsets: torch.Tensor,
        per_sample_weights: Optional[torch.Tensor] = None,
        batch_size_per_feature: Optional[Sequence[int]] = None,
    ) -> torch.Tensor:
        """The pooled output: [B, sum D], or with ``batch_size_per_feature`` (one B_f per feature, 0 allowed;
        offsets then has sum B_f + 1 entries) the flat [sum B_f * D_f], FBGEMM's single-rank VBE layout."""
        variable = None if batch_size_per_feature is None else VariableBatch(
            batch_size_per_feature, tuple(self.layout.feature_dims))
        batch_size = validate_batch(indices, offsets, per_sample_weights, self.layout.num_features, self.device,
                                    variable)
        vbe = None if variable is None else vbe_tensors(variable, self.device)
        # standalone check: repaired here; fused: offsets here, ids inside the forward kernel
        fwd_indices, checked_offsets, check = prepare_bounds(
            indices, offsets, self.layout_tensors["rows"], batch_size,
            self.bounds_check_mode, self.bounds_check_warnings, self.config, vbe, self.copy_max_rows,
        )
        return TBEFunction.apply(
            self.placeholder, per_sample_weights, self, fwd_indices, checked_offsets, batch_size, check, vbe
        )

    def _copy_max_rows(self) -> Optional[int]:
        """``max_rows`` for the standalone check's repaired copies: int32 where they fit
        (``tbe.bounds_check.copy_dtype``), unless a batch may take the small-table path, whose kernels read int64 ids
        (``tbe.forward_small_table.wide_ids``): then None, the caller's dtype. Asked once, of the path rule with the
        most eligible batch (one unweighted bag of ``small_table_min_pooling`` ids)."""
        cfg = self.config
        path = choose_path(self.layout.feature_dims, self.layout.feature_rows, cfg.small_table_min_pooling, 1,
                           self.weights_dtype, self.output_dtype, False, cfg)
        return None if path is Path.FWD_SMALL_TABLE else max(self.layout.rows)

    def extra_repr(self) -> str:
        return (
            f"tables={[(s.rows, s.dim) for s in self.layout.specs]}, "
            f"feature_table_map={list(self.layout.feature_tables)}, optimizer={self.optimizer.value}, "
            f"pooling={self.pooling.value}, weights={self.weights_dtype}, output={self.output_dtype}, "
            f"bounds_check={self.bounds_check_mode.value}"
        )
