"""Steering the search toward coverage cells with few examples (``hypothesis.target`` on novelty).

Each checked example reports ``novelty = 1 / (1 + n)``, n being how many earlier examples hit the
rarest cell (``fuzz.judge.coverage``) this one hits: 1.0 for an example that opens a cell, 0.5 for
one whose rarest cell had one earlier example, near 0 for one that only repeats common cells.

How the draws change: Hypothesis keeps, per target label, the example with the highest score seen
and, in its target phase, mutates that example's choices to climb the score. With novelty as the
score, the kept example is one that opened a rare cell, so the mutated draws stay near the inputs
that reach rare cells (a rare path under a less common drawn config, a rare dtype with a rare D)
instead of following the strategies' plain proportions. Generation between passes is unchanged.
Hypothesis starts its first target pass after 200 valid examples when ``max_examples`` >= 1000
(half of ``max_examples`` below that), so a campaign that checks fewer examples is not steered;
the opening tour runs before any of it and is never steered.
"""

from __future__ import annotations

from typing import Iterable

from fuzz.judge import Cell, Coverage

LABEL = "coverage novelty"


def novelty(coverage: Coverage, cells: Iterable[Cell]) -> float:
    """1 / (1 + examples so far in the rarest of ``cells``); 0.0 for an example with no cells."""
    rarest = coverage.rarest(cells)
    return 0.0 if rarest is None else 1.0 / (1.0 + rarest)
