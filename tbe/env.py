"""Every environment variable the project reads: one entry each (name, type, default, meaning), read through it.

The registry sits in ``tbe``, the lowest layer that reads one (the planted-fault opt-in); each variable is
registered (``register``) by the module that owns it, so a layer's settings live with it.
``fuzz.cli.reference.registry`` imports every owner; ``markdown()`` renders the reference table of what is
registered. Values with a grammar of their own (a sanitizer mode, a bound model, a forced crash) are parsed
by their owner.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import os
from pathlib import Path
from typing import Iterator, Optional


class Kind(enum.Enum):
    """How a variable's text is read."""

    FLAG = "0 or 1"
    INT = "integer"
    PATH = "path"
    TEXT = "text"


@dataclasses.dataclass(frozen=True)
class Var:
    """One environment variable. ``default`` is the text an unset (or empty) variable reads as; None: off."""

    name: str
    kind: Kind
    default: Optional[str]
    doc: str

    def raw(self) -> Optional[str]:
        """The text as set, or None when unset."""
        return os.environ.get(self.name)

    def text(self) -> Optional[str]:
        """The text as set, or the default when unset or empty."""
        value = os.environ.get(self.name)
        return self.default if value is None or value == "" else value

    def flag(self) -> bool:
        """A FLAG's value: off when unset, empty or 0, on when 1; anything else is refused."""
        self._expect(Kind.FLAG)
        value = self.text()
        if value in (None, "0"):
            return False
        if value == "1":
            return True
        raise ValueError(f"{self.name} must be 0 or 1, got {value!r}")

    def integer(self) -> int:
        """An INT's value (its default when unset or empty)."""
        self._expect(Kind.INT)
        value = self.text()
        try:
            return int(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ValueError(f"{self.name} must be an integer, got {value!r}") from None

    def path(self) -> Optional[Path]:
        """A PATH's value, ``~`` expanded (None when unset and without default)."""
        self._expect(Kind.PATH)
        value = self.text()
        return None if value is None else Path(value).expanduser()

    def set(self, value: Optional[str]) -> None:
        """Set the variable in this process (and the processes it starts); None unsets it."""
        if value is None:
            os.environ.pop(self.name, None)
        else:
            os.environ[self.name] = value

    def setdefault(self, value: str) -> None:
        """Set the variable to ``value`` unless it is already set."""
        os.environ.setdefault(self.name, value)

    @contextlib.contextmanager
    def scoped(self, value: Optional[str]) -> Iterator[None]:
        """The variable set to ``value`` inside the block, restored after."""
        old = self.raw()
        self.set(value)
        try:
            yield
        finally:
            self.set(old)

    def _expect(self, kind: Kind) -> None:
        if self.kind is not kind:
            raise TypeError(f"{self.name} is read as {self.kind.value}, not as {kind.value}")


REGISTRY: dict[str, Var] = {}


def register(name: str, kind: Kind, default: Optional[str], doc: str) -> Var:
    """The variable ``name``, entered in the registry (once: a second registration is refused)."""
    if name in REGISTRY:
        raise ValueError(f"environment variable {name} registered twice")
    REGISTRY[name] = var = Var(name, kind, default, doc)
    return var


ALLOW_FAULTS = register(
    "TBE_FUZZ_ALLOW_FAULTS", Kind.FLAG, "0",
    "1 lets a KernelConfig plant faults (tbe.faults) and workers crash on purpose; the test suite and "
    "the self-test set it")
def markdown() -> str:
    """The registry as a markdown table, one row per variable, by name."""
    rows = ["| variable | type | default | meaning |", "|---|---|---|---|"]
    for var in sorted(REGISTRY.values(), key=lambda v: v.name):
        default = "unset" if var.default is None else f"`{var.default}`"
        doc = var.doc.replace("|", "\\|")
        rows.append(f"| `{var.name}` | {var.kind.value} | {default} | {doc} |")
    return "\n".join(rows) + "\n"
