"""Markdown tables of ``bench_tbe``'s JSON lines: ours, TorchRec's, FBGEMM's and PyTorch's time per shape.

``python -m benchmarks.bench_markdown F [F ...] --time device`` prints one table, a row per shape (rows as
``benchmarks.pictures.bench_rows`` reads them, so the tables and the pictures show the same numbers), each cell
``ours / TorchRec / FBGEMM / PyTorch / byte floor`` in ms, the fastest of the three TBEs in bold, and per phase
our standing: the fastest other TBE's time over ours (above 1: ours ahead). A last line counts the shapes where
ours is at or ahead of both others in both phases.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional

from benchmarks.pictures import PHASES, TIMES, BenchRow, bench_rows

TBES = ("ours", "TorchRec", "FBGEMM")          # the implementations a standing compares
COLUMNS = TBES + ("PyTorch", "byte floor")


def fmt(ms: Optional[float]) -> str:
    """Two decimals, three below 0.1 ms (small tables' kernels differ in the third); '-' where not measured."""
    if ms is None:
        return "-"
    return f"{ms:.3f}" if ms < 0.1 else f"{ms:.2f}"


def standing(values: dict[str, Optional[float]]) -> Optional[float]:
    """The fastest other TBE's ms over ours (None where ours or both others are missing)."""
    others = [values[k] for k in TBES[1:] if values.get(k) is not None]
    if values.get("ours") is None or not others:
        return None
    return min(others) / values["ours"]


def cell(values: dict[str, Optional[float]]) -> str:
    measured = {k: values[k] for k in TBES if values.get(k) is not None}
    best = min(measured.values()) if measured else None
    parts = []
    for k in COLUMNS:
        text = fmt(values.get(k))
        parts.append(f"**{text}**" if k in TBES and best is not None and values.get(k) == best else text)
    return " / ".join(parts)


def ahead(marks: list[Optional[float]]) -> Optional[bool]:
    """Ours at or ahead of both others in every phase, from the phases' standings (None where one is missing)."""
    return None if any(m is None for m in marks) else all(m >= 1.0 for m in marks)


def table(rows: list[BenchRow]) -> str:
    head = ["| shape | " + " | ".join(PHASES) + " | " + " | ".join(f"{ph} standing" for ph in PHASES) + " |",
            "|---|" + "---|" * (2 * len(PHASES))]
    body, judged = [], []
    for row in rows:
        marks = [standing(row.ms[ph]) for ph in PHASES]
        body.append(f"| {row.shape} | " + " | ".join(cell(row.ms[ph]) for ph in PHASES) + " | "
                    + " | ".join("-" if m is None else f"{m:.3f}" for m in marks) + " |")
        verdict = ahead(marks)
        if verdict is not None:
            judged.append(verdict)
    tail = (f"\nOurs at or ahead of TorchRec's and FBGEMM's in both phases on {sum(judged)} of {len(judged)} "
            f"shapes compared ({len(rows) - len(judged)} without both standings).")
    return "\n".join(head + body) + "\n" + tail


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("files", nargs="+", type=Path, help="bench_tbe JSON lines, read in order")
    p.add_argument("--time", default="device", choices=tuple(TIMES),
                   help="device (the kernels' summed time, default) or events (one call on an idle GPU)")
    args = p.parse_args(argv)
    lines = []
    for f in args.files:
        if not f.is_file():
            p.error(f"no such file: {f}")
        lines += [json.loads(text) for text in f.read_text().splitlines() if text.strip()]
    if not lines:
        p.error(f"no records in {', '.join(map(str, args.files))}")
    print(f"Columns: {' / '.join(COLUMNS)} ({args.time} ms); standing: the fastest other TBE over ours.\n")
    print(table(bench_rows(lines, args.time)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
