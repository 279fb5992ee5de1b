"""Spies for tests: a function that first tells the test its arguments, then runs as before."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Sequence

import pytest

Target = tuple[Any, str, Callable[[tuple], None]]  # (owner, attribute, note of the positional arguments)


@contextlib.contextmanager
def spied(targets: Sequence[Target]) -> Iterator[None]:
    """Within: each ``owner.name`` of ``targets`` calls ``note(args)`` before itself; restored on the way out."""
    with pytest.MonkeyPatch.context() as mp:
        for owner, name, note in targets:
            mp.setattr(owner, name, _noting(getattr(owner, name), note))
        yield


def _noting(fn: Callable, note: Callable[[tuple], None]) -> Callable:
    def wrapped(*args, **kwargs):
        note(args)
        return fn(*args, **kwargs)
    return wrapped
