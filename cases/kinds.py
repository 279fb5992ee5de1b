"""The three kinds of case a campaign draws and replays: a CaseSpec, a CaseSpec run on a bad-id batch, or a pack.

``CaseSpec`` materializes only valid batches, so bad ids and broken offsets come from a ``BadBatchSpec``;
``BadIdCase`` pairs the two (tables, modes and dtypes from the CaseSpec, tensors from the BadBatchSpec);
``PackCase`` runs several CaseSpecs as one step. All kinds serialize to JSON (``to_dict``,
``case_from_dict``); ``cases.batch.tensors`` materializes each.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, ClassVar, Union

from cases.bad import BadBatchSpec
from cases.pack import PackCase
from cases.protocol import CaseKind
from cases.spec import CaseSpec


@dataclasses.dataclass(frozen=True)
class BadIdCase:
    """``spec``'s module (bounds_check mode, pooling, dtypes) run on ``bad``'s invalid batch."""

    kind: ClassVar[CaseKind] = CaseKind.BAD_IDS
    spec: CaseSpec
    bad: BadBatchSpec

    def __post_init__(self) -> None:
        if tuple(self.spec.tables) != tuple(self.bad.tables) or self.spec.batch_size != self.bad.batch_size:
            raise ValueError("BadIdCase: spec and bad batch must have the same tables and batch_size")
        for field in ("feature_table_map", "batch_size_per_feature"):  # the batch's layout is the module's
            ours, theirs = getattr(self.spec, field), getattr(self.bad, field)
            if ours != theirs:
                raise ValueError(f"BadIdCase: spec.{field}={_shown(ours)} but bad.{field}={_shown(theirs)}; "
                                 f"spec and bad batch must agree on it")
        if self.spec.weighted != self.bad.weighted or self.spec.index_dtype != self.bad.index_dtype:
            raise ValueError("BadIdCase: spec and bad batch must agree on weighted and index_dtype")

    @property
    def subs(self) -> tuple[CaseSpec, ...]:
        return (self.spec,)

    def size(self) -> tuple[int, int, int]:
        spec = self.spec
        return spec.num_tables, spec.num_bags, spec.num_bags * self.bad.max_length

    def with_modes(self, **fields: Any) -> "BadIdCase":
        bad = {k: v for k, v in fields.items() if k in ("weighted", "index_dtype")}
        return BadIdCase(dataclasses.replace(self.spec, **fields), dataclasses.replace(self.bad, **bad))

    def reseeded(self, shift: int) -> "BadIdCase":
        return BadIdCase(self.spec.reseeded(shift), dataclasses.replace(self.bad, seed=self.bad.seed + shift))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": CaseKind.BAD_IDS.value, "spec": self.spec.to_dict(), "bad": json.loads(self.bad.to_json())}


def _shown(value: Any) -> Any:
    """A per-feature field as a record shows it: a list, or None when unset."""
    return None if value is None else list(value)


AnyCase = Union[CaseSpec, BadIdCase, PackCase]


def case_from_dict(data: dict[str, Any]) -> AnyCase:
    """Inverse of ``to_dict``; a plain CaseSpec dict (no ``kind``) is accepted as is."""
    if not isinstance(data, dict):
        raise ValueError(f"case JSON must be an object, got {type(data).__name__}")
    if data.get("kind") == CaseKind.BAD_IDS.value:
        return BadIdCase(CaseSpec.from_dict(data["spec"]), BadBatchSpec.from_json(json.dumps(data["bad"])))
    if data.get("kind") == CaseKind.PACK.value:
        return PackCase.from_dict(data)
    return CaseSpec.from_dict({k: v for k, v in data.items() if k != "kind"})
