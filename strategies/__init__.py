"""Hypothesis strategies for adversarial TBE batches.

Hypothesis draws a small, JSON-able ``CaseSpec`` (shapes, dtypes, segment-length profile,
hot rows, a seed); ``materialize`` turns it into tensors with a seeded torch.Generator.
Examples stay small, replay exactly from the spec alone, and shrink well.
"""

from cases import Case, CaseSpec, HotRow, materialize

__all__ = ["Case", "CaseSpec", "HotRow", "materialize"]
