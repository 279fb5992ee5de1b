"""Every kernel's declared loops (``tbe.loops``): importing the kernel modules that declare them registers them all."""

from __future__ import annotations

from typing import Iterator

from tbe import backward_long, backward_short, forward  # noqa: F401  (their register_loops calls)
from tbe.loops import LOOPS, Loop


def all_loops() -> Iterator[Loop]:
    """Every registered loop, in registration order."""
    for loops in LOOPS.values():
        yield from loops
