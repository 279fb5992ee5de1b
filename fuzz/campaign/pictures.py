"""Pictures of what a campaign searched (PNG, matplotlib, an optional dependency).

- ``segment_lengths.png``: how many runs of each segment length the checked examples held,
  on a log axis, with the config's routing threshold and chunk multiples drawn in: a
  campaign that never crossed the threshold shows it at a glance.
- ``ratio_vs_segment.png``: each example's largest error / bound per kind of check against
  its longest segment length. Three panels share the x axis: error / bound on a log axis
  clipped at ``CLIP`` (the bound line at 1; points above the clip drawn on the edge and
  counted; failing points ringed red, failures a known finding explains ringed orange and counted apart),
  a band for checks whose error was exactly zero (no
  ratio to draw on a log axis), and the yes/no checks (FATAL raised, warning counts, FBGEMM's
  update, ran to completion) as passed / failed, since they have no bound.

``Collector`` is the campaign's ``observe`` hook; ``plan`` sorts its points into the panels
(what the tests check); ``write`` draws both files. Without matplotlib the campaign still
runs and the summary says the pictures were not drawn.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
from pathlib import Path
from typing import Any, Callable, Optional

FILES = ("segment_lengths.png", "ratio_vs_segment.png")
CLIP = 1e3  # error / bound above this is drawn at the clip line: a failure's 1e30 would squash the passing checks
HEADROOM = 4.0  # the axis runs this far above the clip, so ringed points there stay clear of the title
FAILED, TRIAGED = "#cc3311", "#ee7733"

# one marker per kind of graded check, hollow, so checks of one example (same x) stay visible over each other
_MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*", "h", "<", ">")
_NUDGE = 0.05  # log2 step between series drawn side by side (nudged_x)


class Panel(enum.Enum):
    RATIO = "error / bound"
    CLIPPED = "above the clip"
    ZERO = "error exactly 0"
    YES_NO = "yes/no"


@dataclasses.dataclass(frozen=True)
class Point:
    sl: int          # the example's longest segment length (at least 1, for the log axis)
    check: str       # kind of check (oracles.compare.Report.key)
    ratio: float     # largest error / bound; 0 for a yes/no check
    graded: bool     # False: a yes/no check
    ok: bool
    known: bool = False  # failing, and explained by a known finding (triaged): not a failure of the run


def panel_of(p: Point, clip: float = CLIP) -> Panel:
    if not p.graded:
        return Panel.YES_NO
    if p.ratio == 0:
        return Panel.ZERO
    return Panel.CLIPPED if not p.ratio <= clip else Panel.RATIO  # inf and NaN are clipped too


@dataclasses.dataclass
class Plan:
    """The points of ``ratio_vs_segment.png`` sorted into panels, per kind of check."""

    clip: float
    by_panel: dict[Panel, dict[str, list[Point]]]

    def points(self, panel: Panel) -> list[Point]:
        return [p for pts in self.by_panel[panel].values() for p in pts]

    @property
    def clipped(self) -> int:
        return len(self.points(Panel.CLIPPED))

    @property
    def failing(self) -> list[Point]:
        """Failing graded points no known finding explains (ringed red); failing yes/no points sit in their own
        panel."""
        return [p for panel in (Panel.RATIO, Panel.CLIPPED) for p in self.points(panel) if not p.ok and not p.known]

    @property
    def triaged(self) -> list[Point]:
        """Failing graded points a known finding explains (ringed orange, counted apart from failures)."""
        return [p for panel in (Panel.RATIO, Panel.CLIPPED) for p in self.points(panel) if not p.ok and p.known]

    def graded_checks(self) -> list[str]:
        """Kinds of graded check in drawing order (one marker and colour each, in both graded panels)."""
        return sorted({c for panel in (Panel.RATIO, Panel.CLIPPED, Panel.ZERO) for c in self.by_panel[panel]})

    def yes_no_checks(self) -> list[str]:
        return sorted(self.by_panel[Panel.YES_NO])


def nudged_x(sl: int, series: int, count: int) -> float:
    """Where series ``series`` of ``count`` draws a point of segment length ``sl``: side by side, so two
    kinds of check with the same ratio in one example (FBGEMM's forward and ours, both exact fp32 sums
    in one order, often agree to the bit) do not hide each other."""
    return sl * 2 ** ((series - (count - 1) / 2) * _NUDGE)


def plan(points: list[Point], clip: float = CLIP) -> Plan:
    by_panel: dict[Panel, dict[str, list[Point]]] = {panel: collections.defaultdict(list) for panel in Panel}
    for p in points:
        by_panel[panel_of(p, clip)][p.check].append(p)
    return Plan(clip, {k: dict(v) for k, v in by_panel.items()})


class Collector:
    """Keeps, per checked example, its segment-length histogram and its outcome per kind of check; ``known``
    (a result -> bool, the SUT's triage list) marks the failures a known finding explains."""

    def __init__(self, known: Optional[Callable[[Any], bool]] = None) -> None:
        self.runs: collections.Counter = collections.Counter()   # segment length -> runs
        self.points: list[Point] = []
        self.known = known

    def __call__(self, res: Any, result: Any) -> None:
        for length, runs in result.segment_hist:
            self.runs[int(length)] += int(runs)
        sl = max(1, int(result.max_segment))
        known = not result.ok and self.known is not None and bool(self.known(result))
        for name, o in result.outcomes_by_check().items():
            self.points.append(Point(sl, name, float(o.ratio), o.graded, o.ok, known and not o.ok))


def write(collector: Collector, config: Any, out_dir: Path) -> tuple[list[Path], Optional[str]]:
    """Draw both pictures into ``out_dir``; (written paths, why not drawn or None). ``config``: the KernelConfig
    whose routing threshold and chunk size are drawn in, None for a SUT that does not run this project's
    kernels (its own routing is not these)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], "matplotlib is not installed (pip install -r requirements/cpu.txt)"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return [_segment_lengths(plt, collector, config, out_dir / FILES[0]),
            _ratio_vs_segment(plt, plan(collector.points), config, out_dir / FILES[1])], None


def _segment_lengths(plt: Any, collector: Collector, config: Any, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    if collector.runs:
        lengths = sorted(collector.runs)
        top = max(lengths)
        edges = sorted({1} | {int(round(2 ** (k / 4))) for k in range(0, 4 * (top.bit_length() + 1))})
        ax.hist(lengths, bins=edges + [edges[-1] + 1], weights=[collector.runs[x] for x in lengths],
                color="#4477aa", label="runs per segment length")
    ax.set_xscale("log")
    ax.set_yscale("log")
    if config is not None:
        th, ch = config.long_run_threshold, config.chunk_size
        ax.axvline(th, color="#cc3311", label=f"long_run_threshold = {th}")
        for k in (1, 2, 3):
            ax.axvline(k * ch + 0.5, color="#ee7733", linestyle=":",
                       label=f"chunk_size multiples ({ch})" if k == 1 else None)
    ax.set_xlabel("segment length (lookups of one distinct row)")
    ax.set_ylabel("runs")
    ax.set_title(f"segment lengths checked: {sum(collector.runs.values())} runs")
    labelled, _ = ax.get_legend_handles_labels()  # none: no run checked, and no routing of this project's to draw
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0) if labelled else None
    return _save(plt, fig, path, legend)


def _ratio_vs_segment(plt: Any, pl: Plan, config: Any, path: Path) -> Path:
    graded, yes_no = pl.graded_checks(), pl.yes_no_checks()
    has_zero = bool(pl.points(Panel.ZERO))
    zero_rows = [c for c in graded if c in pl.by_panel[Panel.ZERO]]  # one row each in the zero band
    heights = ([6.0] + ([0.3 + 0.3 * len(zero_rows)] if has_zero else [])
               + ([0.4 + 0.35 * len(yes_no)] if yes_no else []))
    fig, axes = plt.subplots(len(heights), 1, sharex=True, figsize=(10, 1.2 + sum(heights) * 0.75),
                             gridspec_kw={"height_ratios": heights, "hspace": 0.08}, squeeze=False)
    axes = list(axes[:, 0])
    ax = axes[0]
    ax_zero = axes[1] if has_zero else None
    ax_yn = axes[-1] if yes_no else None
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    def nudged(pts: list[Point], i: int) -> list[float]:
        return [nudged_x(p.sl, i, len(graded)) for p in pts]

    handles = []
    for i, name in enumerate(graded):
        style = {"marker": _MARKERS[i % len(_MARKERS)], "facecolors": "none", "edgecolors": colors[i % len(colors)],
                 "s": 22, "linewidths": 1.0}
        shown = pl.by_panel[Panel.RATIO].get(name, [])
        over = pl.by_panel[Panel.CLIPPED].get(name, [])
        zero = pl.by_panel[Panel.ZERO].get(name, [])
        h = ax.scatter(nudged(shown, i), [p.ratio for p in shown],
                       label=f"{name} ({len(shown) + len(over) + len(zero)})", **style)
        handles.append(h)
        if over:
            ax.scatter(nudged(over, i), [pl.clip] * len(over), clip_on=False, **style)
        if ax_zero is not None and zero:
            ax_zero.scatter(nudged(zero, i), [zero_rows.index(name)] * len(zero), **style)
    failing, triaged = pl.failing, pl.triaged
    for pts, color, label in ((failing, FAILED, "failing check"),
                              (triaged, TRIAGED, "known finding, triaged: not a failure")):
        if pts:
            handles.append(ax.scatter([nudged_x(p.sl, graded.index(p.check), len(graded)) for p in pts],
                                      [min(p.ratio, pl.clip) for p in pts], s=160, facecolors="none",
                                      edgecolors=color, linewidths=2.0, label=f"{label} ({len(pts)})"))
    if pl.clipped:
        ax.axhline(pl.clip, color="#999999", linestyle=":", linewidth=0.8)
    handles.append(ax.axhline(1.0, color="#cc3311", label="bound: error = bound (ratio 1); above it a check fails"))
    if config is not None:
        th = config.long_run_threshold
        for a in axes:
            line = a.axvline(th, color="#888888", linestyle="--", linewidth=0.8, label=f"long_run_threshold = {th}")
        handles.append(line)
    ax.set_xscale("log")
    ax.set_yscale("log")
    lows = [p.ratio for p in pl.points(Panel.RATIO)]
    ax.set_ylim(min(min(lows, default=1e-3), 1e-3) / 2, pl.clip * HEADROOM)
    ax.set_ylabel("error / bound (largest per check)")
    n = sum(len(pl.points(panel)) for panel in Panel)
    yes_no_bad = [p for p in pl.points(Panel.YES_NO) if not p.ok]
    n_bad = len(failing) + sum(not p.known for p in yes_no_bad)
    n_known = len(triaged) + sum(p.known for p in yes_no_bad)
    ax.set_title(f"error / bound against segment length: {n} checks" + (f", {n_bad} failing" if n_bad else "")
                 + (f", {n_known} of known findings (triaged, not failures)" if n_known else ""), pad=10)
    if pl.clipped:
        top = max(p.ratio for p in pl.points(Panel.CLIPPED))
        ax.text(0.01, 0.97, f"{pl.clipped} point(s) above {pl.clip:g} drawn on the dotted line (largest {top:.3g})",
                transform=ax.transAxes, va="top", fontsize=8, color="#555555")
    if ax_zero is not None:
        ax_zero.set_ylim(-0.7, len(zero_rows) - 0.3)
        ax_zero.set_yticks([])
        ax_zero.set_ylabel("error = 0", rotation=0, ha="right", va="center", fontsize=8)
        ax_zero.text(0.01, 0.97,
                     f"{len(pl.points(Panel.ZERO))} check(s) with no error at all (ratio 0: not on a log axis)",
                     transform=ax_zero.transAxes, va="top", fontsize=7, color="#555555")
    if ax_yn is not None:
        ok = [(p.sl, yes_no.index(p.check)) for p in pl.points(Panel.YES_NO) if p.ok]
        bad = [(p.sl, yes_no.index(p.check)) for p in yes_no_bad if not p.known]
        known = [(p.sl, yes_no.index(p.check)) for p in yes_no_bad if p.known]
        if ok:  # a legend entry only for what the picture shows
            handles.append(ax_yn.scatter([x for x, _ in ok], [y for _, y in ok], marker="o", facecolors="none",
                                         edgecolors="#228833", s=22, label=f"yes/no check passed ({len(ok)})"))
        if bad:
            handles.append(ax_yn.scatter([x for x, _ in bad], [y for _, y in bad], marker="X", color=FAILED, s=60,
                                         label=f"yes/no check failed ({len(bad)})"))
        if known:
            handles.append(ax_yn.scatter([x for x, _ in known], [y for _, y in known], marker="X", color=TRIAGED,
                                         s=60, label=f"yes/no check of a known finding ({len(known)})"))
        ax_yn.set_ylim(-0.6, len(yes_no) - 0.4)
        ax_yn.set_yticks(range(len(yes_no)), yes_no, fontsize=7)
        ax_yn.set_ylabel("yes/no\n(no bound)", fontsize=8)
    axes[-1].set_xlabel("longest segment length of the example (series nudged sideways to stay apart)")
    legend = fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.91, 0.88), fontsize=7, frameon=False)
    return _save(plt, fig, path, legend, tight=False)


def _save(plt: Any, fig: Any, path: Path, legend: Any, tight: bool = True) -> Path:
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight", bbox_extra_artists=[legend] if legend is not None else [])
    plt.close(fig)
    return path
