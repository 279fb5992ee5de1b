"""The check ``tbe-fuzz mutate`` runs inside each mutant's copy; exit 0 = passed, 1 = caught.

``campaign``: a ``CampaignRunner`` under the default KernelConfig with the named budget, ``--time``
seconds of search, ``--max-examples`` and ``--seed`` (what ``tbe-fuzz run --budget B --time S
--max-examples N --seed K`` runs; an example cap makes the verdict independent of machine load), but
without shrinking, saving artifacts or an example database: only whether it fails matters.
``pytest-fuzz``: ``pytest -m fuzz -x`` with the ``ci`` Hypothesis profile (what CI runs).
Before anything runs, the project must have been imported from the current directory (the
mutant's copy); otherwise the exit code is 97 and the mutation run stops.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ESCAPED = 97


def _imported_here() -> bool:
    import tbe

    return Path(tbe.__file__).resolve().is_relative_to(Path.cwd().resolve())


def campaign(budget_name: str, seconds: float, seed: int, max_examples: int = 0) -> int:
    from fuzz.budgets import get
    from fuzz.campaign import CampaignOptions, CampaignRunner
    from tbe import KernelConfig

    budget = get(budget_name).with_overrides(seconds=seconds, max_examples=max_examples or None)
    res = CampaignRunner(KernelConfig(), budget, seed, CampaignOptions(
        artifacts_dir=None, shrink=False, use_database=False)).run()
    summary = {"ok": res.ok, "examples": res.examples, "lookups": res.lookups, "seconds": round(res.seconds, 1),
               "stopped_by": res.stopped_by, "tiers": dict(res.tiers)}
    if res.failure is not None:
        summary["failure"] = res.failure.text().splitlines()[:6]
    print(json.dumps(summary, default=str), flush=True)
    return 0 if res.ok else 1


def pytest_fuzz() -> int:
    env = dict(os.environ, HYPOTHESIS_PROFILE="ci")
    cmd = [sys.executable, "-m", "pytest", "-m", "fuzz", "-x", "-q", "-p", "no:cacheprovider", "tests"]
    return subprocess.call(cmd, env=env)


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m fuzz.mutate.check")
    p.add_argument("kind", choices=("campaign", "pytest-fuzz"))
    p.add_argument("--budget", default="ci")
    p.add_argument("--time", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-examples", type=int, default=0, help="example cap (0: the budget's)")
    args = p.parse_args()
    if not _imported_here():
        import tbe

        print(f"tbe was imported from {tbe.__file__}, not from {Path.cwd()}", file=sys.stderr)
        return ESCAPED
    if args.kind == "campaign":
        return campaign(args.budget, args.time, args.seed, args.max_examples)
    return pytest_fuzz()


if __name__ == "__main__":
    raise SystemExit(main())
