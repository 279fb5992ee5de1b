"""Hypothesis's Pareto front of ``target()`` scores, switched off while a campaign searches.

With an example database, Hypothesis keeps every example that is Pareto-optimal on the target scores,
saves it to the database, and between target passes shrinks the front's members (its ``ParetoFront`` and
``ParetoOptimiser``, which its own comments call marginally useful). A campaign's three scores (error / bound,
longest segment, coverage novelty) leave most examples on the front, and each insertion compares choice
sequences of thousands of choices: on a CPU campaign of 16-case packs the front took 13 ms an example, a fifth
of the search. Hypothesis has no setting for it, so for the length of a packed search (a GPU's: a pack's choices
are its sub-cases' together) the engine's front is one that keeps nothing; the hill climbing on each score
(``Phase.target``) is Hypothesis's own, untouched. Unpacked, the front costs a few percent of the driver, which the
interpreter's kernels dwarf, and it stays. A campaign without a database (the self-test's) never had a front, so
what the self-test measures of detection holds with or without it. Where Hypothesis no longer has the class this
replaces, nothing is replaced (``without_pareto_front`` yields False), and ``tests/fuzz/campaign/test_pareto.py`` fails on the
pinned version.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from hypothesis.internal.conjecture import engine


class EmptyFront:
    """A Pareto front that keeps nothing: no example joins it, so none is saved or shrunk for it."""

    front: tuple = ()

    def __init__(self, random: Any = None) -> None:
        pass

    def on_evict(self, listener: Any) -> None:
        pass

    def add(self, data: Any) -> bool:
        return False

    def __contains__(self, data: Any) -> bool:
        return False

    def __len__(self) -> int:
        return 0


@contextlib.contextmanager
def without_pareto_front(active: bool = True) -> Iterator[bool]:
    """Hypothesis runs started inside keep no Pareto front (unless not ``active``); yields whether it was replaced."""
    original = getattr(engine, "ParetoFront", None)
    if original is None or not active:
        yield False
        return
    engine.ParetoFront = EmptyFront
    try:
        yield True
    finally:
        engine.ParetoFront = original
