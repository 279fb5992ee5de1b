"""What the driver and a worker process say to each other over their pipes, one small record per kind.

The driver sends ``Setup`` first, then a request per case (a plain dict: the case as JSON, its config,
options) and finally ``None`` to end the worker. The worker greets with ``Hello``, reports each kernel build
as a ``Compile`` pair while a case runs, and answers each request with ``Answer``, ``NotMaterialized``,
``Stalled`` or ``HarnessFailed``. ``Waited`` names what a wait for the next message ended in besides a message.
Records, not tagged tuples, so a reader matches a type, never a string in position 0.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any


@dataclasses.dataclass(frozen=True)
class Setup:
    """The environment the run uses, read by the worker after its imports (``worker_process.apply_setup``)."""

    env: dict[str, str]


@dataclasses.dataclass(frozen=True)
class Hello:
    """The worker is ready: its pid, environment, sanitizer, whether it reports builds and watches programs."""

    info: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Compile:
    """A kernel build (or disk-cache load) started or ended: the hang timeout does not count building."""

    started: bool


@dataclasses.dataclass(frozen=True)
class Answer:
    """The case ran and was judged: its CaseResult (Python numbers only)."""

    result: Any


@dataclasses.dataclass(frozen=True)
class NotMaterialized:
    """The case's spec could not be built into tensors (a strategies bug, not the kernels')."""

    why: str


@dataclasses.dataclass(frozen=True)
class Stalled:
    """One interpreter program ran past its limit (``fuzz.execution.stall``): the case is a hang."""

    what: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class HarnessFailed:
    """The worker failed outside the kernels (a harness bug): its traceback."""

    traceback: str


class Waited(enum.Enum):
    """How a wait for the worker's next message ended when no message came."""

    EXITED = "the worker process ended"
    INTERRUPTED = "a Ctrl-C was requested"
    TIMED_OUT = "no answer within the case's timeout"
    LIMIT = "the caller's time ran out"
