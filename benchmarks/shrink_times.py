"""How long a failure takes to shrink on the CPU, and what a triaged SUT's quick campaign still draws.

Three measurements, each a fresh process, as a user meets them:

* ``campaign``: ``tbe-fuzz run`` with the planted fault ``fwd_skip_last_id`` at seed 0 (the opening tour's
  second case fails, 25 lookups): its ``shrink_seconds`` (first failure to the end of shrinking) and reductions.
* ``smoke``: one property test over ``fuzz_cases`` with the same fault, two examples as the smoke profile runs
  them (the simplest, then one drawn), under pytest: the seconds until pytest reports the shrunk failure.
* ``fbgemm-cpu``: ``tbe-fuzz run --sut fbgemm-cpu --budget quick``: the known findings it triaged and the
  examples it drew besides.

    python -m benchmarks.shrink_times [--runs N] [--tree DIR] [--out FILE.jsonl]

``--tree DIR`` runs the commands in another checkout (``git worktree add DIR COMMIT``): the before of a change,
with this script's commands.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAULT = "fwd_skip_last_id"
SMOKE_TEST = f'''
from hypothesis import given, settings
from strategies.adversarial import fuzz_cases
from tests.fuzz_properties import check_fuzz_case
from tests.strategies.test_strategies import DEFAULT_CASES


@settings(max_examples=2, derandomize=True, deadline=None, database=None)
@given(fuzz_cases(**DEFAULT_CASES))
def test_fault(fc):
    check_fuzz_case(fc, faults=("{FAULT}",))
'''


def _env(tree: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree), "TBE_FUZZ_ALLOW_FAULTS": "1", "TBE_FUZZ_SANITIZE": "0", **extra}


def campaign(tree: Path, tmp: Path) -> dict:
    tmp.mkdir(parents=True)
    (tmp / "fault.json").write_text(json.dumps({"faults": [FAULT]}))
    out = subprocess.run([sys.executable, "-m", "fuzz", "run", "--config", str(tmp / "fault.json"), "--seed", "0",
                          "--artifacts", str(tmp / "campaign"), "--json"], cwd=tree, env=_env(tree),
                         capture_output=True, text=True, timeout=600)
    r = json.loads(out.stdout)
    first = re.search(r"shrinking: now (.*)", out.stderr)
    f = r["failure"] or {}  # shrink_seconds is the run's seconds after its first failure (older trees lack it)
    shrink = f.get("shrink_seconds", r["seconds"] - f["seconds_to_first_failure"] if f else None)
    return {"measure": "campaign", "ok": r["ok"], "first_failure": first.group(1) if first else None,
            "shrunk_tables": r["failure"]["case"]["tables"] if r["failure"] else None,
            "reduce_steps": r["reduce_steps"],
            "shrink_seconds": None if shrink is None else round(shrink, 2),
            "seconds": r["seconds"], "supervision": r["time_split"]["supervision"]}


def smoke(tree: Path, tmp: Path) -> dict:
    tmp.mkdir(parents=True)
    test = tmp / "test_smoke_fault.py"
    test.write_text(SMOKE_TEST)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                          str(test)], cwd=tree, env=_env(tree, TBE_FUZZ_ARTIFACTS=str(tmp / "smoke")),
                         capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - t0
    said = re.search(r"(\d+ (?:failed|passed)).* in ([\d.]+)s", out.stdout)
    return {"measure": "smoke", "outcome": said.group(1) if said else out.stdout[-200:],
            "pytest_seconds": float(said.group(2)) if said else None, "wall_seconds": round(seconds, 1)}


def fbgemm_cpu(tree: Path, tmp: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "fuzz", "run", "--sut", "fbgemm-cpu", "--budget", "quick",
                          "--artifacts", str(tmp / "fbgemm"), "--json"], cwd=tree, env=_env(tree),
                         capture_output=True, text=True, timeout=900)
    r = json.loads(out.stdout)
    return {"measure": "fbgemm-cpu", "ok": r["ok"], "examples": r["examples"], "tour": r["tour_examples"],
            "drawn": r["examples"] - r["tour_examples"], "known": [k["id"] for k in r["known"]],
            "seconds": r["seconds"], "supervision": r["time_split"]["supervision"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3, help="campaign shrinks to time (default 3; the median is printed)")
    p.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose commands run (default: this one)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    tree = args.tree.resolve()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True,
                            text=True).stdout.strip()
    records = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(args.runs):
            records.append(campaign(tree, Path(d) / f"c{i}"))
        records += [smoke(tree, Path(d) / "s"), fbgemm_cpu(tree, Path(d) / "f")]
    for r in records:
        r.update(commit=commit, dirty=bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                                          cwd=tree, capture_output=True, text=True).stdout.strip()),
                 cores=os.cpu_count())
        print(json.dumps(r))
    shrinks = [r["shrink_seconds"] for r in records if r["measure"] == "campaign" and r["shrink_seconds"] is not None]
    if shrinks:
        print(f"campaign shrink: median {statistics.median(shrinks):.1f}s of {len(shrinks)}", file=sys.stderr)
    if args.out is not None:
        with args.out.open("a") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
