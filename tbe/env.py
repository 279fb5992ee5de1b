"""Every environment variable the project reads: one entry each (name, type, default, meaning), read through it.

The registry sits in ``tbe``, the lowest layer that reads one (the planted-fault opt-in), so every layer
above reads through the same entries; ``markdown()`` renders the reference table of all of them. Values
with a grammar of their own (a sanitizer mode, a bound model, a forced crash) are parsed by their owner.
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


def _var(name: str, kind: Kind, default: Optional[str], doc: str) -> Var:
    if name in REGISTRY:
        raise ValueError(f"environment variable {name} registered twice")
    REGISTRY[name] = var = Var(name, kind, default, doc)
    return var


ALLOW_FAULTS = _var(
    "TBE_FUZZ_ALLOW_FAULTS", Kind.FLAG, "0",
    "1 lets a KernelConfig plant faults (tbe.faults) and workers crash on purpose; the test suite and "
    "the self-test set it")
BOUND = _var(
    "TBE_FUZZ_BOUND", Kind.TEXT, "worst",
    "the accumulation error model of the checks: worst (worst case) or probabilistic "
    "(oracles.error_model); the CLI's --bound wins")
SANITIZE = _var(
    "TBE_FUZZ_SANITIZE", Kind.TEXT, "0",
    "interpreter sanitizer: 1 checks every load, store and atomic of the interpreted kernels, memory "
    "only the addresses, 0 off (fuzz.memcheck.sanitizer); --sanitize sets 1")
FORCE_CRASH = _var(
    "TBE_FUZZ_FORCE_CRASH", Kind.TEXT, None,
    "HOW:MEASURE>=N makes supervised workers fail on purpose on large enough cases, to test "
    "supervision (fuzz.execution.forced_crash); needs TBE_FUZZ_ALLOW_FAULTS=1")
ARTIFACTS = _var(
    "TBE_FUZZ_ARTIFACTS", Kind.PATH, "fuzz-artifacts",
    "where the test suite's property tests save a failing case's artifact directory")
CACHE = _var(
    "TBE_FUZZ_CACHE", Kind.PATH, "~/.cache/tbe-fuzz",
    "cache of the sm_90 compiles the static checks read (under compiled/)")
KERNEL_CACHE = _var(
    "TBE_FUZZ_KERNEL_CACHE", Kind.TEXT, None,
    "a redis:// URL holding compiled kernels for a fleet (Triton's remote cache, fuzz.compile.kernel_cache); "
    "tbe-fuzz sets it from --database redis://")
BUILD_LOCK_TIMEOUT = _var(
    "TBE_FUZZ_BUILD_LOCK_TIMEOUT", Kind.TEXT, "600",
    "seconds a process waits for another process's build of the same kernel before building it itself")
WORKER_PROFILE = _var(
    "TBE_FUZZ_WORKER_PROFILE", Kind.PATH, None,
    "a directory: each supervised worker writes a cProfile of the cases it ran there")
WEAK_MEMORY = _var(
    "TBE_WEAK_MEMORY", Kind.FLAG, "0",
    "1 runs every interpreted kernel in the weak-memory mode (fuzz.memcheck.weak_memory), in the CLI "
    "and the test session")
WEAK_MEMORY_SEED = _var(
    "TBE_WEAK_MEMORY_SEED", Kind.INT, "0", "seed of the weak-memory mode's store delays")
WEAK_MEMORY_DELAY = _var(
    "TBE_WEAK_MEMORY_DELAY", Kind.INT, "4", "largest delay, in operations, of a buffered store in the weak-memory mode")
TORCHREC_SNAPSHOTS = _var(
    "TBE_FUZZ_TORCHREC_SNAPSHOTS", Kind.PATH, None,
    "a folder of TorchRec Triton TBE versions, one folder per commit, that the tests and benchmarks run "
    "--sut torchrec-triton against (default: ../shared/third_party/torchrec-triton-tbe beside the repository)")
HYPOTHESIS_PROFILE = _var(
    "HYPOTHESIS_PROFILE", Kind.TEXT, "dev",
    "the Hypothesis profile the test suite and the CLI load, by name (registered in fuzz.profiles)")


def markdown() -> str:
    """The registry as a markdown table, one row per variable in registration order."""
    rows = ["| variable | type | default | meaning |", "|---|---|---|---|"]
    for var in REGISTRY.values():
        default = "unset" if var.default is None else f"`{var.default}`"
        doc = var.doc.replace("|", "\\|")
        rows.append(f"| `{var.name}` | {var.kind.value} | {default} | {doc} |")
    return "\n".join(rows) + "\n"
