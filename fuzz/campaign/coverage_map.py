"""The coverage heatmap (``coverage.png``): examples per (kernel path, edge class) cell, from a coverage JSON.

Rows are kernel paths, columns edge classes (``fuzz.judge.coverage``), colour the examples on a log
scale; a reachable cell at zero is red, an unreachable one grey. It draws from the JSON alone, so a
merged ``run --workers N`` summary draws the same way as one campaign. matplotlib is optional, as for
``fuzz.campaign.pictures``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

FILE = "coverage.png"
ZERO, UNREACHABLE = "#cc3311", "#dddddd"


def grid(cov: dict[str, Any]) -> list[list[Optional[int]]]:
    """Counts as rows (paths) x columns (edges); 0 for a reachable cell never hit, None for an unreachable one."""
    zero = {tuple(c) for c in cov["zero"]}
    rows = []
    for p in cov["paths"]:
        counts = cov["counts"].get(p, {})
        rows.append([counts.get(e) or (0 if (p, e) in zero else None) for e in cov["edges"]])
    return rows


def write(cov: Optional[dict[str, Any]], out_dir: Path) -> tuple[Optional[Path], Optional[str]]:
    """Draw ``cov`` into ``out_dir``/coverage.png; (the path, or None and why not)."""
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
    g = grid(cov)
    counts = np.array([[np.nan if v is None or v == 0 else v for v in row] for row in g], dtype=float)
    state = np.array([[1.0 if v is None else (0.0 if v == 0 else np.nan) for v in row] for row in g])
    fig, ax = plt.subplots(figsize=(max(10.0, 0.22 * len(cov["edges"]) + 4), 0.45 * len(cov["paths"]) + 4.2))
    ax.imshow(state, cmap=ListedColormap([ZERO, UNREACHABLE]), vmin=0, vmax=1, aspect="auto")
    top = np.nanmax(counts) if np.isfinite(counts).any() else 1.0
    im = ax.imshow(counts, cmap="viridis", norm=LogNorm(vmin=1, vmax=max(top, 2.0)), aspect="auto")
    ax.set_xticks(range(len(cov["edges"])))
    ax.set_xticklabels(cov["edges"], rotation=90, fontsize=6)
    ax.set_yticks(range(len(cov["paths"])))
    ax.set_yticklabels(cov["paths"], fontsize=8)
    groups = [e.split(":")[0] for e in cov["edges"]]
    for i in range(1, len(groups)):
        if groups[i] != groups[i - 1]:
            ax.axvline(i - 0.5, color="white", linewidth=1.0)
    fig.colorbar(im, ax=ax, fraction=0.02, pad=0.01, label="examples")
    ax.set_title(f"coverage: {cov['covered']} of {cov['reachable']} reachable cells hit by {cov['examples']} "
                 f"examples (red: reachable, zero; grey: unreachable)", fontsize=9)
    fig.tight_layout()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / FILE
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path, None
