"""Reference transpose: each lookup's linear index, the stable sorted order and the runs,
computed with Python integers (no fixed-width arithmetic, no kernels).

The authority for the transpose on layouts too large to allocate (2^31+ rows): it needs
only the row counts, the ids and the offsets.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from tbe.layout import TableLayout


@dataclasses.dataclass
class ReferenceRuns:
    linear: list[int]        # per lookup, original order
    bag_of: list[int]        # per lookup
    order: list[int]         # original position of each sorted lookup (ties in original order)
    run_linear: list[int]
    run_length: list[int]
    run_start: list[int]
    sorted_psw: Optional[torch.Tensor]


def reference_transpose(
    layout: TableLayout, indices: torch.Tensor, offsets: torch.Tensor,
    per_sample_weights: Optional[torch.Tensor], batch_size: int,
) -> ReferenceRuns:
    """Linearize, sort stably by (linear index, position), run-length encode; valid batches only."""
    ids = [int(x) for x in indices.tolist()]
    off = [int(x) for x in offsets.tolist()]
    start = layout.hash_size_cumsum
    linear, bag_of = [], []
    for k in range(len(off) - 1):
        t = layout.feature_tables[k // max(batch_size, 1)]
        for p in range(off[k], off[k + 1]):
            linear.append(start[t] + ids[p])
            bag_of.append(k)
    order = sorted(range(len(linear)), key=lambda i: (linear[i], i))
    run_linear, run_length, run_start = [], [], []
    for pos, i in enumerate(order):
        if run_linear and run_linear[-1] == linear[i]:
            run_length[-1] += 1
        else:
            run_linear.append(linear[i])
            run_length.append(1)
            run_start.append(pos)
    psw = None if per_sample_weights is None else per_sample_weights[torch.tensor(order, dtype=torch.int64)]
    return ReferenceRuns(linear, bag_of, order, run_linear, run_length, run_start, psw)
