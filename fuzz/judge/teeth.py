"""How sharp the backward check was: its bound relative to the update it checked, per SL band.

For every updated weight the bound (``oracles.bounds_backward``) is compared with the
size of the exact update |w_new - w_old|: a ratio of 1e-6 means a wrong answer off by a
millionth of the update is caught; a ratio near or above 1 means a zero update (a lost
run) could pass. Ratios are kept per segment-length band in a log2 histogram (a quarter
octave per bin, so medians are within 19%; maxima are exact), and entries whose row
gradient the reference found exact (exact-value data) are counted, so a campaign report
shows where the check is strong and where it is weak.

A band with ratios at or above 1 holds no failure (each entry's error was within its bound);
the report says how many entries and examples, how many exact-value, and why: an update within
one rounding of the stored weight (|update| <= u |w|, where a correct store may leave the weight
as it was) or a bound wider than the update (a run whose gradients nearly cancel, against a
worst-case accumulation allowance that grows with the sum of their magnitudes).
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, Optional

import torch

from fuzz.glossary import Term, see

# segment-length bands (inclusive); None = no upper end
BANDS: tuple[tuple[int, Optional[int]], ...] = (
    (1, 3), (4, 31), (32, 255), (256, 4095), (4096, 2 ** 20 - 1), (2 ** 20, None),
)
BINS_PER_OCTAVE = 4
_FLOOR_BIN = -BINS_PER_OCTAVE * 200  # ratios below 2^-200 (bound 0) share the lowest bin
_TOP_BIN = BINS_PER_OCTAVE * 1000  # ratios above 2^1000 (an infinite bound) share the top bin
_TOP_SLOTS = 1024  # slots per band for the largest ratio (Teeth.add)
_KEY_STRIDE = 8192  # (band, bin) as one integer: band * stride + bin - _FLOOR_BIN (bins span < 8192)


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
    over: int = 0          # entries with ratio >= 1: the check could not tell their update from none
    over_exact: int = 0    # of those, with an exact row gradient
    over_rounding: int = 0  # of those, whose update is within one rounding of the stored weight
    over_cases: int = 0    # examples with at least one such entry

    def merge(self, other: "Band") -> None:
        self.entries += other.entries
        self.exact += other.exact
        self.zero_update += other.zero_update
        self.over += other.over
        self.over_exact += other.over_exact
        self.over_rounding += other.over_rounding
        self.over_cases += other.over_cases
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
                "median": self.median(), "max": self.max_ratio if self.entries > self.zero_update else None,
                "at_or_above_1": {"entries": self.over, "exact": self.over_exact,
                                  "within_one_rounding": self.over_rounding, "examples": self.over_cases}}

    def why_not_failing(self, name: str) -> Optional[str]:
        """The report's sentence for a band with ratios at or above 1, None for a band without."""
        if not self.over:
            return None
        wide = self.over - self.over_rounding
        why = []
        if self.over_rounding:
            why.append(f"{self.over_rounding} because the update is within one rounding of the stored weight "
                       f"(|update| <= u|w|: a correct store may keep the old value)")
        if wide:
            why.append(f"{wide} because the allowance exceeds the update (e.g. a run whose gradients nearly cancel)")
        return (f"{name}: {self.over} entries in {self.over_cases} example(s), {self.over_exact} of them exact-value; "
                + ", ".join(why))


