"""Options and commands of ``tbe-fuzz gate`` (the verification cascade) and ``tbe-fuzz tune``.

Gate exit codes: 0 ACCEPT, or UNVERIFIED with levels (a)-(c) passed and (d) not run (no GPU)
unless --require-perf; 1 KEEP or any other UNVERIFIED; 2 bad usage. Tune: 0 when a candidate
passed the gate, 1 when the baseline stays, 2 bad usage (or no Optuna, no GPU, or a --storage that
cannot be opened).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional


def _levels(text: str) -> str:
    if not text or any(c not in "abcd" for c in text) or len(set(text)) != len(text):
        raise argparse.ArgumentTypeError(f"expected some of the letters abcd (e.g. abcd or ad), got {text!r}")
    return "".join(sorted(text))


def _gamma(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a speedup factor such as 1.03, got {text!r}") from None
    if not 0.5 <= value <= 10:
        raise argparse.ArgumentTypeError(f"expected a speedup factor in [0.5, 10], got {text!r}")
    return value


def _shapes(text: str):
    from fuzz.gate import load_shapes

    try:
        return text, load_shapes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _candidate_file(text: str):
    """The candidate's JSON object; whether it is a valid KernelConfig is level (a)'s question."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not valid JSON ({e})") from None
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot read {text!r}: {e}") from None
    if not isinstance(data, dict):
        raise argparse.ArgumentTypeError(f"{text!r}: a KernelConfig JSON must be an object, got "
                                         f"{type(data).__name__}")
    if data.get("faults"):  # planted faults need the opt-in here as in run and replay: refused, not KEEP
        from tbe import faults

        try:
            faults.check_allowed(tuple(data["faults"]))
        except (TypeError, ValueError) as e:
            raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None
    return path, data


