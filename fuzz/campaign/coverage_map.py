"""The coverage heatmap (``coverage.png``): examples per (kernel path, edge class) cell, from a coverage JSON.

Rows are edge classes, grouped, columns kernel paths (``fuzz.judge.coverage``), colour the examples on a
log scale; a reachable cell at zero is red (pale after a search that stopped at its failure, where
coverage was not the goal), an unreachable one grey. It draws from the JSON alone, so a
merged ``run --workers N`` summary draws the same way as one campaign. matplotlib is optional, as for
``fuzz.campaign.pictures``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

FILE = "coverage.png"
ZERO, UNREACHABLE, PALE = "#cc3311", "#dddddd", "#f6e8e4"


def grid(cov: dict[str, Any]) -> list[list[Optional[int]]]:
    """Counts as rows (paths) x columns (edges); 0 for a reachable cell never hit, None for an unreachable one."""
    zero = {tuple(c) for c in cov["zero"]}
    rows = []
    for p in cov["paths"]:
        counts = cov["counts"].get(p, {})
        rows.append([counts.get(e) or (0 if (p, e) in zero else None) for e in cov["edges"]])
    return rows


def write(cov: Optional[dict[str, Any]], out_dir: Path,
          stopped: Optional[str] = None) -> tuple[Optional[Path], Optional[str]]:
    """Draw ``cov`` into ``out_dir``/coverage.png; (the path, or None and why not). Edge classes are rows (their
    labels read across), kernel paths columns. ``stopped`` says why the search ended before its time (its
    failure): its cells at zero were never the goal, so they are drawn pale, not red."""
    if cov is None:
        return None, "no coverage counted"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.colors import ListedColormap, LogNorm
        import numpy as np
    except ImportError:
        return None, "matplotlib is not installed (pip install -r requirements/cpu.txt)"
    g = [list(col) for col in zip(*grid(cov))] if cov["paths"] else []  # edges x paths
    counts = np.array([[np.nan if v is None or v == 0 else v for v in row] for row in g], dtype=float)
    state = np.array([[1.0 if v is None else (0.0 if v == 0 else np.nan) for v in row] for row in g])
    edges, paths = cov["edges"], cov["paths"]
    fig, ax = plt.subplots(figsize=(4.5 + 0.6 * len(paths), 1.8 + 0.17 * len(edges)))
    zero = PALE if stopped else ZERO
    if len(g):
        ax.imshow(state, cmap=ListedColormap([zero, UNREACHABLE]), vmin=0, vmax=1, aspect="auto")
        top = np.nanmax(counts) if np.isfinite(counts).any() else 1.0
        im = ax.imshow(counts, cmap="viridis", norm=LogNorm(vmin=1, vmax=max(top, 2.0)), aspect="auto")
        fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02, label="examples")
    ax.set_yticks(range(len(edges)), edges, fontsize=7)
    ax.set_xticks(range(len(paths)), paths, rotation=35, ha="right", fontsize=8)
    groups = [e.split(":")[0] for e in edges]
    for i in range(1, len(groups)):
        if groups[i] != groups[i - 1]:
            ax.axhline(i - 0.5, color="white", linewidth=1.5)
    zeros = f"pale: at zero, {stopped}" if stopped else "red: reachable, never hit"
    ax.set_title(f"coverage: {cov['covered']} of {cov['reachable']} reachable cells hit by {cov['examples']} "
                 f"examples\n({zeros}; grey: unreachable)", fontsize=9)
    fig.tight_layout()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / FILE
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path, None
