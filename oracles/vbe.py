"""Variable batch per feature (VBE) in the references, as a fixed batch with empty bags.

A VBE batch (feature f has B_f bags) is read as the fixed batch of B = max B_f whose bags past each feature's own
B_f are empty, and its flat output (FBGEMM's single-rank layout: feature f's [B_f, D_f] block after the one before)
as that batch's [B, sum D] output read at the real bags' rows. An empty bag adds no lookup, so the pooled values,
each bag's length and each row's runs (what the values and the error bounds depend on) are the VBE batch's own;
the references then need no second indexing scheme, independent of the kernels' per-bag tables. The price is
memory: max B_f x sum D entries rather than sum B_f x D_f.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from tbe.layout import TableLayout, VariableBatch


def variable_batch(layout: TableLayout, batch_size_per_feature: Optional[Sequence[int]]) -> Optional[VariableBatch]:
    """The checked batch sizes of ``layout``'s features, or None for a fixed batch."""
    if batch_size_per_feature is None:
        return None
    return VariableBatch(tuple(batch_size_per_feature), tuple(layout.feature_dims))


def bag_features(vb: VariableBatch) -> list[int]:
    """The feature of every bag, in bag order."""
    return [f for f, b in enumerate(vb.sizes) for _ in range(b)]


def padded_offsets(vb: VariableBatch, offsets: torch.Tensor) -> torch.Tensor:
    """The offsets of the fixed batch of B = max B_f (``F * B + 1`` entries, ``offsets``' dtype and device) in
    which feature f's bag b < B_f is the VBE batch's bag ``bag_base[f] + b`` and every bag past B_f is empty."""
    if offsets.numel() != vb.num_bags + 1:
        raise ValueError(f"offsets has {offsets.numel()} entries, expected sum(batch_size_per_feature) + 1 = "
                         f"{vb.num_bags + 1}")
    B, base = vb.max_batch, vb.bag_base
    entry = [base[f] + min(b, size) for f, size in enumerate(vb.sizes) for b in range(B)] + [vb.num_bags]
    return offsets[torch.tensor(entry, dtype=torch.int64, device=offsets.device)]


def output_index(layout: TableLayout, vb: VariableBatch, device: torch.device | str) -> torch.Tensor:
    """[sum B_f * D_f] int64: the entry of the flattened [B, sum D] output each flat VBE entry is."""
    parts = [torch.zeros(0, dtype=torch.int64)]
    for f, (size, dim) in enumerate(zip(vb.sizes, vb.dims)):
        rows = torch.arange(size, dtype=torch.int64)[:, None] * layout.total_dim
        parts.append((rows + layout.col_offsets[f] + torch.arange(dim, dtype=torch.int64)[None, :]).reshape(-1))
    return torch.cat(parts).to(device)


def to_flat(layout: TableLayout, vb: VariableBatch, dense: torch.Tensor) -> torch.Tensor:
    """A [B, sum D] tensor's entries at the real bags, in the flat VBE layout."""
    return dense.reshape(-1)[output_index(layout, vb, dense.device)]


def to_dense(layout: TableLayout, vb: VariableBatch, flat: torch.Tensor) -> torch.Tensor:
    """A flat VBE tensor (an upstream gradient) as [B, sum D], zero at the empty bags."""
    if tuple(flat.shape) != (vb.output_size,):
        raise ValueError(f"VBE tensor has shape {tuple(flat.shape)}, expected [sum B_f * D_f] = [{vb.output_size}]")
    out = torch.zeros(vb.max_batch * layout.total_dim, dtype=flat.dtype, device=flat.device)
    out[output_index(layout, vb, flat.device)] = flat
    return out.view(vb.max_batch, layout.total_dim)
