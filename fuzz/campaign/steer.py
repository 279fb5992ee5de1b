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

Which config a draw runs under is weighted too (``profile_weights``): half the draws run the config
under test itself, as before; the other half picks an override profile in proportion to the cells it
can reach, each cell counted as 1 / (the number of options that reach it). A cell every option
reaches adds little to any; the fused bounds check's cells, reached under two profiles only, add half
each to those two. The weights depend only on the config and the budget, so a seed draws the same
examples every time (Hypothesis needs that to replay and shrink).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Iterable, Optional

from fuzz.judge.coverage import Cell, Coverage, reachable
from strategies.config_space import usable_profiles
from tbe import KernelConfig

LABEL = "coverage novelty"


def novelty(coverage: Coverage, cells: Iterable[Cell]) -> float:
    """1 / (1 + examples so far in the rarest of ``cells``); 0.0 for an example with no cells."""
    rarest = coverage.rarest(cells)
    return 0.0 if rarest is None else 1.0 / (1.0 + rarest)


def profile_weights(base: KernelConfig, max_lookups: Optional[int] = None, fixed: frozenset[str] = frozenset(),
                    resolution: int = 4) -> tuple[int, ...]:
    """Integer weights of no overrides and of each of ``usable_profiles(base, fixed)``: a profile's is its
    share of the reachable cells (each cell split evenly among the options reaching it, the base config
    included), the smallest share being ``resolution``; no overrides weighs as much as all profiles."""
    options = [base] + [base.replace(**ov) for ov in usable_profiles(base, fixed)]
    cells = [reachable(c, search_config=False, max_lookups=max_lookups) for c in options]
    reach: dict[Cell, int] = {}
    for cs in cells:
        for c in cs:
            reach[c] = reach.get(c, 0) + 1
    share = [sum((Fraction(1, reach[c]) for c in cs), Fraction(0)) for cs in cells[1:]]
    low = min((x for x in share if x > 0), default=Fraction(1))
    profiles = tuple(max(1, round(resolution * x / low)) for x in share)
    return (sum(profiles),) + profiles
