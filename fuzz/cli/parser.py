"""The ``tbe-fuzz`` command line: run, warmup, replay, gate, tune, selftest, mutate, config.

Exit codes: 0 pass (failures, if any, all triaged known findings of the SUT), 1 a case failed
(or a planted fault went unnoticed; for gate and tune, see ``fuzz.cli.gate``), 2 bad usage
(an error naming the option and the value; never a traceback), including a ``--sut`` that is
unknown, not available here, or lacks what the command needs (a KernelConfig for the gate,
planted faults for the self-test), a kernel worker that could not start, or a campaign whose
time ran out before it checked any example (nothing was judged),
130 interrupted by Ctrl-C (``run`` first saves the smallest failure so far and prints its summary).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from fuzz.cli.gate import add_gate_options, add_tune_parser

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
    try:  # made now: a directory that cannot be made is a usage error, not a traceback after the search
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot create {text!r}: {e.strerror or e}") from None
    return path


def _sut_name(text: str) -> str:
    """A SUT name the registry resolves (built-in, ``tbe_fuzz.suts`` entry point, or module:factory)."""
    from fuzz.errors import SUTError
    from fuzz.sut import get

    try:
        get(text)
    except SUTError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _sut_option(p: argparse.ArgumentParser, default: Optional[str] = "triton") -> None:
    p.add_argument("--sut", type=_sut_name, default=default, metavar="NAME",
                   help="system under test: triton (default), fbgemm-cpu, fbgemm-cuda, torch, torchrec-triton, a name "
                        "registered under the tbe_fuzz.suts entry-point group, or module:factory"
                        + ("" if default else " (default: the one the artifact records)"))
    p.add_argument("--sut-source", type=Path, default=None, metavar="DIR",
                   help="where the SUT's code is (torchrec-triton: a torchrec checkout or a folder holding "
                        "torchrec/distributed/triton_tbe/; default: an installed torchrec)"
                        + ("" if default else "; default: the source the artifact records"))


def _with_source(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """``args.sut`` as the address of the SUT loaded from ``--sut-source`` (the name alone without it)."""
    from fuzz.errors import SUTError
    from fuzz.sut import address, get

    source = getattr(args, "sut_source", None)
    if source is None or getattr(args, "sut", None) is None:
        return
    try:
        args.sut = address(args.sut, str(source))
        get(args.sut)
    except SUTError as e:
        parser.error(f"argument --sut-source: {e}")


def _budget_options(p: argparse.ArgumentParser, default: str = "quick") -> None:
    from fuzz.budgets import EXAMPLE_CAP_S
    from fuzz.profiles import GPU_PACK

    p.add_argument("--budget", choices=BUDGET_NAMES, default=default,
                   help=f"search budget (default {default}; quick stays under 2 minutes on the CPU interpreter)")
    p.add_argument("--seed", type=_seed, default=0,
                   help="Hypothesis seed (default 0); it alone decides the examples (the example database is read "
                        "only with --continue). A time-bound run checks as many as the machine's speed allows; its "
                        "summary's --repeat line runs the same examples again")
    p.add_argument("--max-examples", type=_positive_int, default=None,
                   help="cap on drawn examples (run checks its opening tour's cases first); for run, given without "
                        "--time it lifts the time limit: the tour and exactly this many drawn examples for a seed "
                        "(Hypothesis draws differently for another cap: --repeat, not this, repeats a timed run)")
    p.add_argument("--time", type=_positive_float, default=None, metavar="S",
                   help="search time in seconds; a failure then shrinks for the budget's shrink time, and an example "
                        f"still running {EXAMPLE_CAP_S:g}s past either end is stopped, not judged")
    p.add_argument("--pack", type=_positive_int, default=None, metavar="K",
                   help=f"sub-cases one drawn example may hold, checked as one TBE step (default: {GPU_PACK} on a "
                        "GPU and for a SUT that runs natively on the CPU, 1 on the interpreter, where a pack costs "
                        "what its cases cost apart)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    _sanitize_option(p)


def _sanitize_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sanitize", action="store_true",
                   help="check every load, store and atomic of the interpreted kernels (TBE_FUZZ_SANITIZE=1; "
                        "CPU interpreter only)")


def _bound_option(p: argparse.ArgumentParser, default: str = "$TBE_FUZZ_BOUND, else worst") -> None:
    p.add_argument("--bound", choices=("worst", "probabilistic"), default=None,
                   help="accumulation error bound: worst case (valid for any input) or probabilistic "
                        f"(Higham-Mary lambda sqrt(n) u, false alarm <= 1e-6 per check; see docs/design/bounds.md) (default: {default})")


def _model(args: argparse.Namespace):
    from oracles.error_model import ErrorModel

    return None if args.bound is None else ErrorModel(args.bound)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose epilog may be a function, called only when help is printed (the fault
    list needs ``tbe``, which loads torch and Triton: no command should wait for that to parse)."""

    def __init__(self, *args: Any, epilog_fn: Optional[Callable[[], str]] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._epilog_fn = epilog_fn

    def format_help(self) -> str:
        if self._epilog_fn is not None:
            self.epilog = self._epilog_fn()
        return super().format_help()


def _faults_epilog() -> str:
    from fuzz.cli.info import faults_epilog

    return faults_epilog()


def build_parser() -> argparse.ArgumentParser:
    from fuzz.cli.info import version

    parser = _Parser(
        prog="tbe-fuzz", description="Differential fuzzing of a TBE (this project's Triton TBE unless --sut names another).")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    from fuzz.cli.run import add_run_options, add_warmup_parser, fill_option, tour_option

    sub = parser.add_subparsers(dest="command", metavar="{run,warmup,replay,gate,tune,selftest,mutate,config}",
                                parser_class=_Parser)
    sub.required = True

    run = sub.add_parser("run", help="run a campaign under one config", epilog_fn=_faults_epilog)
    _budget_options(run)
    run.add_argument("--config", type=_config_file, default=None, help="KernelConfig JSON (default: defaults)")
    run.add_argument("--artifacts", type=_artifacts_dir, default=Path("fuzz-artifacts"), metavar="DIR",
                     help="where failures and the example database go (default fuzz-artifacts)")
    _sut_option(run)
    add_run_options(run)
    add_warmup_parser(sub, _config_file)
    _bound_option(run)

    rp = sub.add_parser("replay",
                        help="re-run a saved failure (artifact dir or case.json); on an artifacts root, list its cases")
    rp.add_argument("target", type=Path,
                    help="an artifact directory or a case.json; an artifacts root (e.g. fuzz-artifacts) lists the "
                         "cases it holds, with the path to replay each")
    rp.add_argument("--config", type=_config_file, default=None,
                    help="KernelConfig JSON to replay under (default: the artifact's config.json)")
    rp.add_argument("--rematerialize", action="store_true",
                    help="rebuild tensors from the spec instead of the saved tensors.pt")
    rp.add_argument("--json", action="store_true", help="print the result as JSON")
    _bound_option(rp, "the artifact's meta.json, else $TBE_FUZZ_BOUND, else worst")
    _sanitize_option(rp)
    _sut_option(rp, default=None)

    gate = sub.add_parser("gate", help="the verification cascade: a candidate KernelConfig against a baseline")
    add_gate_options(gate, _config_file, _positive_int)
    _budget_options(gate)
    gate.add_argument("--artifacts", type=_artifacts_dir, default=Path("fuzz-artifacts"), metavar="DIR",
                      help="where the candidate's failures go (default fuzz-artifacts)")
    _sut_option(gate)

    add_tune_parser(sub, _config_file, _positive_int, _positive_float, _seed)

    st = sub.add_parser("selftest", help="prove each planted fault is caught on this backend", epilog_fn=_faults_epilog)
    _budget_options(st)
    st.add_argument("--list", action="store_true",
                    help="list the planted faults (name and the bug each plants) and exit")
    st.add_argument("--fault", action="append", default=None, metavar="NAME",
                    help="only this fault (repeatable; default: every known fault)")
    st.add_argument("--artifacts", type=_artifacts_dir, default=None, metavar="DIR",
                    help="save each caught fault's case here, shrunk (default: not saved)")
    st.add_argument("--shrink", action="store_true",
                    help="shrink each caught fault's case for the budget's shrink time (implied by --artifacts); "
                         "by default a self-test asks only whether each fault is caught")
    st.add_argument("--every-detector", action="store_true",
                    help="run every detector of a fault, not only those up to its first catch")
    st.add_argument("--jobs", type=_positive_int, default=None, metavar="N",
                    help="faults checked at once, each in its own process (default: 1 under the interpreter, "
                         "a quarter of the cores up to 4 on a GPU)")
    tour_option(st)
    fill_option(st)
    _sut_option(st)
    from fuzz.cli import mutate as mutate_cli  # mutation testing: options and command live in their own module

    mutate_cli.add_parser(sub, _positive_int, _seed, _positive_float)

    cf = sub.add_parser("config", help="print the default KernelConfig (what --config files change)")
    cf.add_argument("--defaults", action="store_true",
                    help="the default KernelConfig, every field (what it prints without options too)")
    cf.add_argument("--json", action="store_true",
                    help="as the JSON a --config file holds (KernelConfig.load reads it)")
    return parser


def _budget(args: argparse.Namespace):
    """The named budget, fitted to what the SUT's kind of execution affords here, with the command's overrides."""
    from fuzz.budgets import get
    from fuzz.execution import limits

    fitted = get(args.budget, limits(getattr(args, "sut", None)))
    return fitted.with_overrides(seconds=args.time, max_examples=args.max_examples, pack=getattr(args, "pack", None))


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _emit(args: argparse.Namespace, text: str, data: dict) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str) if args.json else text, flush=True)


