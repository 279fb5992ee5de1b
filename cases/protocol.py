"""What every kind of case answers, so that code above ``cases`` never asks which kind it holds."""

from __future__ import annotations

import enum
from typing import Any, Optional, Protocol


class CaseKind(enum.Enum):
    """The kind of a case; the value is its JSON ``kind`` (a plain spec's JSON has none)."""

    SPEC = "spec"
    BAD_IDS = "bad_ids"
    PACK = "pack"


class CaseRecord(Protocol):
    """The protocol of ``CaseSpec``, ``BadIdCase`` and ``PackCase``."""

    kind: CaseKind

    @property
    def spec(self) -> Any:
        """The module and batch shape it runs with, a ``CaseSpec`` (a pack's: all its sub-cases' tables)."""

    @property
    def bad(self) -> Optional[Any]:
        """The invalid batch it runs on (a ``BadBatchSpec``), or None for a valid one."""

    @property
    def subs(self) -> tuple[Any, ...]:
        """The independent cases it checks (a pack's sub-cases; else the spec alone)."""

    def size(self) -> tuple[int, int, int]:
        """(tables, bags, expected lookups): how big a (shrunk) failing case is."""

    def with_modes(self, **fields: Any) -> "CaseRecord":
        """The case with module fields (dtypes, weighting, ...) replaced in every part that holds them."""

    def reseeded(self, shift: int) -> "CaseRecord":
        """The same case with every seed moved by ``shift``: its batches drawn afresh."""

    def to_dict(self) -> dict[str, Any]:
        """Its JSON (``cases.case_from_dict`` reads it back)."""
