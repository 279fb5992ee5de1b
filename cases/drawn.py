"""A drawn case with the KernelConfig overrides it was drawn under: what a config-space search hands a campaign."""

from __future__ import annotations

import dataclasses
from typing import Any

from cases.kinds import AnyCase
from tbe.config import KernelConfig


@dataclasses.dataclass(frozen=True)
class Drawn:
    """A case and the overrides its config was drawn with (sorted (field, value) pairs)."""

    case: AnyCase
    overrides: tuple[tuple[str, Any], ...] = ()

    def config(self, base: KernelConfig) -> KernelConfig:
        return base.replace(**dict(self.overrides)) if self.overrides else base


def split_draw(drawn: Any, base: KernelConfig) -> tuple[AnyCase, KernelConfig, dict[str, Any]]:
    """(case, effective config, overrides) of what a campaign strategy drew (a plain case: no overrides)."""
    if isinstance(drawn, Drawn):
        return drawn.case, drawn.config(base), dict(drawn.overrides)
    return drawn, base, {}
