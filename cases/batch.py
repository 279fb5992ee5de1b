"""A case materialized: the ``CaseTensors`` a check consumes, an artifact saves and a replay feeds back."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import torch

from cases.bad import materialize_bad
from cases.dyadic import dyadic_grads, dyadic_weights
from cases.kinds import AnyCase, BadIdCase
from cases.pack import PackCase
from cases.spec import CaseSpec, materialize
from tbe.layout import seeded_weights


@dataclasses.dataclass
class CaseTensors:
    """Everything a check consumes, on one device (the CPU unless drawn for another): the batch, each step's
    d_out, the initial weights."""

    indices: torch.Tensor
    offsets: torch.Tensor
    per_sample_weights: Optional[torch.Tensor]
    grad_outputs: list[torch.Tensor]
    initial_weights: Optional[torch.Tensor]  # None when materialized only to run (artifacts need them)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to(self, device: torch.device | str) -> "CaseTensors":
        """The same tensors on ``device`` (these where they are there already)."""
        def move(x):
            return None if x is None else x.to(device)
        return CaseTensors(move(self.indices), move(self.offsets), move(self.per_sample_weights),
                           [move(g) for g in self.grad_outputs], move(self.initial_weights))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CaseTensors":
        return cls(d["indices"], d["offsets"], d["per_sample_weights"], list(d["grad_outputs"]), d["initial_weights"])


def initial_weights(spec: CaseSpec | PackCase, device: Optional[torch.device | str] = None) -> torch.Tensor:
    """The packed weights every SUT starts ``spec`` from, on ``device``: ``tbe.layout.seeded_weights`` (what
    a fresh TritonTBE holds), or for ``values="dyadic"`` exact-value weights (``cases.dyadic``); a
    pack's are its sub-cases', one after another."""
    if isinstance(spec, PackCase):
        return torch.cat([initial_weights(s, device) for s in spec.subs])
    dtype = spec.weights_dtype.torch
    if spec.values == "dyadic":
        return dyadic_weights(spec, spec.seed, device).to(dtype)
    return seeded_weights(spec.layout, dtype, spec.seed, device)


def tensors(case: AnyCase, *, steps: bool = True, weights: bool = True,
            device: Optional[torch.device | str] = None) -> CaseTensors:
    """Materialize ``case`` (deterministic in the case) on ``device`` (default the CPU; the values are the same
    on each); ``weights=False`` skips the initial weights where the spec alone gives them (a pack's are its
    sub-cases', so it always carries them). A plain spec's large draws run on the device itself; packs and
    bad-input batches, whose sub-cases are small, are drawn on the CPU and moved."""
    spec = case.spec
    if isinstance(case, PackCase):
        t = _pack_tensors(case, steps)
        return t if device is None else t.to(device)
    if isinstance(case, BadIdCase):
        batch = materialize_bad(case.bad)
        g = torch.Generator().manual_seed(case.bad.seed ^ 0x6EAD)
        out_dtype = spec.output_dtype.torch
        total_dim = spec.total_dim
        shape = (spec.output_size,) if spec.vbe else (spec.batch_size, total_dim)  # VBE: the flat output's
        grads = dyadic_grads(spec, g, out_dtype) if spec.values == "dyadic" else \
            [torch.randn(*shape, generator=g).to(out_dtype) for _ in range(spec.steps)]
        indices, offsets, psw = batch.indices, batch.offsets, batch.per_sample_weights
    else:
        m = materialize(spec, device)
        indices, offsets, psw, grads = m.indices, m.offsets, m.per_sample_weights, m.grad_outputs
    t = CaseTensors(indices, offsets, psw, grads if steps else [], initial_weights(spec, device) if weights else None)
    return t if device is None else t.to(device)


def _pack_tensors(pack: PackCase, steps: bool) -> CaseTensors:
    """Each sub-case materialized from its own spec and laid side by side, short batches padded with empty bags."""
    B = pack.batch_size
    ids, lengths, psws, grads = [], [], [], []
    for sub in pack.subs:
        m = materialize(sub)
        off = m.offsets.to(torch.int64)
        per_bag = (off[1:] - off[:-1]).reshape(sub.num_features, sub.batch_size)
        lengths.append(torch.cat([per_bag, torch.zeros(sub.num_features, B - sub.batch_size, dtype=torch.int64)], 1))
        ids.append(m.indices)
        if m.per_sample_weights is not None:
            psws.append(m.per_sample_weights)
        # d_out rows of padding bags are zero: nothing reads them, and a zero keeps any mix-up visible as a change
        grads.append([torch.cat([g, g.new_zeros(B - sub.batch_size, g.shape[1])]) for g in m.grad_outputs])
    offsets = torch.zeros(pack.spec.num_features * B + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(torch.cat(lengths).reshape(-1), 0)
    psw = torch.cat(psws) if pack.spec.weighted else None
    step_grads = [torch.cat([g[k] for g in grads], 1) for k in range(pack.spec.steps)] if steps else []
    return CaseTensors(torch.cat(ids).contiguous(), offsets.to(ids[0].dtype), psw, step_grads, initial_weights(pack))
