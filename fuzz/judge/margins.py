"""How much room the passing checks left: each clean check's error / bound, counted by decade.

A campaign that passes says little if its checks sat just under their bounds; this counts,
per kind of check, how many passing checks (one per Report: a step's forward, a table's
weights, ...) reached each decade of error / bound. Yes/no checks (FATAL raised, warning
counts) have no bound and are not counted.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable

from fuzz.glossary import Term, see
from oracles.compare import Report

FIRST_DECADE = -6  # ratios below 10^-6 share one bin
LABELS = ("0", "<1e-6", *(f"1e{k}" for k in range(FIRST_DECADE, -1)), "0.1-1")


def ratio_text(ratio: float) -> str:
    """An error / bound ratio in three digits, except that only 1 itself prints as 1: a passing ratio just
    under it as 0.999, a failing one just over it with the digits that show it is over."""
    text = f"{ratio:.3g}"
    if ratio < 1 and float(text) >= 1:
        return "0.999"
    return f"{ratio:.6g}" if ratio > 1 and float(text) <= 1 else text


RATIO_NOTE = f"above 1 fails; near 1 is normal for a correct kernel: {see(Term.RATIO)}"


def decade_bin(ratio: float) -> int:
    """The bin of ``LABELS`` a passing ratio (0 <= ratio <= 1) falls in."""
    if ratio <= 0:
        return 0
    if ratio < 10.0 ** FIRST_DECADE:
        return 1
    return min(len(LABELS) - 1, 2 + math.floor(math.log10(ratio)) - FIRST_DECADE)


def _bounded(r: Report) -> bool:
    return r.worst is not None and (r.worst.bound > 0 or r.max_ratio > 0)


@dataclasses.dataclass
class Margins:
    counts: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # check -> count per LABELS bin

    def add(self, reports: Iterable[Report]) -> None:
        """Count each passing graded Report under its kind of check (``Report.key``)."""
        for r in reports:
            if r.ok and r.graded and _bounded(r):
                row = self.counts.setdefault(r.key, [0] * len(LABELS))
                row[decade_bin(r.max_ratio)] += 1

    def merge(self, other: "Margins") -> None:
        for key, row in other.counts.items():
            mine = self.counts.setdefault(key, [0] * len(LABELS))
            for i, n in enumerate(row):
                mine[i] += n

    def lines(self) -> list[str]:
        if not self.counts:
            return []
        head = "    " + f"{'check':<26}" + "".join(f"{label:>8}" for label in LABELS)
        rows = ["    " + f"{key:<26}" + "".join(f"{n:>8}" for n in row) for key, row in sorted(self.counts.items())]
        return [f"  passing checks by error/bound decade (0 = no error; 1e-3 = [1e-3, 1e-2); {see(Term.MARGIN)}):",
                head, *rows]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Margins":
        """Counts read back from ``to_json`` (a worker's summary); bins must be this module's."""
        if d and list(d.get("bins", [])) != list(LABELS):
            raise ValueError(f"margins: bins {d.get('bins')} are not {list(LABELS)}")
        return cls({k: list(v) for k, v in d.get("counts", {}).items()})

    def to_json(self) -> dict[str, Any]:
        return {"bins": list(LABELS), "counts": {k: list(v) for k, v in sorted(self.counts.items())}}
