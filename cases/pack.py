"""Packs: several independent cases checked as one TBE step, their tables side by side.

A ``PackCase`` holds sub-cases (``CaseSpec``s) that agree on everything one module fixes
(``MODE_FIELDS``: pooling, dtypes, weighting, optimizer and its rate, bounds-check mode, steps).
Their tables become disjoint tables of one module and one batch: sub-case ``i``'s tables follow
sub-case ``i - 1``'s, and a sub-case with fewer bags than the largest is padded with empty bags
at the end of each of its tables (an empty bag pools to zero and trains nothing, so each
sub-case's outputs and updates are those it gets alone). Each sub-case keeps its own ids,
per-sample weights, gradients and initial weights, materialized from its own spec; one run of
the SUT and one pass of the references check them all, and a failure is named by the sub-case
that holds its worst table (``sub_of_table``).

FATAL bounds checking raises on the first bad input of the whole batch, so a FATAL sub-case never
shares a pack (``packable``); nor does a VBE sub-case (its batch is not padded per table, and one module takes
either a fixed batch or a batch size per feature).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import json
from typing import Any, ClassVar, Optional

from cases.protocol import CaseKind
from cases.spec import CaseSpec, HotRow, with_rate_and_steps

# what one module fixes for all its tables: sub-cases of a pack agree on each
MODE_FIELDS = ("pooling", "weights_dtype", "output_dtype", "index_dtype", "weighted", "optimizer",
               "learning_rate", "eps", "bounds_check", "steps")


def packable(spec: CaseSpec) -> bool:
    """Whether ``spec`` may share a step with other sub-cases (FATAL runs alone: it stops the whole batch; VBE
    runs alone: its bags are laid out per feature, not padded to one batch)."""
    return spec.bounds_check != "fatal" and not spec.vbe


@dataclasses.dataclass(frozen=True)
class PackCase:
    """Sub-cases run as one step; ``spec`` is the module and batch shape they make together."""

    kind: ClassVar[CaseKind] = CaseKind.PACK
    bad: ClassVar[None] = None  # its sub-cases' batches are valid (cases.protocol.CaseRecord)
    subs: tuple[CaseSpec, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "subs", tuple(self.subs))
        if not self.subs:
            raise ValueError("PackCase.subs is empty: a pack holds at least one sub-case")
        first = self.subs[0]
        for i, sub in enumerate(self.subs):
            if not isinstance(sub, CaseSpec):
                raise ValueError(f"PackCase.subs[{i}] is a {type(sub).__name__}, not a CaseSpec")
            for name in MODE_FIELDS:
                if getattr(sub, name) != getattr(first, name):
                    raise ValueError(f"PackCase.subs[{i}].{name} is {getattr(sub, name)!r}, sub-case 0's is "
                                     f"{getattr(first, name)!r}: a pack's sub-cases share one module's modes")
        for i, sub in enumerate(self.subs):
            if sub.vbe:
                raise ValueError(f"PackCase.subs[{i}].batch_size_per_feature is {list(sub.batch_size_per_feature)}: "
                                 f"a VBE case runs alone, never in a pack")
        if len(self.subs) > 1 and not packable(first):
            raise ValueError(f"PackCase.subs[0].bounds_check is {first.bounds_check!r}: such a sub-case runs alone")

    @functools.cached_property
    def spec(self) -> CaseSpec:
        """The module and batch of the whole pack: every sub-case's tables, the largest batch, the shared modes.
        Its own fields of the batch's contents (lengths, seed) are sub-case 0's; only
        ``cases.tensors`` builds the batch. Built once per pack: every check asks for it."""
        first = self.subs[0]
        hot: list[HotRow] = []
        for start, sub in zip(self.table_starts(), self.subs):
            hot += [HotRow(start + h.table, h.row, h.count) for h in sub.hot_rows]
        shared = any(s.feature_table_map for s in self.subs)
        fmap = tuple(start + t for start, s in zip(self.table_starts(), self.subs) for t in s.feature_tables)
        return dataclasses.replace(
            first, tables=tuple(t for s in self.subs for t in s.tables), batch_size=self.batch_size,
            max_length=max(s.max_length for s in self.subs), hot_rows=tuple(hot),
            values="dyadic" if all(s.values == "dyadic" for s in self.subs) else "random",
            feature_table_map=fmap if shared else (),
        )

    @property
    def batch_size(self) -> int:
        return max(s.batch_size for s in self.subs)

    def table_starts(self) -> list[int]:
        """The pack's table index of each sub-case's first table."""
        return list(itertools.accumulate((s.num_tables for s in self.subs[:-1]), initial=0))

    def sub_of_table(self, table: int) -> Optional[int]:
        """The sub-case holding the pack's table ``table`` (None outside the pack)."""
        if not 0 <= table < self.spec.num_tables:
            return None
        return bisect.bisect_right(self.table_starts(), table) - 1

    def expected_lookups(self) -> int:
        return sum(s.expected_lookups() for s in self.subs)

    def size(self) -> tuple[int, int, int]:
        spec = self.spec
        return spec.num_tables, spec.num_features * spec.batch_size, self.expected_lookups()

    def with_modes(self, **fields: Any) -> "PackCase":
        return PackCase(tuple(dataclasses.replace(s, **fields) for s in self.subs))

    def reseeded(self, shift: int) -> "PackCase":
        return PackCase(tuple(s.reseeded(shift) for s in self.subs))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": CaseKind.PACK.value, "subs": [s.to_dict() for s in self.subs]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PackCase":
        subs = d.get("subs")
        if not isinstance(subs, list):
            raise ValueError(f"a pack's JSON needs a list 'subs', got {type(subs).__name__}")
        return cls(tuple(CaseSpec.from_dict(s) for s in subs))


def unify(first: CaseSpec, other: CaseSpec) -> CaseSpec:
    """``other`` with ``first``'s modes, its rate capped for its own longest run over several steps."""
    spec = dataclasses.replace(other, **{f: getattr(first, f) for f in MODE_FIELDS})
    return with_rate_and_steps(spec, first.learning_rate, first.steps)


def assemble(subs: list[CaseSpec], max_lookups: int) -> CaseSpec | PackCase:
    """The pack of ``subs`` (their modes made the first's, one common rate) within ``max_lookups`` expected
    lookups; a single spec when only one fits or the first runs alone."""
    first = subs[0]
    if not packable(first):
        return first
    kept, total = [first], first.expected_lookups()
    for s in subs[1:]:
        u = unify(first, s)
        if packable(u) and total + u.expected_lookups() <= max_lookups:
            kept.append(u)
            total += u.expected_lookups()
    if len(kept) == 1:
        return first
    rate = min(s.learning_rate for s in kept)
    return PackCase(tuple(dataclasses.replace(s, learning_rate=rate) for s in kept))
