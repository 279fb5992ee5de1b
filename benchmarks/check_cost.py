"""What one case costs to check in this process, without the supervisor: the ceiling of a campaign's loop.

    python -m benchmarks.check_cost --cases 200 --max-lookups 10000 [--sut torch] [--profile 30]
    python -m benchmarks.check_cost --cases 30 --pack 16 --max-lookups 10000 --profile 45 --out F
    python -m benchmarks.check_cost --cases 12 --large 2000000 --profile 45
    python -m benchmarks.check_cost --cases 10 --large 2000000 --seed 1 --draws-only
    python -m benchmarks.check_cost --cases 10 --large 2000000 --seed 1 --oracles-only
    python -m benchmarks.check_cost --cases 6 --large 200000 --seed 1 --fbgemm-only

Draws ``--cases`` campaign cases (the search space of ``tbe-fuzz run``, seeded), or with ``--pack K``
packs of one to K general cases of at most ``--max-lookups`` each at the default config (the throughput
benchmark's small part without its config draws), times their generation, then checks them all twice
with ``fuzz.judge.check.run_case``: the first pass loads every kernel into the process (from Triton's
cache after a warm-up), the second is the steady state. ``--large L`` checks ``--cases`` cases of about L
lookups each instead (one table; D, rows, bag length, dtypes, pooling, weighting, optimizer, skew and
values varied by the seed): the per-lookup cost that a campaign's mix of small draws hides. ``--draws-only``
times, twice, only the draws of every case (batch, gradients and initial weights: ``cases.tensors``)
where a check makes them (``fuzz.judge.check.draw_device``: on a GPU the large ones run there), before any kernel.
``--oracles-only`` (with ``--large``) times, twice, only the FP64 references and bounds of each case's first step
(``oracles_all``), where a check runs them, draws excluded. ``--fbgemm-only`` times FBGEMM's sample check (``fuzz.judge.fbgemm_sample.run``: FBGEMM's CPU steps and
their FP64 check, on the CPU) on every case, whatever the sample and its size cap, draws excluded.
``--profile N`` prints the N costliest functions
of a third pass (cProfile), by own time and by cumulative time, and on a GPU the N kernels and ops with the most
device time of a fourth (``torch.profiler``); ``--out`` also writes them to a file.
"""

from __future__ import annotations

import argparse
import functools
import random
import time
from pathlib import Path

from tbe.backend import INTERPRETED  # noqa: F401  (first: it picks the interpreter before triton is imported)

import torch  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from fuzz.judge import run_case  # noqa: E402
from cases import CaseSpec, split_draw, tensors  # noqa: E402
from strategies.pack import packs  # noqa: E402
from strategies.space import campaign_cases, general_cases  # noqa: E402
from tbe import KernelConfig  # noqa: E402


def draw_cases(n: int, max_lookups: int, base: KernelConfig, at: int = 0, pack: int = 1) -> list:
    """(case, config) pairs: campaign draws, or with ``pack`` > 1 packs of general cases at ``base``."""
    drawn: list = []
    strategy = (campaign_cases(base, max_lookups) if pack <= 1
                else packs(general_cases(base, max_lookups), pack, max_lookups * pack))

    @seed(at)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(d):
        drawn.append(d)

    collect()
    return [split_draw(d, base)[:2] for d in drawn]


