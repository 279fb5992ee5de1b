"""Named campaign budgets: how long to search, how long to shrink, how big one example may be.

``quick`` keeps ``make fuzz`` under two minutes on the CPU interpreter (start-up included);
``ci`` and ``nightly`` search longer. Example size and packing come from the ``fuzz.profiles.Limits`` of the
SUT's kind of execution (``get``'s ``limits``; the project's kernels here by default), the size capped lower
for the short budgets.

A budget holds: no example starts after the search time (or, for a failure, the shrink time)
is spent, none starts that its expected cost says cannot finish in the time left, and one still
running ``EXAMPLE_CAP_S`` after the end is stopped and counted as stopped for time (not judged,
so not a failure). A campaign therefore ends within ``seconds`` (plus ``shrink_seconds`` when it
shrinks a failure) plus ``EXAMPLE_CAP_S``.
"""

from __future__ import annotations

import dataclasses
import sys

from fuzz.profiles import PROJECT, Limits


# how far past its phase's end one example may run before it is stopped (seconds)
EXAMPLE_CAP_S = 45.0


@dataclasses.dataclass(frozen=True)
class Budget:
    name: str
    seconds: float        # searching (generate + target phases); inf: bounded by max_examples alone
    shrink_seconds: float  # shrinking a failure, counted from when it is found
    max_examples: int
    max_lookups: int
    pack: int = 1          # sub-cases one drawn example may hold (strategies.pack), within max_lookups together

    def with_overrides(self, seconds: float | None = None, max_examples: int | None = None,
                       pack: int | None = None) -> "Budget":
        return dataclasses.replace(
            self,
            seconds=self.seconds if seconds is None else float(seconds),
            max_examples=self.max_examples if max_examples is None else int(max_examples),
            pack=self.pack if pack is None else int(pack),
        )

    def fitted(self, limits: Limits) -> "Budget":
        """This budget under ``limits``: examples no larger than either allows, packed as ``limits`` packs."""
        return dataclasses.replace(self, max_lookups=min(self.max_lookups, limits.max_lookups), pack=limits.pack)


# each budget's own size cap; ``fitted`` lowers it to what one kind of execution affords
_OWN: dict[str, Budget] = {
    # 1.2M: room for one run of 4,097 chunks (1,048,577 lookups) beside ordinary ones
    "quick": Budget("quick", seconds=70.0, shrink_seconds=25.0, max_examples=5_000, max_lookups=1_200_000),
    "ci": Budget("ci", seconds=300.0, shrink_seconds=120.0, max_examples=20_000, max_lookups=4_000_000),
    "nightly": Budget("nightly", seconds=3_600.0, shrink_seconds=600.0, max_examples=1_000_000,
                      max_lookups=sys.maxsize),  # no cap of its own
}
# the budgets for the project's kernels on this machine
BUDGETS: dict[str, Budget] = {name: b.fitted(PROJECT) for name, b in _OWN.items()}


def get(name: str, limits: Limits = PROJECT) -> Budget:
    """The named budget fitted to ``limits`` (default: the project's kernels on this machine)."""
    if name not in _OWN:
        raise ValueError(f"--budget must be one of {sorted(_OWN)}, got {name!r}")
    return _OWN[name].fitted(limits)
