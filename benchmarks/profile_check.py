"""Where a packed check's time goes: cProfile of ``fuzz.judge.check.run_case`` over drawn packs.

    python -m benchmarks.profile_check --packs 30 --out benchmarks/results/profile_packed_check_h200.txt

The packs are general cases of at most 10,000 lookups, up to 16 to a pack, at the default config (the
throughput benchmark's small part without its config draws), drawn with a fixed seed; each is checked once untimed (kernel builds), then again under
the profiler, in this process (no supervision, no Hypothesis driver): the check's own cost.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from pathlib import Path

from tbe.backend import INTERPRETED  # noqa: F401  first: it picks the interpreter before triton is imported

from hypothesis import HealthCheck, given, settings  # noqa: E402

from fuzz.judge.check import run_case  # noqa: E402
from strategies.pack import PackCase, packs  # noqa: E402
from strategies.space import general_cases  # noqa: E402
from tbe import KernelConfig  # noqa: E402


def drawn_packs(n: int) -> list:
    out = []

    @settings(max_examples=n, database=None, deadline=None, suppress_health_check=list(HealthCheck),
              derandomize=True)
    @given(packs(general_cases(KernelConfig(), 10_000), 16, 160_000))
    def collect(c) -> None:
        out.append(c)

    collect()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--packs", type=int, default=30)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    cases = drawn_packs(args.packs)
    subs = sum(len(c.subs) if isinstance(c, PackCase) else 1 for c in cases)

    def run() -> None:
        for c in cases:
            r = run_case(c, KernelConfig())
            if r.error is not None or not all(x.ok for x in r.reports):
                raise SystemExit(f"a drawn pack failed its check: {r.error or 'mismatch'}")

    t0 = time.perf_counter()
    run()
    first = time.perf_counter() - t0
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    run()
    prof.disable()
    wall = time.perf_counter() - t0
    text = io.StringIO()
    text.write(f"first pass (kernel builds) {first:.1f}s\npacks {len(cases)} subs {subs} wall {wall:.2f}s "
               f"subs/s {subs / wall:.1f}\n")
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(45)
    if args.out:
        args.out.write_text(text.getvalue())
    print(text.getvalue()[:3000])


if __name__ == "__main__":
    main()
