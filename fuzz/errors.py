"""The driver's exceptions, in one place; the modules that raise them import them from here.

Each says what went wrong in words a user can act on; ``kind``/``position`` and ``finding``
carry structure for code that handles them.
"""

from __future__ import annotations

from typing import Any, Optional


class SUTError(ValueError):
    """A SUT that cannot be resolved or used here; the message names it and says why."""


class FatalBoundsCheck(Exception):
    """Raised by an instance's forward when FATAL bounds checking rejects the batch; ``kind``
    ("offsets" or "id") and ``position`` name the first offender where the SUT says which."""

    def __init__(self, message: str, kind: Optional[str] = None, position: Optional[int] = None) -> None:
        super().__init__(message)
        self.kind, self.position = kind, position


class TorchBoundsError(ValueError):
    """FATAL rejected the batch (the torch-ops bounds check); the message names the first offset entry or id."""


class MemoryViolation(RuntimeError):
    """Raised inside the interpreted kernel, before the access, with the sanitizer's ``Finding``."""

    def __init__(self, finding: Any) -> None:
        super().__init__("sanitizer: " + str(finding))
        self.finding = finding


class PTXError(ValueError):
    """PTX text the static reader cannot follow."""


class Unmaterializable(ValueError):
    """The case's spec cannot be materialized (a generator bug, not a kernel failure)."""


class WorkerError(RuntimeError):
    """The worker failed in harness code (not in the case's kernels)."""
