"""The three kinds of case a campaign draws and replays: a CaseSpec, a CaseSpec run on a bad-id batch, or a pack.

``CaseSpec`` materializes only valid batches, so bad ids and broken offsets come from a ``BadBatchSpec``;
``BadIdCase`` pairs the two (tables, modes and dtypes from the CaseSpec, tensors from the BadBatchSpec);
``PackCase`` runs several CaseSpecs as one step. All kinds serialize to JSON (``case_to_dict``,
``case_from_dict``); ``cases.batch.tensors`` materializes each.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Union

from cases.bad import BadBatchSpec
from cases.pack import PackCase
from cases.spec import CaseSpec


@dataclasses.dataclass(frozen=True)
class BadIdCase:
    """``spec``'s module (bounds_check mode, pooling, dtypes) run on ``bad``'s invalid batch."""

    spec: CaseSpec
    bad: BadBatchSpec

    def __post_init__(self) -> None:
        if tuple(self.spec.tables) != tuple(self.bad.tables) or self.spec.batch_size != self.bad.batch_size:
            raise ValueError("BadIdCase: spec and bad batch must have the same tables and batch_size")
        if self.spec.weighted != self.bad.weighted or self.spec.index_dtype != self.bad.index_dtype:
            raise ValueError("BadIdCase: spec and bad batch must agree on weighted and index_dtype")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "bad_ids", "spec": self.spec.to_dict(), "bad": json.loads(self.bad.to_json())}


AnyCase = Union[CaseSpec, BadIdCase, PackCase]


def case_to_dict(case: AnyCase) -> dict[str, Any]:
    return case.to_dict()


def case_from_dict(data: dict[str, Any]) -> AnyCase:
    """Inverse of ``case_to_dict``; a plain CaseSpec dict (no ``kind``) is accepted as is."""
    if not isinstance(data, dict):
        raise ValueError(f"case JSON must be an object, got {type(data).__name__}")
    if data.get("kind") == "bad_ids":
        return BadIdCase(CaseSpec.from_dict(data["spec"]), BadBatchSpec.from_json(json.dumps(data["bad"])))
    if data.get("kind") == "pack":
        return PackCase.from_dict(data)
    return CaseSpec.from_dict({k: v for k, v in data.items() if k != "kind"})


def base_spec(case: AnyCase) -> CaseSpec:
    """The module and batch shape ``case`` runs with (a pack's: all its sub-cases' tables)."""
    return case.spec if isinstance(case, (BadIdCase, PackCase)) else case


def with_modes(case: AnyCase, **fields: Any) -> AnyCase:
    """``case`` with module fields (dtypes, weighting, ...) replaced in every part that holds them."""
    if isinstance(case, BadIdCase):
        bad = {k: v for k, v in fields.items() if k in ("weighted", "index_dtype")}
        return BadIdCase(dataclasses.replace(case.spec, **fields), dataclasses.replace(case.bad, **bad))
    if isinstance(case, PackCase):
        return PackCase(tuple(dataclasses.replace(s, **fields) for s in case.subs))
    return dataclasses.replace(case, **fields)


def sub_cases(case: AnyCase) -> int:
    """How many independent cases ``case`` checks (a pack's sub-cases, else one)."""
    return len(case.subs) if isinstance(case, PackCase) else 1


def case_size(case: AnyCase) -> tuple[int, int, int]:
    """(tables, bags, expected lookups): how big a (shrunk) failing case is."""
    spec = base_spec(case)
    if isinstance(case, BadIdCase):
        lookups = spec.num_tables * spec.batch_size * case.bad.max_length
    elif isinstance(case, PackCase):
        lookups = case.expected_lookups()
    else:
        lookups = spec.expected_lookups()
    return spec.num_tables, spec.num_tables * spec.batch_size, lookups
