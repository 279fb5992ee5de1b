"""Where a run's first answer waits: short campaigns, each on a warm or a dropped page cache, with their marks.

    python -m benchmarks.first_answer_marks --runs 3 --out benchmarks/results/first_answer_marks_cpu.json
    python -m benchmarks.first_answer_marks --tree DIR ...   # DIR: another checkout (``git archive REV fuzz tbe
                                                            # strategies oracles | tar -x -C DIR``), for the before

Each run is ``python -m fuzz run --budget quick --time S --json`` in its own process; a cold run first drops the
page cache (``/proc/sys/vm/drop_caches``, root only: otherwise it is recorded as not cold), as on a machine whose
disk has not read torch yet. Recorded per run: the first checked example's seconds from the command's start
(``warmup.background``, which every checkout has) and the run's ``first_answer`` marks where it has them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def drop_page_cache() -> bool:
    """Drop the page cache; False where this process may not (not root, or no such file)."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def one_run(tree: Path, seconds: float, cold: bool, artifacts: Path) -> dict:
    dropped = drop_page_cache() if cold else False
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    t0 = time.time()
    out = subprocess.run([sys.executable, "-m", "fuzz", "run", "--budget", "quick", "--time", str(seconds), "--json",
                          "--artifacts", str(artifacts)], cwd=tree, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    try:
        data = json.loads(out.stdout)
    except json.JSONDecodeError:
        return {"cache": "cold" if dropped else "warm", "rc": out.returncode, "error": out.stderr[-1500:]}
    background = (data.get("warmup") or {}).get("background") or {}
    return {"cache": "cold" if dropped else "warm", "rc": out.returncode, "wall": round(wall, 2),
            "examples": data.get("examples"),
            "first_example_since_start_seconds": background.get("first_example_since_start_seconds"),
            "first_answer": data.get("first_answer")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3, help="runs on a warm cache, then as many on a dropped one")
    p.add_argument("--seconds", type=float, default=5.0, help="each run's --time")
    p.add_argument("--tree", type=Path, default=REPO, help="the checkout to run (default: this one)")
    p.add_argument("--label", default=None, help="a name for the runs (default: the tree's path)")
    p.add_argument("--out", type=Path, default=None, help="append the summary as one JSON line here")
    args = p.parse_args(argv)
    artifacts = Path(os.environ.get("TMPDIR", "/tmp")) / f"first-answer-marks-{os.getpid()}"
    runs = [one_run(args.tree.resolve(), args.seconds, cold, artifacts) for cold in [False] * args.runs + [True] * args.runs]
    summary = {"label": args.label or str(args.tree), "command": f"python -m fuzz run --budget quick --time "
               f"{args.seconds:g} --json", "machine": {"cpus": os.cpu_count()}, "runs": runs}
    for r in runs:
        fa = r.get("first_answer") or {}
        print(f"{summary['label']:<12} {r['cache']:<5} rc={r['rc']} first example "
              f"{r.get('first_example_since_start_seconds')} s; search began {fa.get('search_started')} s, worker "
              f"ready {fa.get('worker_ready')} s, started {fa.get('worker_started')} s", file=sys.stderr)
    if args.out is not None:
        with open(args.out, "a") as f:
            f.write(json.dumps(summary, sort_keys=True) + "\n")
    return 0 if all(r["rc"] == 0 for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
