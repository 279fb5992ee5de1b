"""``tbe-fuzz run`` and ``tbe-fuzz warmup``: options and the command bodies.

``run`` warms the kernel cache first on a GPU (``fuzz.compile.warmup``), runs one campaign in this
process or N worker processes (``fuzz.execution.workers``), draws a live progress line on a
terminal (``fuzz.campaign.progress``) and the report pictures (``fuzz.campaign.pictures``, the coverage heatmap
``fuzz.campaign.coverage_map``), and counts what
Triton compiled during the search (``fuzz.compile.watch``). A first Ctrl-C stops the search, saves
the smallest failure so far and prints the summary marked interrupted (exit status 130); a second
one exits at once (``fuzz.execution.interrupt``). ``--time`` counts from the command's start: the
imports and the warm-up come out of the search time, so the whole command keeps to the budget.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any, Optional


def _database_arg(text: str) -> str:
    from fuzz.campaign import check_url

    try:
        return check_url(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _workers_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number of workers, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of workers, got {text!r}")
    return value


def _repeat_arg(text: str):
    from fuzz.campaign import Repeat

    try:
        return Repeat.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _tour_share_arg(text: str):
    from strategies.tour import TourShare

    try:
        return TourShare.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def tour_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-tour", action="store_true",
                   help="skip the opening tour (strategies.tour): the random search alone, to measure its power")


def fill_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-fill", action="store_true",
                   help="no aimed cases for the coverage cells the draws left at zero (fuzz.campaign.fill): the "
                        "drawn search keeps its whole time")


def add_run_options(run: argparse.ArgumentParser) -> None:
    tours = run.add_mutually_exclusive_group()
    tour_option(tours)
    fill_option(run)
    tours.add_argument("--tour-share", type=_tour_share_arg, default=None, metavar="I/N",
                       help="run only every Nth case of the opening tour from case I (0-based); --workers N gives "
                            "worker I share I/N, so the workers run the tour once between them")
    run.add_argument("--workers", type=_workers_arg, default=None, metavar="N",
                     help="campaign processes (default: one per visible GPU; one without a GPU)")
    run.add_argument("--database", type=_database_arg, default=None, metavar="DIR|redis://HOST:PORT/DB",
                     help="Hypothesis example database shared by the workers (default: <artifacts>/.hypothesis), "
                          "read as with --continue; a redis:// server also holds the compiled kernels, so hosts "
                          "build each kernel once")
    run.add_argument("--continue", dest="continue_", action="store_true",
                     help="go on from the example database: the examples earlier runs saved there (failures, the "
                          "search's best) run first. Without it (or --database) a run only writes the database, "
                          "and its seed alone decides its examples")
    run.add_argument("--repeat", type=_repeat_arg, default=None, metavar="DRAWN[,AIMED[,AFTER]]",
                     help="run a campaign's examples again, by the counts its summary prints: the tour, DRAWN drawn "
                          "examples, the first AIMED aimed cases, AFTER draws after them; no time limit")
    run.add_argument("--no-warmup", action="store_true", help="skip building the kernels (each case compiles its own)")
    run.add_argument("--warmup-first", action="store_true",
                     help="build every kernel before the search starts (default: build in the background while "
                          "cases whose kernels are built run first; --workers > 1 always builds first)")
    run.add_argument("--warmup-processes", type=_workers_arg, default=None, metavar="N",
                     help="processes compiling in the warm-up (default: CPU cores, at most 32)")
    run.add_argument("--progress", action="store_true", help="draw the live progress line even when stderr is no terminal")
    run.add_argument("--report-dir", type=Path, default=None, metavar="DIR",
                     help="write the report pictures here (default: beside the artifacts)")


def add_warmup_parser(sub: Any, config_type: Any) -> None:
    w = sub.add_parser("warmup", help="build every kernel a campaign can reach into Triton's disk cache")
    w.add_argument("--config", type=config_type, action="append", default=None,
                   help="KernelConfig JSON (repeatable; default: the default config)")
    w.add_argument("--named-configs", action="store_true",
                   help="also the named configs the pytest fuzz tests run under (strategies.configs)")
    w.add_argument("--processes", type=_workers_arg, default=None, metavar="N",
                   help="worker processes (default: CPU cores, at most 32)")
    w.add_argument("--force", action="store_true",
                   help="run even if Triton's cache holds a stamp of the same warm-up (fuzz.compile.stamp)")
    w.add_argument("--faults", action="store_true",
                   help="also each planted-fault config the self-test's campaigns run (tbe.faults), on each base")
    w.add_argument("--dry-run", action="store_true",
                   help="compile nothing: count the kernel specializations the warm-up would build, per kernel "
                        "(JSON key 'specializations'), and what each fault config adds; runs on a CPU too")
    w.add_argument("--json", action="store_true", help="print the result as JSON")


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _warmup_bases(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """(label, config) of each campaign the warm-up covers: the --config files (or the defaults), then with
    --faults each planted-fault config on each of them."""
    from tbe import KernelConfig

    bases = [(str(path), c) for path, c in args.config] if args.config else [("default", KernelConfig())]
    if not args.faults:
        return bases
    from fuzz.selftest import campaign_config
    from tbe import faults

    return bases + [(f"{label} + fault {name}", campaign_config(name, c))
                    for label, c in bases for name in sorted(faults.KNOWN)]


def cmd_warmup(args: argparse.Namespace) -> int:
    from fuzz.compile import warm_campaigns
    from tbe import faults

    with faults.allow():  # --faults: planted-fault configs are built (never run) here
        bases = _warmup_bases(args)
        extra = []
        if args.named_configs:
            from strategies.configs import NAMED

            extra = list(NAMED.values())
        if args.dry_run:
            from fuzz.compile import campaign_units, count_specializations

            units = [(label, campaign_units([c])) for label, c in bases]
            units += [("named configs", [("matrix", c) for c in extra])] if extra else []
            counted = count_specializations(units, args.processes, _progress)
            print(json.dumps(counted.to_dict(), indent=2) if args.json else counted.text(), flush=True)
            return 0
        res = warm_campaigns([c for _, c in bases], args.processes, _progress, force=args.force, extra=extra)
    print(json.dumps(res.to_dict(), indent=2) if args.json else res.text(), flush=True)
    return 1 if res.errors else 0


def _one_thread_on_cpu(sut: str) -> None:
    """Without a GPU, a SUT other than Triton kernels runs with one intra-op thread unless
    OMP_NUM_THREADS says otherwise (as the workers do): on a busy two-core machine the FP64
    references' index_add_ took 95 ms with two threads and 1 ms with one, and an fbgemm-cpu
    quick campaign checked 1,043 examples instead of 62. (Interpreter campaigns of the Triton
    kernels were not measured to gain, so they keep torch's default.)"""
    import os

    import torch

    from fuzz.sut import get

    if not torch.cuda.is_available() and "OMP_NUM_THREADS" not in os.environ and not get(sut).capabilities.triton_kernels:
        torch.set_num_threads(1)


def tour_share(args: argparse.Namespace) -> Any:
    """The share of the opening tour a command's options ask for (None: --no-tour)."""
    from strategies.tour import ALL

    if getattr(args, "no_tour", False):
        return None
    return getattr(args, "tour_share", None) or ALL


def reads_database(args: argparse.Namespace) -> bool:
    """Whether a run reads its example database: with --continue, or a database named with --database."""
    return bool(getattr(args, "continue_", False) or getattr(args, "database", None))


@dataclasses.dataclass(frozen=True)
class StartMarks:
    """When the command started (its ``--time`` counts from ``started``, a perf_counter reading; the first answer's
    timeline from ``started_wall``) and when its imports and arguments were done (``parsed_wall``)."""

    started: float
    started_wall: float
    parsed_wall: float


def cmd_run(args: argparse.Namespace, budget: Any, backend_line: str, model: Any = None,
            marks: Optional[StartMarks] = None) -> int:
    """One campaign in this process, or ``--workers N`` in N processes: announce, warm up, search, report."""
    from fuzz.execution import default_workers, shared

    config = _config(args)
    n = args.workers if args.workers is not None else 1 if args.repeat is not None else default_workers()
    _announce(args, budget, backend_line, n)
    if n == 1:  # its worker's imports and CUDA context overlap the warm-up's planning and the builder's start
        shared().prestart()
        if marks is not None:
            shared().first_answer.driver["parsed"] = marks.parsed_wall
    warm, background = _warm_up(args, config, n)
    if n > 1:
        return _several(args, n, warm)
    res, collector, built = _search(args, config, budget, model, background, marks)
    return _report(args, config, res, collector, warm if background is None else built, background, marks)


def _config(args: argparse.Namespace) -> Any:
    from tbe import KernelConfig

    return args.config[1] if args.config else KernelConfig()


def _announce(args: argparse.Namespace, budget: Any, backend_line: str, n: int) -> None:
    from fuzz.budgets import EXAMPLE_CAP_S
    from fuzz.sut import get as get_sut

    timed = budget.seconds != float("inf")
    _progress(f"tbe-fuzz run: budget {budget.name} ("
              + (f"{budget.seconds:g}s search + {budget.shrink_seconds:g}s to shrink a failure, an example stopped "
                 f"{EXAMPLE_CAP_S:g}s past the end, " if timed else "no time limit, ")
              + f"up to {budget.max_examples} examples of <= {budget.max_lookups} lookups), seed {args.seed}, "
              f"{backend_line}"
              + (f", {n} workers" if n > 1 else ""))
    for note in get_sut(args.sut).notes():
        _progress(f"  stand-in: {note}")


def _warm_up(args: argparse.Namespace, config: Any, n: int) -> tuple[Any, Any]:
    """(a finished warm-up, a background build): the kernels of this project's SUT built before the search (several
    workers, or ``--warmup-first``) or beside it; neither for another SUT or with ``--no-warmup``."""
    from fuzz.compile import warm_campaigns
    from fuzz.execution import shared
    from fuzz.sut import get as get_sut

    if args.no_warmup or not get_sut(args.sut).capabilities.project_kernels:  # this project's Triton kernels only
        return None, None
    if n > 1 or args.warmup_first:
        warm = warm_campaigns([config], args.warmup_processes, progress=_progress)
        _progress(warm.text())
        return warm, None
    # build beside the search; cases whose kernels are built run first (fuzz.compile.background)
    from fuzz.compile import background, default_processes
    from strategies.config_space import campaign_configs

    processes = args.warmup_processes or max(1, default_processes() - 2)  # two cores for the search
    tours = [] if tour_share(args) is None else [config]  # --no-tour: no tour kernels to build
    build = background.start(campaign_configs(config), tours, processes, progress=_progress)
    shared().first_answer.driver["warmup_started"] = time.time()
    if build.thread is not None:
        _progress(f"warm-up: building {build.result.groups} groups in the background on "
                  f"{build.result.processes} processes; the search starts now")
    return None, build


def _several(args: argparse.Namespace, n: int, warm: Any) -> int:
    """``--workers N``: N campaigns in N processes, their results merged."""
    from fuzz.campaign import coverage_map
    from fuzz.execution import end_early, merged_text, run_workers

    end_early()  # each campaign has workers of its own
    merged = run_workers(args, n, progress=_progress)
    if warm is not None:
        merged["warmup"] = warm.to_dict()
    heat, _ = coverage_map.write(merged["coverage"], args.report_dir or Path(args.artifacts) / "report",
                                 stopped=None if merged["ok"] else "a worker stopped at its failure")
    merged["coverage_map"] = None if heat is None else str(heat)
    print(json.dumps(merged, indent=2, sort_keys=True, default=str) if args.json else merged_text(merged))
    return 0 if merged["ok"] else 1


def _search(args: argparse.Namespace, config: Any, budget: Any, model: Any, background: Any,
            marks: Optional[StartMarks]) -> tuple[Any, Any, Any]:
    """The campaign (triaged for the SUT's known findings), with its start-up taken out of a timed budget: its
    result, the pictures' collector of its examples, and the background build's record once it is stopped (None
    without one)."""
    from fuzz.campaign import LiveProgress, chain, open_database, pictures, run_triaged
    from fuzz.execution import interrupt, shared
    from fuzz.glossary import Term, see
    from fuzz.judge import explain

    _one_thread_on_cpu(args.sut)
    database = open_database(args.database, config) if args.database is not None else None
    timed = budget.seconds != float("inf")
    spent = time.perf_counter() - (marks.started if marks is not None else time.perf_counter())
    shared().first_answer.driver["search_started"] = time.time()
    if timed:  # start-up (imports, warm-up) comes out of the search time
        budget = budget.with_overrides(seconds=max(0.0, budget.seconds - spent))
        _progress(f"  start-up took {spent:.1f}s of the budget; {budget.seconds:.1f}s left to search")
    live = LiveProgress(budget.seconds if timed else 0.0, enabled=True if args.progress else None)
    collector = pictures.Collector(known=lambda result: explain(args.sut, result) is not None)
    try:
        with interrupt.handled():
            interrupt.on_second(shared().kill_now)
            res = run_triaged(config, budget, seed=args.seed, artifacts_dir=args.artifacts, database=database,
                              progress=None if live.enabled else _progress, observe=chain(live, collector),
                              meta={"config_file": str(args.config[0]) if args.config else None}, sut=args.sut,
                              model=model, readiness=None if background is None else background.readiness,
                              announce=live.write if live.enabled else _progress, tour_share=tour_share(args),
                              fill=not args.no_fill, reuse=reads_database(args), repeat=args.repeat)
    except BaseException:
        if background is not None:
            background.stop()  # else its builder process keeps this one alive until every group is built
        raise
    finally:
        live.close()
    if background is None:
        return res, collector, None
    warm = background.stop()
    r = background.readiness
    built = ("the build finished after " + f"{r.examples_before_built} examples" if r.examples_before_built
             is not None else "the build had not finished")
    _progress(warm.text() if background.thread is None else  # nothing built beside the search
              f"{warm.text()}\n  warm-up: {built}; {r.steered} draws steered to built modes ({see(Term.STEERED)}), "
              f"{r.deferred} "
              f"deferred until their kernels were built, {r.built_first} aimed cases built ahead of it")
    return res, collector, warm


def _report(args: argparse.Namespace, config: Any, res: Any, collector: Any, warm: Any, background: Any,
            marks: Optional[StartMarks]) -> int:
    """The pictures, the summary (text or JSON) and the exit status of one campaign."""
    from fuzz.campaign import coverage_map, pictures, report
    from fuzz.execution import interrupt, shared
    from fuzz.sut import get as get_sut

    report_dir = args.report_dir or Path(args.artifacts) / "report"
    drawn, why_not = pictures.write(collector, config if get_sut(args.sut).capabilities.project_kernels
                                    else None, report_dir)
    heat, _ = coverage_map.write(report.coverage_json(res), report_dir,
                                 stopped="the search stopped at its failure" if res.failure is not None else None)
    drawn += [heat] if heat is not None else []
    data = report.campaign_json(res)
    data["pictures"] = [str(p) for p in drawn] if drawn else f"not drawn: {why_not}"
    if warm is not None:
        data["warmup"] = warm.to_dict()
    if background is not None:
        data["warmup"]["background"] = background.readiness.to_dict(since=None if marks is None else marks.started)
    first, since = shared().first_answer, None if marks is None else marks.started_wall
    if since is not None:
        data["first_answer"] = first.to_dict(since)
    text = (report.campaign_text(res) + ("" if since is None else f"\n  {first.text(since)}")
            + "\n  pictures: " + (", ".join(map(str, drawn)) or f"not drawn ({why_not})"))
    print(json.dumps(data, indent=2, sort_keys=True, default=str) if args.json else text, flush=True)
    if res.interrupted:
        return interrupt.EXIT_STATUS
    if res.ok and not res.judged:
        return 2  # nothing was checked: not a pass
    return 0 if res.ok else 1
