"""The ``torch`` SUT: ``F.embedding_bag`` (what ``nn.EmbeddingBag`` runs) with the optimizer in torch ops.

A baseline users know. Per table, the distinct rows a batch reads are gathered once and
upcast to fp32 (so fp16/bf16 tables are pooled in fp32, as the TBE does), pooled with
``F.embedding_bag`` (SUM, or MEAN; per-sample weights with MEAN are pooled as SUM and
divided by the bag length, since ``embedding_bag`` takes weights with SUM only), and the
output is rounded once to the output dtype. Autograd yields each distinct row's gradient
and the per-sample-weight gradient; the backward then applies exact SGD or exact row-wise
Adagrad once per distinct row (``lr / (sqrt(m) + eps)`` as one correctly rounded division)
and rounds the new rows to the weights' dtype. Features sharing a table (``feature_table_map``) gather
its rows once, so autograd sums a row's gradient over them. With a batch size per feature (VBE) each feature
pools its own bags and the output is the features' [B_f, D_f] blocks flattened one after another. Bounds
checking is ``fuzz.sut.torch_bounds``.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from fuzz.errors import FatalBoundsCheck, TorchBoundsError
from fuzz.sut.protocol import SUT, Capabilities, TBEParams
from fuzz.sut.torch_bounds import check_bounds
from tbe.modes import BoundsCheckMode, Optimizer, Pooling


def _device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


class TorchInstance:
    def __init__(self, p: TBEParams) -> None:
        self.p = p
        self.device = _device()
        self.rows = [e for e, _ in p.tables]
        self.dims = [d for _, d in p.tables]
        self.feature_tables = p.feature_table_map or tuple(range(len(p.tables)))
        self.tables = [w.to(self.device, p.weights_dtype).clone() for w in p.initial_weights]
        self.adagrad = Optimizer(p.optimizer) == Optimizer.EXACT_ROWWISE_ADAGRAD
        self.state = [torch.zeros(e, dtype=torch.float32, device=self.device) for e in self.rows] if self.adagrad else None
        self.warnings = 0
        self._out: Optional[torch.Tensor] = None
        self._psw: Optional[torch.Tensor] = None
        self._gathered: list[tuple[int, torch.Tensor, torch.Tensor]] = []

    def forward(self, indices, offsets, per_sample_weights=None, batch_size_per_feature=None) -> torch.Tensor:
        ft = self.feature_tables
        sizes = [(offsets.numel() - 1) // len(ft)] * len(ft) if batch_size_per_feature is None else \
            [int(b) for b in batch_size_per_feature]
        base = [sum(sizes[:f]) for f in range(len(ft) + 1)]  # each feature's first bag, then the bag count
        try:
            ids, off, warnings = check_bounds([self.rows[t] for t in ft], indices.to(self.device),
                                              offsets.to(self.device), BoundsCheckMode(self.p.bounds_check),
                                              batch_size_per_feature)
        except TorchBoundsError as e:
            raise FatalBoundsCheck(str(e)) from e
        self.warnings += warnings
        grad = torch.is_grad_enabled()
        psw = None
        if per_sample_weights is not None:
            psw = per_sample_weights.to(self.device).clone().requires_grad_(grad)
        mean = Pooling(self.p.pooling) == Pooling.MEAN
        outs, self._gathered = {}, []
        span = [(int(off[base[f]]), int(off[base[f + 1]])) for f in range(len(ft))]
        for t in range(len(self.tables)):
            readers = [f for f, x in enumerate(ft) if x == t]
            for f in readers:
                outs[f] = torch.zeros(sizes[f], self.dims[t], device=self.device)
            if all(hi == lo for lo, hi in (span[f] for f in readers)):
                continue
            # one gather of the table's rows for all its features: a row's gradient sums over them
            uniq, inverse = torch.unique(torch.cat([ids[slice(*span[f])] for f in readers]), return_inverse=True)
            rows = self.tables[t][uniq].float().requires_grad_(grad)
            at = 0
            for f in readers:
                lo, hi = span[f]
                if hi == lo:
                    continue
                inv, at = inverse[at: at + hi - lo], at + hi - lo
                bags = off[base[f]: base[f + 1]] - lo
                if psw is None:
                    outs[f] = F.embedding_bag(inv, rows, bags, mode="mean" if mean else "sum")
                else:
                    pooled = F.embedding_bag(inv, rows, bags, mode="sum", per_sample_weights=psw[lo:hi].float())
                    if mean:
                        lengths = (off[base[f] + 1: base[f + 1] + 1] - off[base[f]: base[f + 1]]).clamp(min=1)
                        pooled = pooled / lengths.to(torch.float32)[:, None]
                    outs[f] = pooled
            self._gathered.append((t, uniq, rows))
        if batch_size_per_feature is None:
            out = torch.cat([outs[f] for f in range(len(ft))], 1).to(self.p.output_dtype)
        else:  # flat: feature f's [B_f, D_f] block after the one before
            out = torch.cat([outs[f].reshape(-1) for f in range(len(ft))]).to(self.p.output_dtype)
        self._out, self._psw = out, psw
        return out

    def backward(self, grad_output: torch.Tensor) -> Optional[torch.Tensor]:
        out, self._out = self._out, None
        if out.requires_grad:
            out.backward(grad_output.to(self.device, out.dtype))
        lr = torch.tensor(self.p.learning_rate, dtype=torch.float32, device=self.device)
        with torch.no_grad():
            for t, uniq, rows in self._gathered:
                g = rows.grad if rows.grad is not None else torch.zeros_like(rows)
                w = rows.detach()  # the rows before the step, already fp32
                if self.adagrad:
                    m = self.state[t][uniq] + (g * g).mean(1)
                    self.state[t][uniq] = m
                    rate = torch.div(lr, m.sqrt() + self.p.eps)
                    new = w - rate[:, None] * g
                else:
                    new = w - lr * g
                self.tables[t][uniq] = new.to(self.tables[t].dtype)
        self._gathered = []
        if self._psw is None:
            return None
        return self._psw.grad if self._psw.grad is not None else torch.zeros_like(self._psw)  # no lookups

    def weights(self) -> list[torch.Tensor]:
        return [w.detach().cpu().clone() for w in self.tables]

    def momentum(self) -> Optional[list[torch.Tensor]]:
        return None if self.state is None else [m.cpu().clone() for m in self.state]

    def bounds_check_warnings(self) -> int:
        return self.warnings


def factory() -> SUT:
    return SUT("torch", Capabilities(devices=("cpu", "cuda"), memory_safe=True, feature_table_map=True, vbe=True),
               TorchInstance,
               description="F.embedding_bag with exact SGD / row-wise Adagrad in torch ops")
