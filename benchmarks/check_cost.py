"""What one case costs to check in this process, without the supervisor: the ceiling of a campaign's loop.

    python -m benchmarks.check_cost --cases 200 --max-lookups 10000 [--sut torch] [--profile 30]

Draws ``--cases`` campaign cases (the search space of ``tbe-fuzz run``, seeded), times their
generation, then checks them all twice with ``fuzz.judge.check.run_case``: the first pass loads every
kernel into the process (from Triton's cache after a warm-up), the second is the steady state.
``--profile N`` prints the N costliest functions of a third pass (cProfile).
"""

from __future__ import annotations

import argparse
import time

from tbe.backend import INTERPRETED  # noqa: F401  (first: it picks the interpreter before triton is imported)

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from fuzz.judge import run_case  # noqa: E402
from strategies.config_space import split_draw  # noqa: E402
from strategies.space import campaign_cases  # noqa: E402
from tbe import KernelConfig  # noqa: E402


def draw_cases(n: int, max_lookups: int, base: KernelConfig, at: int = 0) -> list:
    drawn: list = []

    @seed(at)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(campaign_cases(base, max_lookups))
    def collect(d):
        drawn.append(d)

    collect()
    return [split_draw(d, base)[:2] for d in drawn]


def check_all(items: list, sut: str) -> tuple[float, int]:
    t0, lookups = time.perf_counter(), 0
    for case, config in items:
        lookups += run_case(case, config, sut=sut).lookups
    return time.perf_counter() - t0, lookups


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=200)
    p.add_argument("--max-lookups", type=int, default=10_000)
    p.add_argument("--sut", default="triton")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", type=int, default=0, metavar="N")
    args = p.parse_args()
    base = KernelConfig()
    t0 = time.perf_counter()
    items = draw_cases(args.cases, args.max_lookups, base, args.seed)
    gen = time.perf_counter() - t0
    print(f"generated {len(items)} cases in {gen:.2f}s ({1000 * gen / len(items):.1f} ms each)")
    for name in ("first pass (loads kernels)", "second pass"):
        secs, lookups = check_all(items, args.sut)
        print(f"{name}: {1000 * secs / len(items):.1f} ms a case, {lookups} lookups, {len(items) / secs:.1f} cases/s")
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(check_all, items, args.sut)
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
