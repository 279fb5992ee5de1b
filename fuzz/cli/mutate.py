"""``tbe-fuzz mutate``: its options and its command (the runner is ``fuzz.mutate.runner``)."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from pathlib import Path

OPERATORS = ("cmp", "arith", "bitwise", "bool", "unary", "const", "other", "mask", "where", "loop", "aug", "if",
             "minmax", "remove", "atomic", "barrier")


def _operators(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [n for n in names if n not in OPERATORS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown operator {bad[0] if bad else text!r} (known: {', '.join(OPERATORS)})")
    return names


def add_parser(sub, positive_int, seed, positive_float) -> None:
    m = sub.add_parser("mutate", help="mutation testing: how many kernel mutants does the fuzz check catch")
    m.add_argument("--mutants", type=positive_int, default=100, metavar="N", help="sites to mutate (default 100)")
    m.add_argument("--seed", type=seed, default=0, help="seed of the site sample and of each campaign (default 0)")
    m.add_argument("--check", choices=("campaign", "pytest-fuzz"), default="campaign",
                   help="campaign: tbe-fuzz run --budget B --time S (no shrinking); pytest-fuzz: pytest -m fuzz, ci profile")
    m.add_argument("--budget", choices=("quick", "ci", "nightly"), default="ci", help="campaign budget (default ci)")
    m.add_argument("--time", type=positive_float, default=60.0, metavar="S",
                   help="campaign search seconds per mutant (default 60)")
    m.add_argument("--max-examples", type=positive_int, default=None, metavar="N",
                   help="campaign example cap per mutant: the verdict then does not depend on machine load")
    m.add_argument("--timeout", type=positive_float, default=None, metavar="S",
                   help="hard limit per check, tried twice (doubled) before a mutant is a timeout "
                        "(default: 4x the unmutated check's time, at least 5 min more)")
    m.add_argument("-j", "--jobs", type=positive_int, default=None,
                   help="mutants at once (default: one per GPU, else 2)")
    m.add_argument("--out", type=Path, default=Path("mutation-report"), metavar="PATH",
                   help="writes PATH.json, PATH.md, PATH.jsonl (resumable state) and PATH.probe.json")
    m.add_argument("--operators", type=_operators, default=None, metavar="A,B", help="only these operator families")
    m.add_argument("--files", default=None, metavar="SUBSTR", help="only sites in files whose path contains SUBSTR")
    m.add_argument("--site", action="append", default=None, metavar="ID",
                   help="only this site (an id from a report or --list; repeatable): re-check survivors")
    m.add_argument("--list", action="store_true", help="print the sampled mutants and their diffs, run nothing")
    m.add_argument("--fresh", action="store_true", help="discard PATH.jsonl from an earlier run")
    m.add_argument("--no-equivalence", action="store_true", help="skip the probe-batch equivalence test")
    m.add_argument("--keep", action="store_true", help="keep each mutant's copy (in the printed work dir)")


def _gpus() -> list[str]:
    from tbe.backend import HAS_CUDA, INTERPRETED

    if not HAS_CUDA or INTERPRETED:
        return []
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from fuzz.mutate import operators as mutants
    from fuzz.mutate import report
    from fuzz.mutate import Check, Runner, check_sources_hash, probe_hash, sources_hash

    root = Path.cwd()
    if not (root / mutants.KERNEL_FILES).is_dir():
        parser.error(f"tbe-fuzz mutate runs from the project root (no {mutants.KERNEL_FILES}/ under {root})")
    population = mutants.all_sites(root)
    if args.operators:
        population = [s for s in population if s.operator in args.operators]
    if args.files:
        population = [s for s in population if args.files in s.path]
    if not population:
        parser.error("argument --operators/--files: no mutation site matches")
    if args.site:
        unknown = sorted(set(args.site) - {s.id for s in population})
        if unknown:
            parser.error(f"argument --site: no such site {unknown[0]!r} in the current sources")
        population = [s for s in population if s.id in set(args.site)]
    sites = mutants.sample(population, args.mutants, args.seed)
    if args.list:
        for s in sites:
            print(f"{s.id}  {s.function}  {s.description}")
            print(mutants.diff((root / s.path).read_text(), s), end="")
        print(f"{len(sites)} of {len(population)} sites")
        return 0
    check = Check(args.check, args.budget, args.time, args.seed, args.timeout or 0.0, args.max_examples or 0)
    gpus = _gpus()
    jobs = args.jobs or (len(gpus) or 2)
    header = {"seed": args.seed, "mutants": len(sites), "population": len(population), "sources": sources_hash(root),
              "sites": sorted(args.site or []),
              "check_sources": check_sources_hash(root), "probe": probe_hash(root),
              "operators": list(args.operators or []), "files": args.files,
              "check": {"kind": check.kind, "budget": check.budget, "seconds": check.seconds, "seed": check.seed,
                        "max_examples": check.max_examples, "timeout": check.timeout},
              "equivalence": not args.no_equivalence}
    state = args.out.with_suffix(".jsonl")
    if args.fresh and state.exists():
        state.unlink()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    cmdline = "tbe-fuzz " + " ".join(shlex.quote(a) for a in sys.argv[1:] if a not in ("--fresh",))
    runner = Runner(root, check, jobs, args.out, equivalence=not args.no_equivalence, keep=args.keep, gpus=gpus,
                    progress=lambda line: print(line, file=sys.stderr, flush=True))
    try:
        ok, secs, tail = runner.baseline()
        if not ok:
            print(f"tbe-fuzz mutate: the check fails on the unmutated code ({secs:.0f}s); no score can be "
                  f"measured:\n{tail}", file=sys.stderr)
            return 1
        runner.check = check = dataclasses.replace(check, baseline_seconds=secs)
        print(f"tbe-fuzz mutate: the check passes on the unmutated code ({secs:.0f}s); hard limit "
              f"{check.limit:.0f}s", file=sys.stderr)
        try:
            results = runner.run(sites, header, lambda rs: report.write(args.out, rs, header, len(population), cmdline))
        except ValueError as e:
            parser.error(f"argument --out: {e}")
        report.write(args.out, results, header, len(population), cmdline)
    finally:
        if not args.keep:
            runner.cleanup()
    print(report.text(results))
    print(f"report: {args.out.with_suffix('.md')} and {args.out.with_suffix('.json')}")
    return 0
