"""The per-feature fields CaseSpec and BadBatchSpec share: which table each feature reads and, under VBE, each
feature's batch size. Checked here once, so both records refuse the same inputs, naming their own field."""

from __future__ import annotations

import itertools
from typing import Optional, Sequence

from tbe.layout import check_batch_sizes, check_feature_table_map


def checked_map(owner: str, feature_table_map: Sequence, num_tables: int) -> tuple[int, ...]:
    """``feature_table_map`` as ``tbe.layout`` stores it (empty for the identity); errors name ``owner``'s field."""
    try:
        return check_feature_table_map(feature_table_map, num_tables)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{owner}.{e}") from None


def checked_sizes(owner: str, batch_size_per_feature: Sequence, num_features: int, batch_size: int) -> tuple[int, ...]:
    """One B_f >= 0 per feature, with ``batch_size`` their maximum (what the references take as B); errors name
    ``owner``'s field and value."""
    try:
        sizes = check_batch_sizes(batch_size_per_feature, num_features)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{owner}.{e}") from None
    if batch_size != max(sizes, default=0):
        raise ValueError(f"{owner}.batch_size={batch_size} must be max(batch_size_per_feature="
                         f"{list(sizes)}) = {max(sizes, default=0)}")
    return sizes


def bag_base(batch_sizes: Optional[Sequence[int]]) -> list[int]:
    """F + 1 entries: each feature's first bag (bags are numbered feature by feature), then the number of bags."""
    return list(itertools.accumulate(batch_sizes, initial=0))


class FeatureBatches:
    """Per-feature batch sizes of a record with ``batch_size``, ``batch_size_per_feature`` and ``num_features``."""

    batch_size: int
    batch_size_per_feature: Optional[tuple[int, ...]]
    num_features: int

    @property
    def vbe(self) -> bool:
        """Whether each feature has its own batch size (VBE: offsets hold sum B_f + 1 entries, outputs are flat)."""
        return self.batch_size_per_feature is not None

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """Every feature's number of bags."""
        return self.batch_size_per_feature if self.vbe else (self.batch_size,) * self.num_features