def _storage(text: str) -> str:
    from fuzz.tune import check_url

    try:
        return check_url(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _dir(text: str) -> Path:
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a directory")
    return path


def add_gate_options(gate: argparse.ArgumentParser, config_file, positive_int) -> None:
    gate.add_argument("--baseline", type=config_file, default=None,
                      help="baseline KernelConfig JSON (default: the defaults, when the two sides are two sources)")
    gate.add_argument("--candidate", type=_candidate_file, default=None,
                      help="candidate KernelConfig JSON (default: the baseline's, when the two sides are two sources)")
    gate.add_argument("--baseline-source", type=Path, default=None, metavar="DIR",
                      help="gate a code change: the baseline's source tree of a --sut that loads one (torchrec-triton)")
    gate.add_argument("--candidate-source", type=Path, default=None, metavar="DIR",
                      help="the candidate's source tree (with --baseline-source)")
    gate.add_argument("--seeds", type=positive_int, default=3, metavar="N",
                      help="level (b): seeds --seed, --seed+1, ... (default 3)")
    gate.add_argument("--levels", type=_levels, default="abcd", help="levels to run (default abcd)")
    gate.add_argument("--gamma", type=_gamma, default=1.03,
                      help="level (d): least geometric-mean speedup (default 1.03; 1 for correctness changes)")
    gate.add_argument("--shapes", type=_shapes, default=None, metavar="PRESET|FILE",
                      help="level (d) shapes: quick (default), bands, bench-lite, bench, or a JSON file")
    gate.add_argument("--rounds", type=positive_int, default=5, help="level (d): interleaved rounds (default 5)")
    gate.add_argument("--oracle-cases", type=positive_int, default=None, metavar="N",
                      help="level (c): only the first N matrix cases (default all)")
    gate.add_argument("--keep-going", action="store_true", help="run every level even after one fails")
    gate.add_argument("--require-perf", action="store_true",
                      help="exit 1 when level (d) did not run (e.g. no GPU) instead of 0")
    gate.add_argument("--report", type=_dir, default=None, metavar="DIR",
                      help="write report.json, report.md and both configs here")


def sides(args: argparse.Namespace) -> tuple[str, Optional[str]]:
    """(baseline SUT address, candidate SUT address where it differs) of the gate's options; ValueError naming
    the option when they do not make two sides."""
    from fuzz.sut import address, split_address

    name = split_address(args.sut)[0]
    if (args.baseline_source is None) != (args.candidate_source is None):
        raise ValueError("--baseline-source and --candidate-source go together (a code change has two sides)")
    if args.baseline_source is None:
        if args.baseline is None or args.candidate is None:
            raise ValueError("give --baseline and --candidate configs, or --baseline-source and --candidate-source")
        return args.sut, None
    return address(name, str(args.baseline_source)), address(name, str(args.candidate_source))


def cmd_gate(args: argparse.Namespace, budget, progress, backend_line: str) -> int:
    from fuzz.gate import report as cascade_report
    from fuzz.gate import CascadeOptions, run_cascade
    from tbe import KernelConfig

    name, shapes = args.shapes or _shapes("quick")
    base_sut, cand_sut = sides(args)
    baseline = args.baseline[1] if args.baseline else KernelConfig()
    candidate = args.candidate[1] if args.candidate else baseline.to_dict()
    opts = CascadeOptions(budget=budget, seeds=tuple(args.seed + i for i in range(args.seeds)), levels=args.levels,
                          gamma=args.gamma, shapes=shapes, shapes_name=name, rounds=args.rounds,
                          oracle_cases=args.oracle_cases, artifacts_dir=args.artifacts, keep_going=args.keep_going,
                          require_perf=args.require_perf, sut=base_sut, candidate_sut=cand_sut)
    progress(f"tbe-fuzz gate: levels {args.levels}, seeds {list(opts.seeds)}, budget {budget.name} "
             f"({budget.seconds:g}s per seed and phase), gamma {args.gamma:g}, {backend_line}"
             + ("" if cand_sut is None else f"; baseline {base_sut}, candidate {cand_sut}"))
    res = run_cascade(baseline, candidate, opts, progress)
    if args.report is not None:
        for p in cascade_report.write(res, args.report):
            progress(f"wrote {p}")
    if args.json:
        print(json.dumps(cascade_report.to_json(res), indent=2, sort_keys=True, default=str), flush=True)
    else:
        print(cascade_report.text(res), flush=True)
    return res.exit_code


def add_tune_parser(sub, config_file, positive_int, positive_float, seed) -> None:
    tune = sub.add_parser("tune", help="search KernelConfig for speed on a GPU, then gate the best")
    tune.add_argument("--baseline", type=config_file, default=None, help="KernelConfig JSON (default: defaults)")
    tune.add_argument("--shapes", type=_shapes, default=None, metavar="PRESET|FILE",
                      help="shapes to tune for: quick (default), bands, bench-lite, bench, or a JSON file")
    tune.add_argument("--time", type=positive_float, default=240.0, metavar="S",
                      help="wall-clock budget in seconds, search and verification together (default 240)")
    tune.add_argument("--trials", type=positive_int, default=None, help="cap on search trials")
    tune.add_argument("--seed", type=seed, default=0, help="sampler seed (default 0)")
    tune.add_argument("--fields", default=None, help="comma-separated fields to search (default: all searchable)")
    tune.add_argument("--gamma", type=_gamma, default=1.03, help="the gate's least speedup (default 1.03)")
    tune.add_argument("--verify-top", type=positive_int, default=2, metavar="K",
                      help="gate up to K best trials, best first, until one passes (default 2)")
    tune.add_argument("--worst-floor", type=positive_float, default=0.9, metavar="X",
                      help="do not gate a trial whose slowest shape ran below X times the baseline in the "
                           "search: the gate rejects a per-shape slowdown (default 0.9)")
    tune.add_argument("--out", type=_dir, default=Path("tune-out"), metavar="DIR",
                      help="where tune.json, tune.md, winner.json and the gate reports go (default tune-out)")
    tune.add_argument("--storage", type=_storage, default=None, metavar="redis://HOST:PORT/DB|URL|FILE",
                      help="keep Optuna's study in Redis, an SQLAlchemy database (sqlite:///tune.db) or a journal "
                           "file, so processes on several GPUs or hosts tuning the same baseline, shapes and fields "
                           "run trials of one study side by side (default: this process only)")


def cmd_tune(args: argparse.Namespace, parser: argparse.ArgumentParser, progress) -> int:
    from fuzz.tune import search as tune
    from fuzz.tune import report as tune_report
    from fuzz.gate import gpu_unavailable
    from fuzz.tune import searched_fields
    from tbe import KernelConfig

    why = tune.optuna_missing() or gpu_unavailable()
    if why is not None:
        print(f"tbe-fuzz tune: cannot run: {why}", file=sys.stderr)
        return 2
    if args.storage is not None:
        from fuzz.tune import open_storage

        try:
            open_storage(args.storage)
        except Exception as e:  # noqa: BLE001  (any failure to reach the study is a reason not to start)
            print(f"tbe-fuzz tune: cannot run: --storage {args.storage}: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
    name, shapes = args.shapes or _shapes("quick")
    fields = None if args.fields is None else [f.strip() for f in args.fields.split(",") if f.strip()]
    try:
        searched_fields(shapes, fields)
    except ValueError as e:
        parser.error(f"argument --fields: {e}")
    baseline = args.baseline[1] if args.baseline else KernelConfig()
    opts = tune.TuneOptions(shapes=shapes, seconds=args.time, trials=args.trials, seed=args.seed, fields=fields,
                            gamma=args.gamma, verify_top=args.verify_top, worst_floor=args.worst_floor, out=args.out,
                            storage=args.storage)
    progress(f"tbe-fuzz tune: {len(shapes)} shapes ({name}), {args.time:g}s, gamma {args.gamma:g}")
    res = tune.run_tune(baseline, opts, progress=progress)
    for p in tune_report.write(res, args.out):
        progress(f"wrote {p}")
    print(tune_report.text(res), flush=True)
    return 0 if res.winner is not None else 1