def _backend_line(sut: str = "triton") -> str:
    from fuzz.sut import get
    from tbe.backend import INTERPRETED

    if sut != "triton":
        target = get(sut)
        return f"SUT {target.name}: {target.description or target.capabilities.describe()}"
    return "CPU, Triton interpreter" if INTERPRETED else "CUDA, compiled Triton"


def _require(parser: argparse.ArgumentParser, name: str, **needs: Any) -> None:
    """Refuse (exit 2, naming --sut) a SUT that is not available here or cannot do what the command needs."""
    from fuzz.errors import SUTError
    from fuzz.sut import require

    try:
        require(name, **needs)
    except SUTError as e:
        parser.error(f"argument --sut: {e}")


def cmd_run(args: argparse.Namespace, parser: argparse.ArgumentParser, marks: Any) -> int:
    from fuzz.cli.run import cmd_run as run

    _require(parser, args.sut, kernel_config=args.config is not None, config=args.config[1] if args.config else None)
    budget = _budget(args)
    if getattr(args, "repeat", None) is not None and args.time is not None:
        parser.error("argument --repeat: not allowed with --time (a repeat is bounded by its counts alone)")
    if getattr(args, "repeat", None) is not None and (args.workers or 1) > 1:
        parser.error("argument --repeat: not allowed with --workers > 1 (it repeats one campaign)")
    if (args.max_examples is not None or getattr(args, "repeat", None) is not None) and args.time is None:  # by counts: reproducible
        budget = budget.with_overrides(seconds=float("inf"))
    return run(args, budget, _backend_line(args.sut), _model(args), marks)


