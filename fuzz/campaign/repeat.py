"""What a campaign's examples were, as counts that run it again: ``--repeat DRAWN,AIMED,AFTER``.

A time-bound campaign runs its opening tour, draws until its search time (less the aimed cases' share) is
spent, runs aimed cases for the coverage cells still at zero, and may draw on from seed + 1. Which examples
each phase holds is decided by the seed alone (the example database is read only on request), so the
counts of each phase repeat the whole campaign: the draws stop after ``drawn`` examples, the first ``aimed``
aimed cases run, then ``after`` more draws. Hypothesis's choices depend on ``max_examples``, so the draws
are stopped by this count and never by a smaller ``max_examples``. A case the campaign did not start (or
stopped) for time is no example, and Hypothesis draws on differently after it, so the repeat leaves out the
same attempts (``skipped``: their positions among the campaign's attempts, counted from 0).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Repeat:
    """Checked examples of each phase of the campaign to repeat (the tour always runs whole)."""

    drawn: int
    aimed: int = 0
    after: int = 0
    skipped: tuple[int, ...] = ()

    @classmethod
    def parse(cls, text: str) -> "Repeat":
        """``DRAWN[,AIMED[,AFTER]][:SKIPPED,...]``, each a count or position >= 0; ValueError naming the bad part."""
        text, _, skips = text.partition(":")
        skipped = []
        for part in filter(None, (p.strip() for p in skips.split(","))):
            if not part.isdigit():
                raise ValueError(f"SKIPPED must list positions >= 0, got {part!r}")
            skipped.append(int(part))
        parts = [p.strip() for p in text.split(",")]
        if not 1 <= len(parts) <= 3:
            raise ValueError(f"want DRAWN[,AIMED[,AFTER]], got {text!r}")
        counts = []
        for name, part in zip(("DRAWN", "AIMED", "AFTER"), parts):
            try:
                value = int(part)
            except ValueError:
                raise ValueError(f"{name} must be a whole number, got {part!r}") from None
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
            counts.append(value)
        return cls(*counts, skipped=tuple(sorted(set(skipped))))

    @property
    def option(self) -> str:
        """The command-line option that asks for this repeat."""
        tail = [self.drawn] + ([self.aimed, self.after] if self.after else [self.aimed] if self.aimed else [])
        return "--repeat " + ",".join(map(str, tail)) + (":" + ",".join(map(str, self.skipped)) if self.skipped else "")


def of(result) -> Repeat:
    """The counts of ``result`` (a ``fuzz.campaign.search.CampaignResult``) that repeat its examples."""
    drawn = result.examples - result.tour_examples - result.fill_examples - result.drawn_after
    return Repeat(drawn, result.fill_examples, result.drawn_after, tuple(result.skipped_at))
