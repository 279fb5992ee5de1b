"""Comparison against the FP64 reference with a derived bound, and a diff report naming the worst entry."""

from __future__ import annotations

import dataclasses
import enum
from typing import Optional

import torch

from oracles.bounds import overflow_threshold
from tbe.layout import TableLayout


@dataclasses.dataclass
class Mismatch:
    """The worst entry of a comparison: where, what was expected, what came back, the bound."""

    table: int
    sample: int
    column: int
    expected: float
    got: float
    bound: float

    @property
    def ratio(self) -> float:
        err = abs(self.got - self.expected)
        if err != err:  # NaN
            return float("inf")
        return err / self.bound if self.bound > 0 else (0.0 if err == 0 else float("inf"))


class Check(enum.StrEnum):
    """What a Report checked; the value names the check in summaries (across steps and tables)."""

    FORWARD = "forward vs fp64"
    WEIGHTS = "weights after update"                 # every updated weight, with its ratio
    WEIGHT = "weight"                                 # one updated weight outside its bound, without a ratio
    MOMENTUM = "momentum"
    PSW_GRAD = "psw grad"
    MISSING_PSW_GRAD = "missing psw grad"
    UNTOUCHED = "untouched weight changed"
    WARNINGS = "bounds-check warnings"
    FATAL_RAISED = "FATAL bounds check raised"
    FATAL_SILENT = "FATAL bounds check did not raise on invalid input"
    SR_NEIGHBOURS = "stochastic rounding to a neighbour"  # each stochastic store one of its two neighbours
    SR_BIAS = "stochastic rounding unbiased"          # the stochastic stores' summed error within its bound
    UPDATE = "update vs fp64"                         # a second oracle's whole update step
    RAISED = "raised"                                 # a second oracle raised


class Oracle(enum.StrEnum):
    """Whose output a Report judged against the FP64 reference: the SUT's, or FBGEMM's CPU TBE's."""

    FP64 = "fp64"      # the system under test against the FP64 reference
    FBGEMM = "fbgemm"  # FBGEMM's CPU TBE, run beside it, against the same reference


@dataclasses.dataclass
class Report:
    what: str                          # the label report.txt shows
    ok: bool
    worst: Optional[Mismatch]
    num_bad: int
    num_checked: int
    graded: bool = True  # False: a yes/no check (raised or not, counts equal or not): no error bound, no ratio
    check: Optional[Check] = None      # structure for code: what was checked, at which step and table, by whom
    step: Optional[int] = None
    table: Optional[int] = None
    oracle: Oracle = Oracle.FP64

    @property
    def key(self) -> str:
        """The check's name across steps and tables ('weights after update', 'fbgemm forward vs fp64')."""
        if self.check is None:
            return self.what
        return str(self.check) if self.oracle == Oracle.FP64 else f"{self.oracle} {self.check}"

    @property
    def max_ratio(self) -> float:
        return 0.0 if self.worst is None else self.worst.ratio

    def __str__(self) -> str:
        head = f"{self.what}: {'ok' if self.ok else 'MISMATCH'}, {self.num_bad}/{self.num_checked} entries over bound"
        if self.worst is None:
            return head
        w = self.worst
        where = f" at table {w.table}, sample {w.sample}, column {w.column}" if w.table >= 0 else ""  # a count has none
        return (
            f"{head}; worst{where}: "
            f"expected {w.expected!r}, got {w.got!r}, |diff| {abs(w.got - w.expected):.3e}, "
            f"bound {w.bound:.3e} (ratio {w.ratio:.3g})"
        )


def rounded_to_infinity(got: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor,
                        dtype: torch.dtype) -> torch.Tensor:
    """Entries where ``got`` (float64 of a ``dtype`` result) is the infinity that round-to-nearest
    gives: the exact value, within its bound, reaches ``dtype``'s overflow threshold with that sign.
    Correct results, not errors, for every check of a rounded result (forward, weights)."""
    if not dtype.is_floating_point or dtype == torch.float64:
        return torch.zeros_like(got, dtype=torch.bool)
    return (torch.isinf(got) & torch.isfinite(expected) & (torch.sign(got) == torch.sign(expected))
            & (expected.abs() + bound >= overflow_threshold(dtype)))


def _errors(expected: torch.Tensor, got: torch.Tensor, bound: torch.Tensor, dtype: torch.dtype):
    """(expected, got, bound as float64, |got - expected| with NaN as infinity, ratio error / bound): a
    non-finite result that matches the expected one, or is the infinity round-to-nearest gives, counts 0."""
    exp = expected.to(torch.float64)
    g = got.to(torch.float64)
    err = (g - exp).abs()
    same_nonfinite = (g == exp) | (torch.isnan(g) & torch.isnan(exp))
    err = torch.where(same_nonfinite, torch.zeros_like(err), err)
    err = torch.where(torch.isnan(err), torch.full_like(err, float("inf")), err)
    bnd = bound.to(torch.float64).expand_as(exp)
    err = torch.where(rounded_to_infinity(g, exp, bnd, dtype), torch.zeros_like(err), err)
    ratio = torch.where(bnd > 0, err / bnd, torch.where(err > 0, float("inf"), 0.0))
    return exp, g, bnd, err, ratio


