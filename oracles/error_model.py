"""The accumulation error model of the bounds: worst case (the default) or probabilistic.

``worst``: gamma(n) = n u / (1 - n u) times sum |terms|, valid for every summation order
and every input (Higham, Accuracy and Stability of Numerical Algorithms, ch. 3).

``probabilistic``: Higham and Mary (SIAM J. Sci. Comput. 41(5), 2019, Thm 2.4 and 3.1):
if the rounding errors of the n operations behind an entry are independent random
variables of mean zero, the entry's error is at most gamma~(n) sum |terms| with
gamma~(n) = exp(lambda sqrt(n) u + n u^2 / (1 - u)) - 1 ~ lambda sqrt(n) u, except with
probability at most 2 n exp(-lambda^2 (1 - u)^2 / 2). A check of M entries then raises a
false alarm with probability at most ``false_alarm`` when every entry gets
false_alarm / M (a union bound): lambda = sqrt(2 ln(2 n M / false_alarm)) / (1 - u). The
bound used is min(worst, probabilistic), so short sums keep the worst-case bound.

The model can cry wolf where its assumption fails: rounding errors that repeat or share
a sign instead of averaging out (the same value added many times, as when a run's
lookups all come from one or two bags; terms of one sign far below a growing partial
sum; integer-like data whose roundings are ties), or arithmetic that truncates instead of
rounding to nearest. Only the accumulation term uses it; the few roundings after it
(optimizer, division, stores) stay worst case.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from oracles.bounds import gamma
from tbe.env import Kind, register

BOUND = register(
    "TBE_FUZZ_BOUND", Kind.TEXT, "worst",
    "the accumulation error model of the checks: worst (worst case) or probabilistic "
    "(oracles.error_model); the CLI's --bound wins")

KINDS = ("worst", "probabilistic")
DEFAULT_FALSE_ALARM = 1e-6


@dataclasses.dataclass(frozen=True)
class ErrorModel:
    kind: str = "worst"
    false_alarm: float = DEFAULT_FALSE_ALARM  # probability that one check (M entries) fails falsely

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"bound model must be one of {KINDS}, got {self.kind!r}")
        if not 0.0 < self.false_alarm < 1.0:
            raise ValueError(f"false_alarm must be in (0, 1), got {self.false_alarm!r}")

    def gamma(self, n: torch.Tensor, u: float, entries: int | torch.Tensor) -> torch.Tensor:
        """Relative accumulation bound for ``n`` [any shape] operations in a check of ``entries`` entries
        (an int, or a tensor shaped like ``n``: each element's own check)."""
        n = n.to(torch.float64)
        worst = gamma(n, u)
        if self.kind == "worst":
            return worst
        m = entries.to(torch.float64).clamp(min=1) if isinstance(entries, torch.Tensor) else max(1, int(entries))
        lam = torch.sqrt(2 * torch.log(2 * n.clamp(min=1) * m / self.false_alarm)) / (1 - u)
        prob = torch.expm1(lam * torch.sqrt(n) * u + n * u * u / (1 - u))
        return torch.minimum(worst, prob)

    def describe(self) -> str:
        if self.kind == "worst":
            return "worst case (gamma(n) = n u / (1 - n u))"
        return f"probabilistic (lambda sqrt(n) u, false alarm <= {self.false_alarm:g} per check)"


WORST = ErrorModel()


def from_env() -> ErrorModel:
    """The model named by ``$TBE_FUZZ_BOUND`` (``worst`` when unset)."""
    value = BOUND.text()
    if value not in KINDS:
        raise ValueError(f"${BOUND.name} must be one of {KINDS}, got {value!r}")
    return ErrorModel(value)


def lam(n: int, entries: int, false_alarm: float = DEFAULT_FALSE_ALARM, u: float = 2.0 ** -24) -> float:
    """The lambda an entry of ``n`` operations gets in a check of ``entries`` entries (for reports)."""
    return math.sqrt(2 * math.log(2 * max(1, n) * max(1, entries) / false_alarm)) / (1 - u)