@dataclasses.dataclass
class Teeth:
    bands: dict[str, Band] = dataclasses.field(
        default_factory=lambda: {band_label(lo, hi): Band() for lo, hi in BANDS})

    def add(self, seg_len: torch.Tensor, bound: torch.Tensor, update: torch.Tensor,
            exact: Optional[torch.Tensor] = None, weight: Optional[torch.Tensor] = None, unit: float = 0.0) -> None:
        """One step of one example, one table or all at once (a fresh Teeth per example; ``merge`` adds
        examples up): ``bound``, ``update`` (exact, fp64), ``exact``, ``weight`` (the exact new weight) [U, D]
        with ``seg_len`` [U] per row, or all [N] per entry; ``unit`` the stored weights' unit roundoff."""
        sl = seg_len.to(torch.int64)
        sl = (sl[:, None].expand_as(bound) if bound.dim() == 2 else sl).reshape(-1).contiguous()
        b = bound.to(torch.float64).reshape(-1)
        upd = update.to(torch.float64).abs().reshape(-1)
        ex = exact.reshape(-1) if exact is not None else torch.zeros_like(b, dtype=torch.bool)
        # every band at once (a few device round trips per table instead of several per band)
        lows = torch.tensor([lo for lo, _ in BANDS], dtype=torch.int64, device=sl.device)
        band = torch.bucketize(sl, lows, right=True) - 1  # the band whose low end is the last <= SL
        keep = torch.isfinite(upd) & ~torch.isnan(b) & (band >= 0)
        zero = keep & (upd == 0)
        nb = len(BANDS)
        counts = torch.stack([torch.bincount(band[m], minlength=nb) for m in (keep, keep & ex, zero)])
        rated = keep & ~zero
        r, rb = b[rated] / upd[rated], band[rated]
        over = torch.zeros_like(rated)
        over[rated] = r >= 1
        w = weight.to(torch.float64).abs().reshape(-1) if weight is not None else torch.zeros_like(upd)
        within = over & (upd <= unit * w)
        over_counts = torch.stack([torch.bincount(band[m], minlength=nb) for m in (over, over & ex, within)])
        # each band's largest ratio over _TOP_SLOTS slots per band, so millions of entries do not all update
        # one address, then over the slots
        slot = rb * _TOP_SLOTS + torch.arange(rb.numel(), device=r.device) % _TOP_SLOTS
        top = torch.zeros(nb * _TOP_SLOTS, dtype=torch.float64, device=r.device).scatter_reduce_(
            0, slot, r, "amax").view(nb, _TOP_SLOTS).amax(1)
        bins = torch.floor(torch.log2(r) * BINS_PER_OCTAVE).clamp(min=_FLOOR_BIN, max=_TOP_BIN).to(torch.int64)
        keys, n = torch.unique(rb * _KEY_STRIDE + (bins - _FLOOR_BIN), return_counts=True)
        bands = list(self.bands.values())
        for i, (entries, n_exact, n_zero) in enumerate(zip(*counts.tolist())):
            bands[i].entries += entries
            bands[i].exact += n_exact
            bands[i].zero_update += n_zero
        for i, m in enumerate(top.tolist()):
            bands[i].max_ratio = max(bands[i].max_ratio, m)
        for i, (n_over, n_exact, n_within) in enumerate(zip(*over_counts.tolist())):
            bands[i].over_cases = 1 if bands[i].over or n_over else 0
            bands[i].over += n_over
            bands[i].over_exact += n_exact
            bands[i].over_rounding += n_within
        for key, count in zip(keys.tolist(), n.tolist()):
            bands[key // _KEY_STRIDE].hist[key % _KEY_STRIDE + _FLOOR_BIN] += count

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
               f"a lost update could pass; {see(Term.TEETH, Term.SEGMENT_LENGTH)}):",
               f"    {'SL':<16}{'entries':>10}{'exact':>10}{'zero upd':>10}{'median':>11}{'max':>11}"]
        for name, band in self.bands.items():
            if not band.entries:
                continue
            med = band.median()
            has = band.entries > band.zero_update
            out.append(f"    {name:<16}{band.entries:>10}{band.exact:>10}{band.zero_update:>10}"
                       f"{'-' if med is None else f'{med:.2e}':>11}{f'{band.max_ratio:.2e}' if has else '-':>11}")
        why = [line for name, band in self.bands.items() if (line := band.why_not_failing(name))]
        if why:
            out.append("    ratio >= 1 is no failure (each entry's error was within its bound); it marks entries whose "
                       f"update the check could not tell from none ({see(Term.ONE_ROUNDING, Term.DYADIC)}):")
            out += [f"      {line}" for line in why]
        return out
