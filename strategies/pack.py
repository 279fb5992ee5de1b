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
shares a pack (``packable``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

import torch
from hypothesis import strategies as st

from strategies.case import CaseSpec, HotRow, materialize, multi_step_rate

# what one module fixes for all its tables: sub-cases of a pack agree on each
MODE_FIELDS = ("pooling", "weights_dtype", "output_dtype", "index_dtype", "weighted", "optimizer",
               "learning_rate", "eps", "bounds_check", "steps")


def packable(spec: CaseSpec) -> bool:
    """Whether ``spec`` may share a step with other sub-cases (FATAL runs alone: it stops the whole batch)."""
    return spec.bounds_check != "fatal"


@dataclasses.dataclass(frozen=True)
class PackCase:
    """Sub-cases run as one step; ``spec`` is the module and batch shape they make together."""

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
        if len(self.subs) > 1 and not packable(first):
            raise ValueError(f"PackCase.subs[0].bounds_check is {first.bounds_check!r}: such a sub-case runs alone")

    @property
    def spec(self) -> CaseSpec:
        """The module and batch of the whole pack: every sub-case's tables, the largest batch, the shared modes.
        Its own fields of the batch's contents (lengths, seed) are sub-case 0's; only ``tensors`` builds the batch."""
        first = self.subs[0]
        hot: list[HotRow] = []
        for start, sub in zip(self.table_starts(), self.subs):
            hot += [HotRow(start + h.table, h.row, h.count) for h in sub.hot_rows]
        return dataclasses.replace(
            first, tables=tuple(t for s in self.subs for t in s.tables), batch_size=self.batch_size,
            max_length=max(s.max_length for s in self.subs), hot_rows=tuple(hot),
            values="dyadic" if all(s.values == "dyadic" for s in self.subs) else "random",
        )

    @property
    def batch_size(self) -> int:
        return max(s.batch_size for s in self.subs)

    def table_starts(self) -> list[int]:
        """The pack's table index of each sub-case's first table."""
        out, n = [], 0
        for s in self.subs:
            out.append(n)
            n += s.num_tables
        return out

    def sub_of_table(self, table: int) -> Optional[int]:
        """The sub-case holding the pack's table ``table`` (None outside the pack)."""
        for i, start in reversed(list(enumerate(self.table_starts()))):
            if start <= table < start + self.subs[i].num_tables:
                return i
        return None

    def expected_lookups(self) -> int:
        return sum(s.expected_lookups() for s in self.subs)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "pack", "subs": [s.to_dict() for s in self.subs]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PackCase":
        subs = d.get("subs")
        if not isinstance(subs, list):
            raise ValueError(f"a pack's JSON needs a list 'subs', got {type(subs).__name__}")
        return cls(tuple(CaseSpec.from_dict(s) for s in subs))


@dataclasses.dataclass
class PackTensors:
    """The pack's batch (CPU): indices, offsets, per-sample weights, each step's d_out, initial weights."""

    indices: torch.Tensor
    offsets: torch.Tensor
    per_sample_weights: Optional[torch.Tensor]
    grad_outputs: list[torch.Tensor]
    initial_weights: torch.Tensor


def pack_tensors(pack: PackCase, sub_weights: list[torch.Tensor], steps: bool = True) -> PackTensors:
    """Materialize each sub-case from its spec and lay them side by side; ``sub_weights`` are each sub-case's
    packed initial weights (``strategies.cases.initial_weights``), concatenated in table order."""
    B = pack.batch_size
    ids, lengths, psws, grads = [], [], [], []
    for sub in pack.subs:
        m = materialize(sub)
        off = m.offsets.to(torch.int64)
        per_bag = (off[1:] - off[:-1]).reshape(sub.num_tables, sub.batch_size)
        lengths.append(torch.cat([per_bag, torch.zeros(sub.num_tables, B - sub.batch_size, dtype=torch.int64)], 1))
        ids.append(m.indices)
        if m.per_sample_weights is not None:
            psws.append(m.per_sample_weights)
        # d_out rows of padding bags are zero: nothing reads them, and a zero keeps any mix-up visible as a change
        grads.append([torch.cat([g, g.new_zeros(B - sub.batch_size, g.shape[1])]) for g in m.grad_outputs])
    idx_dtype = ids[0].dtype
    offsets = torch.zeros(sum(s.num_tables for s in pack.subs) * B + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(torch.cat(lengths).reshape(-1), 0)
    psw = torch.cat(psws) if pack.subs[0].weighted else None
    steps_grads = [torch.cat([g[k] for g in grads], 1) for k in range(pack.subs[0].steps)] if steps else []
    return PackTensors(torch.cat(ids).contiguous(), offsets.to(idx_dtype), psw, steps_grads, torch.cat(sub_weights))


def unify(first: CaseSpec, other: CaseSpec) -> CaseSpec:
    """``other`` with ``first``'s modes, its rate capped for its own longest run over several steps."""
    spec = dataclasses.replace(other, **{f: getattr(first, f) for f in MODE_FIELDS})
    longest = max([h.count for h in other.hot_rows] + [other.max_length, 1])
    return dataclasses.replace(spec, learning_rate=multi_step_rate(first.learning_rate, longest, first.steps))


def assemble(subs: list[CaseSpec], max_lookups: int) -> CaseSpec | PackCase:
    """The pack of ``subs`` (their modes made the first's, one common rate) within ``max_lookups`` expected
    lookups; a single spec when only one fits or the first runs alone."""
    first = subs[0]
    if not packable(first):
        return first
    kept, total = [first], first.expected_lookups()
    for s in subs[1:]:
        u = unify(first, s)
        if total + u.expected_lookups() <= max_lookups:
            kept.append(u)
            total += u.expected_lookups()
    if len(kept) == 1:
        return first
    rate = min(s.learning_rate for s in kept)
    return PackCase(tuple(dataclasses.replace(s, learning_rate=rate) for s in kept))


def packs(sub: st.SearchStrategy[CaseSpec], max_subs: int, max_lookups: int) -> st.SearchStrategy:
    """One to ``max_subs`` draws of ``sub`` as one pack (``assemble``); shrinking deletes sub-cases first,
    down to a plain CaseSpec."""
    if max_subs <= 1:
        return sub
    return st.lists(sub, min_size=1, max_size=max_subs).map(lambda subs: assemble(subs, max_lookups))