def large_cases(n: int, lookups: int, base: KernelConfig, at: int = 0) -> list:
    """``n`` (case, config) pairs of about ``lookups`` lookups each, modes varied by a seeded generator."""
    rng = random.Random(at)
    items = []
    for k in range(n):
        bag = rng.choice((8, 32, 128))
        spec = CaseSpec(tables=((rng.choice((50_000, 500_000)), rng.choice((8, 64, 128))),),
                        batch_size=max(1, lookups // bag), max_length=bag, length_profile="fixed",
                        weights_dtype=rng.choice(("fp32", "fp16")), pooling=rng.choice(("sum", "mean")),
                        weighted=rng.random() < 0.5, optimizer=rng.choice(("exact_sgd", "exact_rowwise_adagrad")),
                        id_skew=rng.choice((0.0, 1.1)), values=rng.choice(("random", "dyadic")), seed=at * 1000 + k)
        items.append((spec, base))
    return items


def check_all(items: list, sut: str) -> tuple[float, int]:
    t0, lookups = time.perf_counter(), 0
    for case, config in items:
        lookups += run_case(case, config, sut=sut).lookups
    return time.perf_counter() - t0, lookups


def draw_all(items: list, sut: str) -> tuple[float, int]:
    """Every case's draws (batch, gradients, initial weights) where a check makes them (``draw_device``)."""
    from fuzz.judge.check import draw_device

    device = draw_device(sut)
    t0, lookups = time.perf_counter(), 0
    for case, _ in items:
        lookups += tensors(case, device=device).indices.numel()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, lookups


def oracles_all(items: list, sut: str) -> tuple[float, int]:
    """The FP64 references and bounds of each case's first step (``forward_expectation``, ``reference_backward``,
    ``step_bounds``) where a check runs them (``draw_device``), draws excluded: the oracles' part of a check."""
    from fuzz.judge.check import draw_device
    from oracles.bounds_backward import step_bounds
    from oracles.checks import forward_expectation
    from oracles.reference_backward import reference_backward

    device = draw_device(sut)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    secs, lookups = 0.0, 0
    for case, _ in items:
        spec, t = case.spec, tensors(case, device=device)
        layout, B, w, pooling = spec.layout, spec.batch_size, t.initial_weights, spec.pooling
        momentum = torch.zeros(layout.total_rows, device=device)
        sync()
        t0 = time.perf_counter()
        forward_expectation(layout, w, t.indices, t.offsets, t.per_sample_weights, B, pooling,
                            spec.output_dtype.torch)
        ref = reference_backward(layout, w, momentum, t.indices, t.offsets, t.per_sample_weights, B, pooling,
                                 spec.optimizer, spec.learning_rate, spec.eps, t.grad_outputs[0])
        step_bounds(ref, w.dtype)
        sync()
        secs += time.perf_counter() - t0
        lookups += t.indices.numel()
    return secs, lookups


def columns(items: list) -> int:
    """The lookup columns of ``items`` as FBGEMM's sample counts them (``fbgemm_sample.columns``)."""
    from fuzz.judge import fbgemm_sample

    return sum(fbgemm_sample.columns(case, tensors(case, weights=False).indices.numel()) for case, _ in items)


def fbgemm_all(items: list) -> tuple[float, int]:
    from fuzz.judge import fbgemm_sample

    secs, lookups = 0.0, 0
    for case, _ in items:
        t = tensors(case)
        t0 = time.perf_counter()
        fbgemm_sample.run(case, t)
        secs += time.perf_counter() - t0
        lookups += t.indices.numel()
    return secs, lookups


def device_profile(part, items: list, rows: int) -> str:
    """The ``rows`` CUDA kernels and ops of one more pass with the most device time of their own
    (``torch.profiler``): where a check's time goes once the host is not waiting on draws."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        part(items)
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=rows, max_name_column_width=70)
    return "\ndevice time by kernel and op (torch.profiler, one pass):\n" + table + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=200)
    p.add_argument("--max-lookups", type=int, default=10_000)
    p.add_argument("--pack", type=int, default=1, metavar="K", help="packs of up to K general cases")
    p.add_argument("--large", type=int, default=0, metavar="L", help="cases of about L lookups each instead")
    p.add_argument("--sut", default="triton")
    only = p.add_mutually_exclusive_group()
    only.add_argument("--draws-only", action="store_true", help="time the host's draws of each case, no checks")
    only.add_argument("--fbgemm-only", action="store_true", help="time FBGEMM's sample check of each case")
    only.add_argument("--oracles-only", action="store_true",
                      help="with --large: time the FP64 references and bounds of each case, no SUT")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", type=int, default=0, metavar="N")
    p.add_argument("--out", type=Path, default=None, help="write the profile here too")
    args = p.parse_args()
    if args.oracles_only and not args.large:
        p.error("--oracles-only needs --large: drawn cases may hold bad ids, which only a check repairs")
    base = KernelConfig()
    t0 = time.perf_counter()
    items = (large_cases(args.cases, args.large, base, args.seed) if args.large
             else draw_cases(args.cases, args.max_lookups, base, args.seed, args.pack))
    gen = time.perf_counter() - t0
    if args.fbgemm_only:  # the cases FBGEMM's CPU TBE can run, whatever their size
        from fuzz.judge import fbgemm_sample

        runnable = (None, fbgemm_sample.TOO_LARGE)
        items = [(case, cfg) for case, cfg in items if fbgemm_sample.not_applicable(case, 1) in runnable]
    subs = sum(len(case.subs) for case, _ in items)
    print(f"generated {len(items)} examples ({subs} cases) in {gen:.2f}s ({1000 * gen / len(items):.1f} ms each)")
    unit = "example" if args.pack > 1 else "case"
    if args.draws_only:
        part, what = functools.partial(draw_all, sut=args.sut), "draws"
    elif args.oracles_only:
        part, what = functools.partial(oracles_all, sut=args.sut), "the FP64 references and bounds"
    elif args.fbgemm_only:
        part, what = fbgemm_all, "FBGEMM's sample check"
        cols = columns(items)  # once: the items are the same in every pass
    else:
        part, what = functools.partial(check_all, sut=args.sut), ""
    for name in ((f"{what}, first pass", f"{what}, second pass") if what
                 else ("first pass (loads kernels)", "second pass")):
        secs, lookups = part(items)
        print(f"{name}: {1000 * secs / len(items):.1f} ms per {unit}, {lookups} lookups, {len(items) / secs:.1f} "
              f"{unit}s/s" + (f", {subs / secs:.1f} cases/s" if args.pack > 1 else "")
              + f", {lookups / secs / 1e6:.2f}M lookups/s")
        if args.fbgemm_only:
            print(f"  {cols / secs / 1e6:.2f}M lookup columns/s (lookups x widest D x steps)")
    if args.profile:
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        prof.runcall(part, items)
        text = io.StringIO()
        stats = pstats.Stats(prof, stream=text)
        stats.sort_stats("tottime").print_stats(args.profile)
        stats.sort_stats("cumulative").print_stats(args.profile)
        if torch.cuda.is_available() and not args.fbgemm_only:
            text.write(device_profile(part, items, args.profile))
        print(text.getvalue())
        if args.out:
            args.out.write_text(text.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
