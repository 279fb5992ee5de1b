"""How sharp the backward check was: its bound relative to the update it checked, per SL band.

For every updated weight the bound (``oracles.bounds_backward``) is compared with the
size of the exact update |w_new - w_old|: a ratio of 1e-6 means a wrong answer off by a
millionth of the update is caught; a ratio near or above 1 means a zero update (a lost
run) could pass. Ratios are kept per segment-length band in a log2 histogram (a quarter
octave per bin, so medians are within 19%; maxima are exact), and entries whose row
gradient the reference found exact (exact-value data) are counted, so a campaign report
shows where the check is strong and where it is weak.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, Optional

import torch

# segment-length bands (inclusive); None = no upper end
BANDS: tuple[tuple[int, Optional[int]], ...] = (
    (1, 3), (4, 31), (32, 255), (256, 4095), (4096, 2 ** 20 - 1), (2 ** 20, None),
)
BINS_PER_OCTAVE = 4
_FLOOR_BIN = -BINS_PER_OCTAVE * 200  # ratios below 2^-200 (bound 0) share the lowest bin


def band_label(lo: int, hi: Optional[int]) -> str:
    return f">= {_num(lo)}" if hi is None else f"{_num(lo)}-{_num(hi)}"


def _num(x: int) -> str:
    if x + 1 >= 2 ** 20 and x + 1 == 2 ** round(math.log2(x + 1)):
        return f"2^{round(math.log2(x + 1))}-1"
    if x >= 2 ** 20 and x == 2 ** round(math.log2(x)):
        return f"2^{round(math.log2(x))}"
    return str(x)


@dataclasses.dataclass
class Band:
    entries: int = 0       # checked weight entries whose row's SL lies in the band
    exact: int = 0         # of those, with an exact (exact-value data) row gradient
    zero_update: int = 0   # of those, whose exact update is zero (no ratio)
    max_ratio: float = 0.0
    hist: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def merge(self, other: "Band") -> None:
        self.entries += other.entries
        self.exact += other.exact
        self.zero_update += other.zero_update
        self.max_ratio = max(self.max_ratio, other.max_ratio)
        self.hist.update(other.hist)

    def median(self) -> Optional[float]:
        """The median ratio (centre of its quarter-octave bin), None without ratios."""
        total = sum(self.hist.values())
        if total == 0:
            return None
        seen = 0
        for k in sorted(self.hist):
            seen += self.hist[k]
            if 2 * seen >= total:
                return 0.0 if k == _FLOOR_BIN else 2.0 ** ((k + 0.5) / BINS_PER_OCTAVE)
        return None  # unreachable

    def to_json(self) -> dict[str, Any]:
        return {"entries": self.entries, "exact": self.exact, "zero_update": self.zero_update,
                "median": self.median(), "max": self.max_ratio if self.entries > self.zero_update else None}


@dataclasses.dataclass
class Teeth:
    bands: dict[str, Band] = dataclasses.field(
        default_factory=lambda: {band_label(lo, hi): Band() for lo, hi in BANDS})

    def add(self, seg_len: torch.Tensor, bound: torch.Tensor, update: torch.Tensor,
            exact: Optional[torch.Tensor] = None) -> None:
        """One table's step: ``seg_len`` [U] per row; ``bound``, ``update`` (exact, fp64), ``exact`` [U, D]."""
        sl = seg_len.to(torch.int64)[:, None].expand_as(bound).reshape(-1)
        b = bound.to(torch.float64).reshape(-1)
        upd = update.to(torch.float64).abs().reshape(-1)
        ex = exact.reshape(-1) if exact is not None else torch.zeros_like(b, dtype=torch.bool)
        finite = torch.isfinite(upd) & ~torch.isnan(b)
        for (lo, hi), band in zip(BANDS, self.bands.values()):
            m = finite & (sl >= lo)
            if hi is not None:
                m = m & (sl <= hi)
            if not bool(m.any()):
                continue
            band.entries += int(m.sum())
            band.exact += int((m & ex).sum())
            zero = m & (upd == 0)
            band.zero_update += int(zero.sum())
            r = (b[m & ~zero] / upd[m & ~zero])
            if r.numel() == 0:
                continue
            band.max_ratio = max(band.max_ratio, float(r.max()))
            bins = torch.floor(torch.log2(r) * BINS_PER_OCTAVE).clamp(min=_FLOOR_BIN, max=4096).to(torch.int64)
            keys, counts = torch.unique(bins, return_counts=True)
            band.hist.update(dict(zip(keys.tolist(), counts.tolist())))

    def merge(self, other: Optional["Teeth"]) -> None:
        if other is None:
            return
        for name, band in other.bands.items():
            self.bands.setdefault(name, Band()).merge(band)

    def to_json(self) -> dict[str, Any]:
        return {name: band.to_json() for name, band in self.bands.items() if band.entries}

    def lines(self) -> list[str]:
        if not any(b.entries for b in self.bands.values()):
            return ["  bound / |update| per segment-length band: no backward entries checked"]
        out = ["  bound / |update| per segment-length band (weights after update; < 1e-3 = sharp, >= 1 = "
               "a lost update could pass):",
               f"    {'SL':<16}{'entries':>10}{'exact':>10}{'zero upd':>10}{'median':>11}{'max':>11}"]
        for name, band in self.bands.items():
            if not band.entries:
                continue
            med = band.median()
            has = band.entries > band.zero_update
            out.append(f"    {name:<16}{band.entries:>10}{band.exact:>10}{band.zero_update:>10}"
                       f"{'-' if med is None else f'{med:.2e}':>11}{f'{band.max_ratio:.2e}' if has else '-':>11}")
        return out
