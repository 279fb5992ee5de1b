"""Pictures of what a campaign searched (PNG, matplotlib, an optional dependency).

- ``segment_lengths.png``: how many runs of each segment length the checked examples held,
  on a log axis, with the config's routing threshold and chunk multiples drawn in: a
  campaign that never crossed the threshold shows it at a glance.
- ``ratio_vs_segment.png``: each example's largest error / bound ratio per kind of check
  against its longest segment length (1.0 = at the bound; above it the case failed).

``Collector`` is the campaign's ``observe`` hook; ``write`` draws both files. Without
matplotlib the campaign still runs and the summary says the pictures were not drawn.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any, Optional

FILES = ("segment_lengths.png", "ratio_vs_segment.png")


class Collector:
    """Keeps, per checked example, its segment-length histogram and its ratio per check."""

    def __init__(self) -> None:
        self.runs: collections.Counter = collections.Counter()   # segment length -> runs
        self.points: list[tuple[int, str, float]] = []           # (longest SL, check, ratio)

    def __call__(self, res: Any, result: Any) -> None:
        for length, runs in result.segment_hist:
            self.runs[int(length)] += int(runs)
        for name, ratio in result.ratios_by_check().items():
            self.points.append((max(1, int(result.max_segment)), name, float(ratio)))


def write(collector: Collector, config: Any, out_dir: Path) -> tuple[list[Path], Optional[str]]:
    """Draw both pictures into ``out_dir``; (written paths, why not drawn or None)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], "matplotlib is not installed (pip install -r requirements/cpu.txt)"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []

    fig, ax = plt.subplots(figsize=(8, 4.5))
    if collector.runs:
        lengths = sorted(collector.runs)
        top = max(lengths)
        edges = sorted({1} | {int(round(2 ** (k / 4))) for k in range(0, 4 * (top.bit_length() + 1))})
        ax.hist(lengths, bins=edges + [edges[-1] + 1], weights=[collector.runs[x] for x in lengths],
                color="#4477aa")
    ax.set_xscale("log")
    ax.set_yscale("log")
    th, ch = config.long_run_threshold, config.chunk_size
    ax.axvline(th, color="#cc3311", label=f"long_run_threshold = {th}")
    for k in (1, 2, 3):
        ax.axvline(k * ch + 0.5, color="#ee7733", linestyle=":", label=f"chunk_size multiples ({ch})" if k == 1 else None)
    ax.set_xlabel("segment length (lookups of one distinct row)")
    ax.set_ylabel("runs")
    ax.set_title(f"segment lengths checked: {sum(collector.runs.values())} runs")
    ax.legend(loc="upper right", fontsize=8)
    written.append(_save(plt, fig, out_dir / FILES[0]))

    fig, ax = plt.subplots(figsize=(8, 4.5))
    by_check: dict[str, list[tuple[int, float]]] = collections.defaultdict(list)
    for sl, name, ratio in collector.points:
        by_check[name].append((sl, max(ratio, 1e-6)))
    for name, pts in sorted(by_check.items()):
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=8, alpha=0.6, label=name)
    ax.axhline(1.0, color="#cc3311", label="bound (ratio 1)")
    ax.axvline(th, color="#888888", linestyle="--", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("longest segment length of the example")
    ax.set_ylabel("error / bound (largest per check)")
    ax.set_title(f"error / bound against segment length: {len(collector.points)} checks")
    ax.legend(loc="lower right", fontsize=7)
    written.append(_save(plt, fig, out_dir / FILES[1]))
    return written, None


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
