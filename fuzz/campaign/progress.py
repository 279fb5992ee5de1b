"""A live progress line for long campaigns: examples, lookups/s checked, tiers hit, worst ratio.

Drawn by tqdm (a kept library, so no hand-made carriage returns), on stderr, and only
when stderr is a terminal or the caller asks for it (``--progress``); otherwise the
campaign's plain occasional status lines are the only output.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Optional


class LiveProgress:
    """``observe(res, result)`` for ``CampaignOptions.observe``: refreshes one line per checked example."""

    def __init__(self, total_seconds: float, enabled: Optional[bool] = None, stream: Any = None,
                 label: str = "tbe-fuzz") -> None:
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self.start = time.perf_counter()
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=round(total_seconds) or None, unit="s", file=self.stream, desc=label, leave=True,
                            bar_format="{desc}: {elapsed}<{remaining}{postfix}", mininterval=0.5)

    def __call__(self, res: Any, result: Any) -> None:
        if self.bar is None:
            return
        elapsed = time.perf_counter() - self.start
        worst = max(res.max_ratio.values(), default=0.0)
        self.bar.n = round(elapsed) if self.bar.total is None else min(self.bar.total, round(elapsed))
        self.bar.set_postfix_str(
            f"{res.examples} examples, {res.lookups / max(elapsed, 1e-9):,.0f} lookups/s, "
            f"{len(res.tiers)} tiers hit, worst ratio {worst:.3g}", refresh=False)
        self.bar.update(0)

    def write(self, line: str) -> None:
        """A line above the bar (a failure found, a shrinking step); plain stderr when no bar is drawn."""
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def chain(*observers: Any):
    """One ``observe`` callable that calls each of ``observers`` that is not None."""
    active = [o for o in observers if o is not None]

    def observe(res: Any, result: Any) -> None:
        for o in active:
            o(res, result)

    return observe if active else None