def compare(
    what: str,
    expected: torch.Tensor,
    got: torch.Tensor,
    bound: torch.Tensor,
    layout: Optional[TableLayout] = None,
) -> Report:
    """Check |got - expected| <= bound entrywise (NaN/inf in got is a mismatch unless expected matches).

    For a [B, sum D] block, ``layout`` maps each column back to (table, column in table): the
    table of the feature whose block holds it.
    For a 1-D tensor, ``sample`` is the position and table/column are -1.
    """
    if tuple(got.shape) != tuple(expected.shape):
        raise ValueError(f"{what}: got shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
    exp, g, bnd, err, ratio = _errors(expected, got, bound, got.dtype)
    num_bad = int((err > bnd).sum())
    if exp.numel() == 0:
        return Report(what, True, None, 0, 0)
    flat = int(torch.argmax(ratio.reshape(-1)))
    if exp.dim() == 2:
        sample, col = divmod(flat, exp.shape[1])
        table, column = -1, col
        if layout is not None:
            for t, c0, d in zip(layout.feature_tables, layout.col_offsets, layout.feature_dims):
                if c0 <= col < c0 + d:
                    table, column = t, col - c0
    else:
        sample, table, column = flat, -1, -1
    worst = Mismatch(
        table, sample, column,
        float(exp.reshape(-1)[flat]), float(g.reshape(-1)[flat]), float(bnd.reshape(-1)[flat]),
    )
    return Report(what, num_bad == 0, worst, num_bad, exp.numel())


SEGMENT_CHUNK = 1024  # entries a span's first-level reduction takes at once (compare_segments)


def compare_segments(expected: torch.Tensor, got: torch.Tensor, bound: torch.Tensor,
                     spans: list[tuple[int, int]]) -> list[tuple[int, int, int, float, float, float]]:
    """``compare``'s rule on each span [a, b) of 1-D tensors that the spans tile in order, in a fixed number of
    operations whatever the number of spans: per span (bad entries, entries, worst position in the span, its
    expected, got and bound). The worst is the first entry of the largest ratio, NaN ratios counting as infinite.

    Each span is cut into rows of ``SEGMENT_CHUNK`` entries, reduced along the row, then the rows' results per
    span: a scatter of every entry into its span's one slot would serialize a table's millions of entries on
    one address."""
    if not spans:
        return []
    if any(b <= a for a, b in spans):
        raise ValueError(f"compare_segments: every span needs an entry, got {spans}")
    if spans[0][0] != 0 or spans[-1][1] != expected.numel() or any(
            b != a for (_, b), (a, _) in zip(spans, spans[1:])):
        raise ValueError(f"compare_segments: the spans must tile [0, {expected.numel()}) in order, got {spans}")
    exp, g, bnd, err, ratio = _errors(expected, got, bound, got.dtype)
    dev = exp.device
    n, S, C = exp.numel(), len(spans), SEGMENT_CHUNK
    starts = torch.tensor([a for a, _ in spans], dtype=torch.int64, device=dev)
    sizes = torch.tensor([b - a for a, b in spans], dtype=torch.int64, device=dev)
    rows_per_span = [-(-(b - a) // C) for a, b in spans]
    K = sum(rows_per_span)
    row0 = torch.tensor([0] + rows_per_span[:-1], dtype=torch.int64, device=dev).cumsum(0)
    span = torch.repeat_interleave(torch.arange(S, device=dev), sizes, output_size=n)
    local = torch.arange(n, device=dev) - starts[span]
    row, col = row0[span] + local // C, local % C
    grid = torch.full((K, C), -1.0, dtype=torch.float64, device=dev)
    grid[row, col] = ratio.nan_to_num(nan=float("inf"))
    row_best, row_arg = grid.max(dim=1)  # the first largest entry of each row
    row_span = torch.repeat_interleave(torch.arange(S, device=dev), torch.tensor(rows_per_span, device=dev),
                                       output_size=K)
    best = torch.full((S,), -1.0, dtype=torch.float64, device=dev).scatter_reduce(0, row_span, row_best, "amax")
    row_first = starts[row_span] + (torch.arange(K, device=dev) - row0[row_span]) * C + row_arg
    first = torch.full((S,), n, dtype=torch.int64, device=dev).scatter_reduce(
        0, row_span, torch.where(row_best == best[row_span], row_first, n), "amin")
    bad = torch.zeros(n + 1, dtype=torch.int64, device=dev)
    torch.cumsum((err > bnd).to(torch.int64), 0, out=bad[1:])
    num_bad = bad[starts + sizes] - bad[starts]
    picked = torch.stack([exp[first], g[first], bnd[first]]).tolist()
    return [(nb, b - a, f - a, e, gv, bv) for nb, (a, b), f, e, gv, bv in
            zip(num_bad.tolist(), spans, first.tolist(), *picked)]
