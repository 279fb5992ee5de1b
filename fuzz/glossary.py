"""Where ``docs/concepts.md`` explains each term a summary prints, so the summary line can point there.

One table of anchors (GitHub's slugs of the glossary's headings); ``tests/fuzz/cli/test_glossary.py`` checks each
against the page, so a renamed heading fails a test instead of leaving a dead pointer in every summary.
"""

from __future__ import annotations

import enum

PAGE = "docs/concepts.md"


class Term(enum.StrEnum):
    """A glossary entry, valued by its heading's anchor."""

    TIERS = "tiers"
    TOUR = "tour"
    RATIO = "ratio-error--bound"
    MARGIN = "margin"
    TEETH = "teeth"
    SEGMENT_LENGTH = "segment-length-sl"
    DYADIC = "dyadic-exact-value-data"
    ONE_ROUNDING = "within-one-rounding-uw"
    COVERAGE = "coverage-cell"
    AIMED = "aimed-cases"
    FILL = "fill"
    STEERED = "steered-draws"
    ENVELOPE = "envelope"


def see(*terms: Term) -> str:
    """``see docs/concepts.md#a, #b``: a pointer to append to a summary line."""
    return f"see {PAGE}#" + ", #".join(t.value for t in terms)