def cmd_replay(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from fuzz.campaign import catalog, replay, report

    if catalog.is_root(args.target):  # a listing, not a verdict: exit 0
        found = catalog.entries(args.target)
        _emit(args, catalog.text(args.target, found), catalog.to_json(args.target, found))
        return 0
    try:
        res = replay.replay(args.target, args.config[0] if args.config else None, args.rematerialize, _model(args),
                            sut=args.sut, sut_source=None if args.sut_source is None else str(args.sut_source))
    except (ValueError, TypeError, OSError) as e:
        parser.error(f"argument target: cannot replay {str(args.target)!r}: {e}")
    _emit(args, report.replay_text(res), report.replay_json(res))
    return 0 if res.ok else 1


def cmd_gate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from fuzz.cli.gate import cmd_gate as run

    from fuzz.cli.gate import sides

    try:
        base_sut, cand_sut = sides(args)
    except ValueError as e:
        parser.error(str(e))
    for side in (base_sut, cand_sut or base_sut):
        _require(parser, side, kernel_config=cand_sut is None)
    args.sut = base_sut
    return run(args, _budget(args), _progress, _backend_line(args.sut))


def cmd_config(args: argparse.Namespace) -> int:
    from fuzz.cli import info

    sys.stdout.write(info.default_config_json() if args.json else info.default_config_text() + "\n")
    sys.stdout.flush()
    return 0


def cmd_selftest(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from fuzz.cli import info
    from fuzz.selftest import report as selftest_report
    from fuzz.selftest import all_ok, default_jobs, run_selftest
    from tbe import faults

    if args.list:
        _emit(args, info.faults_text(), info.faults())
        return 0
    _require(parser, args.sut, planted_faults=True)
    for name in args.fault or ():
        if name not in faults.KNOWN:
            parser.error(f"argument --fault: unknown fault {name!r} (known: {', '.join(sorted(faults.KNOWN))})")
    budget = _budget(args)
    if args.time is None:  # per fault: a short campaign each
        budget = budget.with_overrides(seconds=min(budget.seconds, 60.0))
    jobs = args.jobs or default_jobs()
    shrink = args.shrink or args.artifacts is not None
    _progress(f"tbe-fuzz selftest: up to {budget.seconds:g}s per fault, seed {args.seed}, {_backend_line(args.sut)}"
              + (", the search alone (no opening tour)" if args.no_tour else "")
              + (", no aimed cases" if args.no_fill else "")
              + (f", {jobs} faults at once" if jobs > 1 else "") + (", shrinking each catch" if shrink else ""))
    from fuzz.cli.run import tour_share

    results = run_selftest(budget, seed=args.seed, only=args.fault, artifacts_dir=args.artifacts,
                           progress=_progress, sut=args.sut, tour_share=tour_share(args), shrink=shrink,
                           every_detector=args.every_detector, jobs=jobs, fill=not args.no_fill)
    _emit(args, selftest_report.selftest_text(results), selftest_report.selftest_json(results))
    return 0 if all_ok(results) else 1


def _cases_here(argv: list[str]) -> bool:
    """Whether ``argv`` checks cases in one worker of this process (``replay``, or ``run`` without ``--workers N``
    > 1), read before the parser exists (building it imports torch): that worker can start at once."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("command", nargs="?")
    pre.add_argument("--workers")
    known, _ = pre.parse_known_args(argv)
    return known.command == "replay" or (known.command == "run" and known.workers in (None, "1"))


def main(argv: Optional[Sequence[str]] = None) -> int:
    import time

    started, started_wall = time.perf_counter(), time.time()  # run's --time counts from here (fuzz.cli.run)
    if argv is None and _cases_here(sys.argv[1:]):  # a command, not a call from a program or test
        from fuzz.execution import start_early

        start_early()  # its imports overlap this process's; its supervisor sends it the settings made below
    parser = build_parser()
    args = parser.parse_args(argv)
    from fuzz import profiles

    try:
        profiles.load()  # the Hypothesis profile $HYPOTHESIS_PROFILE names (settings a campaign leaves unset)
    except ValueError as e:
        parser.error(str(e))
    _with_source(args, parser)
    from fuzz.cli.run import StartMarks

    marks = StartMarks(started, started_wall, parsed_wall=time.time())  # imports and arguments done
    try:
        from fuzz.memcheck import weak_memory

        weak_memory.enable_from_env()  # TBE_WEAK_MEMORY=1: every interpreted kernel runs in the weak-memory mode
    except (ValueError, RuntimeError) as e:
        parser.error(f"TBE_WEAK_MEMORY: {e}")
    try:
        return _dispatch(args, parser, marks)
    except KeyboardInterrupt:
        print("tbe-fuzz: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head and friends
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _dispatch(args: argparse.Namespace, parser: argparse.ArgumentParser, marks: Any) -> int:
    from fuzz.execution import forced_crash
    from fuzz.memcheck import sanitizer
    from fuzz.errors import WorkerError

    try:
        forced_crash.from_env()
        sanitizer.requested()
    except ValueError as e:
        parser.error(str(e))
    try:
        return _command(args, parser, marks)
    except WorkerError as e:  # the harness could not run the kernels: not a verdict on them
        print(f"tbe-fuzz: not run: {e}", file=sys.stderr)
        return 2


def _kernel_cache(args: argparse.Namespace) -> None:
    """One build per kernel on this machine, and with ``--database redis://`` kernels shared through that
    server (``fuzz.compile.kernel_cache``), for this process and every one it starts."""
    from fuzz.campaign import is_redis
    from fuzz.compile import kernel_cache

    database = getattr(args, "database", None)
    line = kernel_cache.install(database if database and is_redis(database) else None)
    if database and is_redis(database):
        _progress(line)


def _command(args: argparse.Namespace, parser: argparse.ArgumentParser, marks: Any) -> int:
    _kernel_cache(args)
    if getattr(args, "sanitize", False):
        from tbe.backend import INTERPRETED

        if not INTERPRETED:
            parser.error("argument --sanitize: the sanitizer checks the Triton interpreter's accesses and kernels "
                         "here are compiled; run the replay under compute-sanitizer instead")
        from fuzz.memcheck import SANITIZE

        SANITIZE.set("1")  # read by every worker the supervisor starts
    if args.command == "run":
        return cmd_run(args, parser, marks)
    if args.command == "warmup":
        from fuzz.cli.run import cmd_warmup

        return cmd_warmup(args)
    if args.command == "replay":
        return cmd_replay(args, parser)
    if args.command == "gate":
        return cmd_gate(args, parser)
    if args.command == "tune":
        from fuzz.cli.gate import cmd_tune

        return cmd_tune(args, parser, _progress)
    if args.command == "mutate":
        from fuzz.cli import mutate as mutate_cli

        return mutate_cli.command(args, parser)
    if args.command == "config":
        return cmd_config(args)
    return cmd_selftest(args, parser)


if __name__ == "__main__":
    raise SystemExit(main())
