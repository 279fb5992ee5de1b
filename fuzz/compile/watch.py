"""Count Triton kernel compilations while a block of code runs (the campaign's search loop).

Triton calls ``triton.knobs.compilation.listener`` (triton 3.6 and 3.9) at the end of
``triton.compile`` with ``cache_hit=True`` when the kernel came from the on-disk cache and
``False`` when it was built. A kernel already in the process's own cache never reaches
``triton.compile``. So after a warm-up, ``compiled`` must stay 0 and ``loaded`` counts the
specializations the process met for the first time. Under the interpreter nothing is
compiled, and the watch says so instead of reporting a number.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading
from typing import Iterator, Optional

from tbe.backend import INTERPRETED

INTERPRETER_NOTE = "none: kernels run in Triton's interpreter, nothing is compiled"


@dataclasses.dataclass
class CompileCounts:
    compiled: int = 0                       # built now (on-disk cache miss)
    loaded: int = 0                         # taken from the on-disk cache
    by_kernel: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    interpreted: bool = INTERPRETED

    def text(self) -> str:
        if self.interpreted:
            return INTERPRETER_NOTE
        top = ", ".join(f"{k} x{n}" for k, n in self.by_kernel.most_common(5))
        return (f"{self.compiled} compiled, {self.loaded} loaded from Triton's disk cache"
                + (f" (compiled: {top})" if top else ""))

    def to_dict(self) -> dict:
        if self.interpreted:
            return {"interpreted": True, "note": INTERPRETER_NOTE}
        return {"interpreted": False, "compiled": self.compiled, "loaded": self.loaded,
                "compiled_by_kernel": dict(self.by_kernel)}

    @classmethod
    def from_dict(cls, d: dict) -> "CompileCounts":
        """The counts a ``to_dict`` dict describes."""
        if d.get("interpreted", INTERPRETED):
            return cls(interpreted=True)
        return cls(int(d.get("compiled", 0)), int(d.get("loaded", 0)),
                   collections.Counter(d.get("compiled_by_kernel", {})), interpreted=False)

    def add(self, other: "CompileCounts") -> None:
        self.compiled += other.compiled
        self.loaded += other.loaded
        self.by_kernel.update(other.by_kernel)
        self.interpreted = self.interpreted and other.interpreted


_LOCK = threading.Lock()
_ACTIVE: list[CompileCounts] = []
_INSTALLED: list[object] = []  # [the listener Triton held before ours]


def _listener(*args, **kwargs) -> None:
    src = kwargs.get("src", args[0] if args else None)
    hit = bool(kwargs.get("cache_hit", False))
    name = getattr(src, "name", None) or getattr(getattr(src, "fn", None), "__name__", "?")
    with _LOCK:
        for c in _ACTIVE:
            if hit:
                c.loaded += 1
            else:
                c.compiled += 1
                c.by_kernel[str(name)] += 1
    previous = _INSTALLED[0] if _INSTALLED else None
    if previous is not None:
        previous(*args, **kwargs)


def _install() -> bool:
    """Put our listener in place (once); False where this Triton has no compilation listener."""
    if _INSTALLED:
        return True
    try:
        from triton import knobs
    except ImportError:
        return False
    comp = getattr(knobs, "compilation", None)
    if comp is None or not hasattr(comp, "listener"):
        return False
    _INSTALLED.append(comp.listener)
    comp.listener = _listener
    return True


@contextlib.contextmanager
def watch(counts: Optional[CompileCounts] = None) -> Iterator[CompileCounts]:
    """Count compilations inside the block (nested and concurrent watches each see every event)."""
    counts = counts if counts is not None else CompileCounts()
    if INTERPRETED:
        yield counts
        return
    if not _install():
        raise RuntimeError("this Triton has no knobs.compilation.listener; cannot count compilations")
    with _LOCK:
        _ACTIVE.append(counts)
    try:
        yield counts
    finally:
        with _LOCK:
            _ACTIVE.remove(counts)
