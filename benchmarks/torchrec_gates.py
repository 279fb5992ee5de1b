"""The gate over upstream's consecutive TorchRec Triton TBE commits: each code change against its parent.

For each commit of ``--commits`` (default: the eight of 2026-08-08, in order) whose parent is the snapshot
before it, ``tbe-fuzz gate --sut torchrec-triton --baseline-source PARENT --candidate-source COMMIT --levels bd``:
correctness on the same cases (level b) and interleaved timing on ``--shapes`` (level d). Writes
``torchrec_gates_<device>.jsonl`` (each gate's JSON report) and ``.md`` (verdicts and per-shape speedups).

    python -m benchmarks.torchrec_gates [--time S] [--rounds N] [--shapes FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.torchrec_versions import RESULTS, ROOT, device_label

AUGUST_8 = ("c95e01a0", "9e6b19ed", "0c478d92", "aab76533", "50809e41", "f8e2daf3", "1d2986c9", "170d6e4f")


def gate(parent: Path, commit: Path, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-m", "fuzz", "gate", "--sut", "torchrec-triton", "--baseline-source", str(parent),
           "--candidate-source", str(commit), "--levels", "bd", "--seeds", str(args.seeds), "--time", str(args.time),
           "--rounds", str(args.rounds), "--shapes", str(args.shapes), "--gamma", str(args.gamma), "--json",
           "--artifacts", str(args.out / commit.name)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        data = {"verdict": "ERROR", "error": (proc.stderr or proc.stdout).strip().splitlines()[-3:]}
    data.update(parent=parent.name, commit=commit.name, exit=proc.returncode, wall_s=round(time.perf_counter() - t0, 1),
                command=" ".join(cmd[3:]))
    return data


def summary(r: dict) -> dict:
    levels = r.get("levels", {})
    perf = levels.get("d", {})
    detail = (perf.get("detail") or {}) if isinstance(perf, dict) else {}
    entries = detail.get("entries", [])
    return {"commit": r["commit"], "parent": r["parent"], "verdict": r.get("verdict"),
            "correctness": levels.get("b", {}).get("status"), "performance": perf.get("status"),
            "geomean": detail.get("geomean_speedup"), "noise": detail.get("mean_noise"),
            "speedups": {f"{e['shape']} {e['phase']}": round(e["speedup"], 3) for e in entries if "speedup" in e},
            "reasons": r.get("reasons")}


def table(rows: list[dict], titles: dict[str, str], device: str, command: str) -> str:
    lines = [f"# The gate over upstream's TorchRec Triton TBE commits on {device}", "",
             "| commit | title | verdict | correctness (b) | performance (d) | geometric-mean speedup (mean noise) | "
             "slowest / fastest |", "|---|---|---|---|---|---|---|"]
    for s in rows:
        sp = s["speedups"]
        span = (f"{min(sp.values()):.3f} ({min(sp, key=sp.get)}) / {max(sp.values()):.3f} ({max(sp, key=sp.get)})"
                if sp else "-")
        g = "-" if s["geomean"] is None else f"{s['geomean']:.3f} ({100 * s['noise']:.0f}%)"
        lines.append(f"| {s['commit']} | {titles.get(s['commit'], '')} | {s['verdict']} | {s['correctness']} | "
                     f"{s['performance']} | {g} | {span} |")
    lines += ["", f"Per commit: `python -m fuzz {command}` (the two sources and artifacts aside).", ""]
    return "\n".join(lines)


def titles_from_readme(root: Path) -> dict[str, str]:
    readme = root / "README.md"
    out = {}
    for line in (readme.read_text().splitlines() if readme.is_file() else []):
        cells = [c.strip() for c in line.split("|")]
        if len(cells) >= 5 and len(cells[1]) == 8:
            out[cells[1]] = cells[3]
    return out


def redraw(jsonl: Path) -> str:
    """The table again from a run's JSON lines (``--redraw FILE``)."""
    from fuzz.sut.torchrec_triton.loader import snapshots

    records = [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
    root = snapshots()[0].parent if snapshots() else jsonl.parent
    device = jsonl.stem.rsplit("_", 1)[-1]
    return table([summary(r) for r in records], titles_from_readme(root), device, records[0]["command"])


def main(argv=None) -> int:
    from fuzz.sut.torchrec_triton.loader import snapshots

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--commits", nargs="*", default=list(AUGUST_8))
    p.add_argument("--time", type=float, default=10.0, help="level (b) seconds per seed and phase")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--gamma", type=float, default=1.0)
    p.add_argument("--shapes", type=Path, default=ROOT / "benchmarks" / "shapes" / "torchrec.json")
    p.add_argument("--out", type=Path, default=Path("torchrec-gates"))
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--redraw", type=Path, default=None, metavar="JSONL", help="only redraw the table of a run")
    args = p.parse_args(argv)
    if args.redraw is not None:
        text = redraw(args.redraw)
        args.redraw.with_suffix(".md").write_text(text)
        print(text)
        return 0
    folders = snapshots()
    names = [f.name for f in folders]
    device = device_label()
    args.results.mkdir(parents=True, exist_ok=True)
    stem = args.results / f"torchrec_gates_{device}"
    stem.with_suffix(".jsonl").write_text("")
    records, rows = [], []
    for commit in args.commits:
        if commit not in names or names.index(commit) == 0:
            print(f"skipped {commit}: no snapshot of it and its parent", file=sys.stderr)
            continue
        i = names.index(commit)
        r = gate(folders[i - 1], folders[i], args)
        records.append(r)
        rows.append(summary(r))
        print(json.dumps(rows[-1]), flush=True)
        with stem.with_suffix(".jsonl").open("a") as f:  # as it goes: a run cut short keeps what it measured
            f.write(json.dumps(r, default=str) + "\n")
        text = table(rows, titles_from_readme(folders[0].parent), device, records[0]["command"])
        stem.with_suffix(".md").write_text(text)
    if not records:
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
