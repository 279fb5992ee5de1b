"""The ``tbe-fuzz`` command line: run, warmup, replay, gate, selftest, mutate.

Exit codes: 0 pass, 1 a case failed (or a planted fault went unnoticed), 2 bad usage
(an error naming the option and the value; never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

BUDGET_NAMES = ("quick", "ci", "nightly")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2^32), got {text!r}") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2^32), got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _config_file(text: str):
    """Load a KernelConfig JSON file; every problem becomes an argparse error naming the file."""
    from tbe import KernelConfig

    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    try:
        return path, KernelConfig.load(path)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not valid JSON ({e})") from None
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid KernelConfig: {e}") from None
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot read {text!r}: {e}") from None


def _artifacts_dir(text: str) -> Path:
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a directory")
    return path


def _budget_options(p: argparse.ArgumentParser, default: str = "quick") -> None:
    p.add_argument("--budget", choices=BUDGET_NAMES, default=default,
                   help=f"search budget (default {default}; quick stays under 2 minutes on the CPU interpreter)")
    p.add_argument("--seed", type=_seed, default=0, help="Hypothesis seed (default 0: runs are reproducible)")
    p.add_argument("--max-examples", type=_positive_int, default=None, help="cap on examples")
    p.add_argument("--time", type=_positive_float, default=None, metavar="S", help="search time in seconds")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tbe-fuzz", description="Differential fuzzing of the Triton TBE.")
    from fuzz.run_cmd import add_run_options, add_warmup_parser

    sub = parser.add_subparsers(dest="command", metavar="{run,warmup,replay,gate,selftest,mutate}")
    sub.required = True

    run = sub.add_parser("run", help="run a campaign under one config")
    _budget_options(run)
    run.add_argument("--config", type=_config_file, default=None, help="KernelConfig JSON (default: defaults)")
    run.add_argument("--artifacts", type=_artifacts_dir, default=Path("fuzz-artifacts"), metavar="DIR",
                     help="where failures and the example database go (default fuzz-artifacts)")
    add_run_options(run)
    add_warmup_parser(sub, _config_file)

    rp = sub.add_parser("replay", help="re-run a saved failure (artifact dir or case.json)")
    rp.add_argument("target", type=Path, help="an artifact directory or a case.json")
    rp.add_argument("--config", type=_config_file, default=None,
                    help="KernelConfig JSON to replay under (default: the artifact's config.json)")
    rp.add_argument("--rematerialize", action="store_true",
                    help="rebuild tensors from the spec instead of the saved tensors.pt")
    rp.add_argument("--json", action="store_true", help="print the result as JSON")

    gate = sub.add_parser("gate", help="check a candidate KernelConfig against a baseline")
    gate.add_argument("--baseline", type=_config_file, required=True, help="baseline KernelConfig JSON")
    gate.add_argument("--candidate", type=_config_file, required=True, help="candidate KernelConfig JSON")
    _budget_options(gate)
    gate.add_argument("--artifacts", type=_artifacts_dir, default=Path("fuzz-artifacts"), metavar="DIR",
                      help="where the candidate's failures go (default fuzz-artifacts)")

    st = sub.add_parser("selftest", help="prove each planted fault is caught on this backend")
    _budget_options(st)
    st.add_argument("--fault", action="append", default=None, metavar="NAME",
                    help="only this fault (repeatable; default: every known fault)")
    st.add_argument("--artifacts", type=_artifacts_dir, default=None, metavar="DIR",
                    help="save each caught fault's shrunk case here (default: not saved)")
    from fuzz import mutate_cli  # mutation testing: options and command live in their own module

    mutate_cli.add_parser(sub, _positive_int, _seed, _positive_float)
    return parser


def _budget(args: argparse.Namespace):
    from fuzz.budgets import get

    return get(args.budget).with_overrides(seconds=args.time, max_examples=args.max_examples)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _emit(args: argparse.Namespace, text: str, data: dict) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str) if args.json else text, flush=True)


def _backend_line() -> str:
    from tbe.backend import INTERPRETED

    return "CPU, Triton interpreter" if INTERPRETED else "CUDA, compiled Triton"


def cmd_run(args: argparse.Namespace) -> int:
    from fuzz.run_cmd import cmd_run as run

    return run(args, _budget(args), _backend_line())


def cmd_replay(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from fuzz import report
    from fuzz.replay import replay

    try:
        res = replay(args.target, args.config[0] if args.config else None, args.rematerialize)
    except (ValueError, TypeError, OSError) as e:
        parser.error(f"argument target: cannot replay {str(args.target)!r}: {e}")
    _emit(args, report.replay_text(res), report.replay_json(res))
    return 0 if res.ok else 1


def cmd_gate(args: argparse.Namespace) -> int:
    from fuzz import report
    from fuzz.gate import run_gate

    budget = _budget(args)
    _progress(f"tbe-fuzz gate: budget {budget.name}, seed {args.seed}, {_backend_line()}")
    res = run_gate(args.baseline[1], args.candidate[1], budget, seed=args.seed, artifacts_dir=args.artifacts,
                   progress=_progress)
    _emit(args, report.gate_text(res), report.gate_json(res))
    return 0 if res.ok else 1


def cmd_selftest(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from fuzz import report
    from fuzz.selftest import all_ok, run_selftest
    from tbe import faults

    for name in args.fault or ():
        if name not in faults.KNOWN:
            parser.error(f"argument --fault: unknown fault {name!r} (known: {', '.join(sorted(faults.KNOWN))})")
    budget = _budget(args)
    if args.time is None:  # per fault: a short campaign each
        budget = budget.with_overrides(seconds=min(budget.seconds, 60.0))
    _progress(f"tbe-fuzz selftest: up to {budget.seconds:g}s per fault, seed {args.seed}, {_backend_line()}")
    results = run_selftest(budget, seed=args.seed, only=args.fault, artifacts_dir=args.artifacts,
                           progress=_progress)
    _emit(args, report.selftest_text(results), report.selftest_json(results))
    return 0 if all_ok(results) else 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _dispatch(args, parser)
    except KeyboardInterrupt:
        print("tbe-fuzz: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head and friends
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _dispatch(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.command == "run":
        return cmd_run(args)
    if args.command == "warmup":
        from fuzz.run_cmd import cmd_warmup

        return cmd_warmup(args)
    if args.command == "replay":
        return cmd_replay(args, parser)
    if args.command == "gate":
        return cmd_gate(args)
    if args.command == "mutate":
        from fuzz import mutate_cli

        return mutate_cli.command(args, parser)
    return cmd_selftest(args, parser)


if __name__ == "__main__":
    raise SystemExit(main())
