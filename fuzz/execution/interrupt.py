"""Ctrl-C as a request: the first SIGINT sets a flag that the search, the shrinker and the supervisor
check between steps; the second ends the process at once (exit status 130).

A flag, not an exception: Hypothesis catches KeyboardInterrupt in places of its own (its gc
callback among them), so an exception raised at an arbitrary point can be lost; a flag read
between examples cannot. The second SIGINT leaves the running case under ``.pending/`` (no
cleanup runs), where ``tbe-fuzz replay`` finds it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Callable, Iterator, Optional

EXIT_STATUS = 130  # 128 + SIGINT, what a shell reports for a process ended by Ctrl-C

_requested = False
_on_second: list[Callable[[], None]] = []


def requested() -> bool:
    """True once a SIGINT arrived inside ``handled()`` (or ``request()`` was called)."""
    return _requested


def request() -> None:
    """Ask the running search to stop, as the first SIGINT does."""
    global _requested
    _requested = True


def on_second(action: Callable[[], None]) -> None:
    """Run ``action`` (e.g. kill the workers) before the process exits on the second SIGINT."""
    _on_second.append(action)


def _handler(signum: int, frame: object) -> None:
    if not _requested:
        request()
        print("tbe-fuzz: interrupted; stopping the search and saving what was found "
              "(Ctrl-C again to exit at once)", file=sys.stderr, flush=True)
        return
    for action in _on_second:
        try:
            action()
        except Exception:  # noqa: BLE001  (exiting anyway)
            pass
    print("tbe-fuzz: interrupted twice; exiting at once (the running case stays under .pending/)",
          file=sys.stderr, flush=True)
    os._exit(EXIT_STATUS)


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """SIGINT handled as above while inside; the old handler and a clear flag afterwards. Outside the
    main thread (where Python cannot set handlers) it changes nothing."""
    global _requested
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old: Optional[object] = signal.signal(signal.SIGINT, _handler)
    _requested = False
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)  # type: ignore[arg-type]
        _requested = False
        _on_second.clear()
