"""Coverage of a campaign's draws alone: the (kernel path x edge class) cells that N draws of the campaign
strategy reach, no kernel run. It measures how well the search's distribution covers the matrix apart from
how fast a machine checks cases, so a change to the strategies can be judged on the CPU for a GPU budget.

``python -m benchmarks.draw_coverage --examples 300 --max-lookups 1200000 --out F`` draws 300 examples as a
quick GPU campaign would (the opening tour excluded: it is fixed), materializes each, takes its cells the
way a worker does (``fuzz.judge.coverage``) and writes the ``coverage`` summary with the reachable cells
still at zero. Several ``--seed`` values give the spread. ``--fill`` then adds the aimed cases a campaign runs
in its last share of time (``fuzz.campaign.fill``) for the cells the draws left at zero, and reports how many
there were and what stays at zero after them.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Optional

from hypothesis import HealthCheck, Phase, given, seed, settings

from fuzz.budgets import BUDGETS
from fuzz.campaign import fill
from fuzz.judge import coverage
from fuzz.judge.check import case_result
from cases import split_draw, tensors
from strategies.space import campaign_cases
from tbe import KernelConfig


def draw_coverage(config: KernelConfig, examples: int, max_lookups: int, pack: int, seed_value: int,
                  max_column_blocks: Optional[int] = None, aimed: bool = False) -> dict:
    """The coverage summary of ``examples`` campaign draws under ``config`` (reachable: the campaign's); with
    ``aimed``, also of the aimed cases for its zero cells (``fill``: their count and the summary after them)."""
    cov = coverage.Coverage()
    strategy = campaign_cases(config, max_lookups, search_config=True, max_column_blocks=max_column_blocks,
                              pack=pack)

    @seed(seed_value)
    @settings(max_examples=examples, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def draw(drawn) -> None:
        case, cfg, _ = split_draw(drawn, config)
        cov.add(case_result(case, tensors(case, weights=False), cfg, 0.0, None, None).cells)

    draw()
    reachable = coverage.reachable(config, True, max_lookups=max_lookups)
    out = cov.to_json(reachable)
    if aimed:
        zero = [c for c in sorted(reachable, key=coverage.cell_order) if not cov.counts[c]]
        planned = fill.plan(zero, config, max_lookups)
        for _, drawn in planned:
            cov.add(fill.predicted_cells(drawn, config))
        after = cov.to_json(reachable)
        out["fill"] = {"cases": len(planned), "zero_after": after["zero"], "covered_after": after["covered"]}
    return out


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=300)
    p.add_argument("--budget", default="quick", choices=sorted(BUDGETS))
    p.add_argument("--max-lookups", type=int, default=None, help="default: the budget's on this machine")
    p.add_argument("--seed", type=int, action="append", help="repeatable (default: 0)")
    p.add_argument("--config", default=None, help="KernelConfig JSON (default: defaults)")
    p.add_argument("--out", default=None, help="write the summaries here as JSON")
    p.add_argument("--fill", action="store_true", help="add the aimed cases for the cells the draws left at zero")
    args = p.parse_args(argv)
    budget = BUDGETS[args.budget]
    config = KernelConfig.load(args.config) if args.config else KernelConfig()
    max_lookups = args.max_lookups or budget.max_lookups
    runs = []
    for s in args.seed or [0]:
        t0 = time.perf_counter()
        cov = draw_coverage(config, args.examples, max_lookups, budget.pack, s, aimed=args.fill)
        runs.append({"seed": s, "seconds": round(time.perf_counter() - t0, 1), "coverage": cov})
        print(f"seed {s}: {cov['covered']} of {cov['reachable']} reachable cells from {cov['examples']} draws, "
              f"{len(cov['zero'])} at zero ({runs[-1]['seconds']} s)"
              + (f"; {cov['fill']['cases']} aimed cases leave {len(cov['fill']['zero_after'])}" if args.fill else ""))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"command": "python -m benchmarks.draw_coverage" + (" --fill" if args.fill else ""),
                       "examples": args.examples,
                       "max_lookups": max_lookups, "pack": budget.pack, "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
