"""``tbe-fuzz tune``: search KernelConfig for speed on given shapes (Optuna's TPE, one group of fields at a time),
then gate the best candidates through the cascade; the design and its time split: docs/design/execution.md."""

from __future__ import annotations

import dataclasses
import math
import os
import random
import socket
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from fuzz.gate import CascadeOptions, CascadeResult, run_cascade
from fuzz.gate import DEFAULT_GAMMA
from fuzz.status import Decision
from fuzz.gate import PRESETS, PerfShape
from fuzz.tune.space import active_groups, group_of, hint_configs, params_of, searched_fields, suggest
from fuzz.tune.storage import open_storage, open_study, study_name
from tbe import KernelConfig

OPTUNA_PIN = "optuna==5.0.0"
Measure = Callable[[KernelConfig, Callable[[int, float], bool]], float]
# Verifying one candidate with the full cascade on a warm H200: the gate of the defaults took (a) 16 s,
# (c) 43 s and (d) 6 s with every kernel already built (gate_defaults_h200.json); in the tune run from the
# pre-tuning defaults, (a)-(c) of trial 97 and 4 of its 11 (d) shapes (each compiling the candidate's
# kernels) filled 121 s. So (a), (c) and (d) take about CASCADE_FIXED_S, and (b) runs two phases per
# seed of at least B_PHASE_S each.
CASCADE_FIXED_S = 150.0
B_PHASE_S = 5.0


@dataclasses.dataclass
class TuneOptions:
    shapes: Sequence[PerfShape]
    seconds: float = 240.0
    search_share: float = 0.3         # least share of --time for the search (see search_seconds)
    trials: Optional[int] = None      # cap on trials
    seed: int = 0
    fields: Optional[Sequence[str]] = None
    gamma: float = DEFAULT_GAMMA
    rounds: int = 3                   # interleaved rounds per trial measurement
    target_ms: float = 8.0
    verify_top: int = 2
    worst_floor: float = 0.9          # a trial whose slowest shape ran below this in the search is not verified
    gate_seeds: Sequence[int] = (0, 1, 2)
    out: Optional[Path] = None
    storage: Optional[str] = None     # where the study lives (fuzz.tune.storage); None: this process only


@dataclasses.dataclass
class Trial:
    number: int
    origin: str                   # "baseline", "hint" or "search"
    config: KernelConfig
    value: Optional[float]        # geometric-mean speedup; None when pruned before the end
    state: str
    seconds: float
    error: Optional[str] = None
    worst: Optional[float] = None  # slowest shape and phase in the search (speedup), where measured
    worker: Optional[str] = None   # "host:pid" of the process that ran it, when another process did (--storage)


@dataclasses.dataclass
class TuneResult:
    baseline: KernelConfig
    options: TuneOptions
    trials: list[Trial] = dataclasses.field(default_factory=list)
    verified: list[tuple[Trial, CascadeResult]] = dataclasses.field(default_factory=list)
    winner: Optional[Trial] = None
    notes: list[str] = dataclasses.field(default_factory=list)
    search_seconds: float = 0.0
    seconds: float = 0.0
    study_name: Optional[str] = None  # the shared study's name (--storage)

    @property
    def ranked(self) -> list[Trial]:
        done = [t for t in self.trials if t.value is not None and t.origin != "baseline" and t.error is None]
        return sorted(done, key=lambda t: -t.value)

    @property
    def aa_value(self) -> Optional[float]:
        """The baseline trial's speedup against itself: how far from 1.0 the tuner's noise reaches."""
        base = [t for t in self.trials if t.origin == "baseline" and t.value is not None]
        return base[0].value if base else None


def optuna_missing() -> Optional[str]:
    try:
        import optuna  # noqa: F401
    except ImportError:
        return f"tbe-fuzz tune needs {OPTUNA_PIN} (pip install {OPTUNA_PIN})"
    return None


def gpu_measure(baseline: KernelConfig, opts: TuneOptions) -> Measure:
    """A trial's measurement on the GPU: every shape, both phases, against cached baseline modules."""
    import torch

    from fuzz.gate import BaselineCache, time_shape
    from fuzz.tune.warm import TrialWarmer

    cache = BaselineCache(baseline, torch.device("cuda"))
    warmer = TrialWarmer(opts.shapes)

    def measure(config: KernelConfig, report: Callable[[int, float], bool]) -> float:
        warmer.warm(config)  # compile the trial's new kernels in parallel; timing then only loads them
        logs: list[float] = []
        measure.last_worst = None  # type: ignore[attr-defined]
        for i, shape in enumerate(opts.shapes):
            for e in time_shape(shape, baseline, config, torch.device("cuda"), opts.rounds, opts.target_ms, cache):
                if not e.ok:
                    raise RuntimeError(f"{e.shape} {e.phase}: {e.error}")
                logs.append(math.log(e.speedup))
            measure.last_worst = math.exp(min(logs))  # type: ignore[attr-defined]
            if not report(i, math.exp(sum(logs) / len(logs))):
                return float("nan")
        return math.exp(sum(logs) / len(logs))

    measure.cache = cache  # type: ignore[attr-defined]
    measure.close = warmer.close  # type: ignore[attr-defined]
    return measure


def worker_id() -> str:
    """``host:pid`` of this process (read at each call: a forked child is another worker)."""
    return f"{socket.gethostname()}:{os.getpid()}"


ATTR = "tbe_fuzz"  # a finished trial's record in the study's user attributes: what other processes read


def _record_attrs(record: Trial) -> dict:
    return {"config": record.config.to_json(), "origin": record.origin, "state": record.state,
            "seconds": record.seconds, "error": record.error, "worst": record.worst, "worker": worker_id()}


def _trial_of(frozen) -> Optional[Trial]:
    """A finished trial of another process, from its record; None while it runs."""
    a = frozen.user_attrs.get(ATTR)
    if a is None:
        return None
    value = frozen.value if frozen.state.name == "COMPLETE" else None
    return Trial(frozen.number, a["origin"], KernelConfig.from_json(a["config"]), value, a["state"], a["seconds"],
                 a["error"], a["worst"], worker=a["worker"])


def search(baseline: KernelConfig, opts: TuneOptions, measure: Measure, deadline: float,
           progress: Optional[Callable[[str], None]] = None) -> list[Trial]:
    """Run the Optuna study until ``deadline`` (time.monotonic()) or the trial cap (this process's trials).

    Returns every finished trial of the study by number: this process's, and with ``opts.storage``
    also those other processes finished (``Trial.worker`` set)."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    fields = searched_fields(opts.shapes, opts.fields)
    groups = active_groups(fields)
    storage = None if opts.storage is None else open_storage(opts.storage)
    seed = opts.seed if storage is None else random.Random(f"{opts.seed}:{worker_id()}").randrange(2**31)
    tpe = optuna.samplers.TPESampler(seed=seed)
    name = study_name(baseline, opts.shapes, fields)
    study, created = open_study(storage, name, tpe,
                                optuna.pruners.MedianPruner(n_startup_trials=4, n_warmup_steps=2))
    if progress is not None and storage is not None:
        progress(f"  study {name} at {opts.storage}: {'created' if created else 'joined'}, "
                 f"{len(study.trials)} trials so far")
    if created:
        hints = hint_configs(baseline, fields)
        for origin, cfg in [("baseline", baseline)] + [("hint", h) for h in hints]:
            study.enqueue_trial(params_of(cfg, baseline, opts.shapes, fields), user_attrs={"origin": origin})
    base_params = params_of(baseline, baseline, opts.shapes, fields)
    trials: list[Trial] = []
    state = {"origin": "search", "repeats": 0}

    def timed(key: str) -> Optional[tuple[float, Optional[float]]]:
        """Value and slowest shape of a config some process already timed."""
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            a = t.user_attrs.get(ATTR)
            if a is not None and a["config"] == key and a["origin"] != "repeat":
                return t.value, a["worst"]
        return None

    def objective(trial) -> float:
        t0 = time.perf_counter()
        cfg = suggest(trial, baseline, opts.shapes, fields)
        record = Trial(trial.number, trial.user_attrs.get("origin", state["origin"]), cfg, None, "running", 0.0)
        trials.append(record)
        known = timed(cfg.to_json())
        if known is not None:  # the block-wise sampler proposed a config already timed: reuse its value
            record.origin, record.state = "repeat", "repeat"
            record.value, record.worst = known
            state["repeats"] += 1
            trial.set_user_attr(ATTR, _record_attrs(record))
            return record.value
        state["repeats"] = 0

        def report(step: int, value: float) -> bool:
            trial.report(value, step)
            if time.monotonic() > deadline:
                record.state = "stopped: out of time"
                return False
            if record.origin.startswith("search") and trial.should_prune():
                record.state = "pruned"
                return False
            return True

        try:
            value = measure(cfg, report)
        except Exception as e:  # noqa: BLE001  (a config that crashes or cannot launch scores 0)
            record.error, value = f"{type(e).__name__}: {e}".splitlines()[0][:300], 0.0
        record.seconds = time.perf_counter() - t0
        if value != value:  # NaN: stopped early
            if progress is not None:
                progress(f"  trial {trial.number} ({record.origin}) {record.state} after {record.seconds:.0f}s")
            trial.set_user_attr(ATTR, _record_attrs(record))
            raise optuna.TrialPruned()
        record.value, record.state = value, "complete" if record.error is None else "error"
        record.worst = getattr(measure, "last_worst", None)
        trial.set_user_attr(ATTR, _record_attrs(record))
        if progress is not None:
            diff = baseline.diff(cfg)
            progress(f"  trial {trial.number} ({record.origin}) {value:.3f}x in {record.seconds:.0f}s "
                     + (record.error or ", ".join(f"{k}={b}" for k, (_, b) in sorted(diff.items())) or "baseline"))
        return value

    k = 0
    while time.monotonic() < deadline and (opts.trials is None or len(trials) < opts.trials):
        if not study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            # free one group, keep the others at the best trial's values (the baseline's before any finished)
            group = groups[k % len(groups)]
            k += 1
            try:
                best = study.best_trial.params
            except ValueError:
                best = base_params
            fixed = {p: v for p, v in best.items() if group_of(p) != group}
            study.sampler = optuna.samplers.PartialFixedSampler(fixed, tpe)
            state["origin"] = f"search: {group}"
        if state["repeats"] >= 8 * len(groups):
            break  # every group keeps proposing timed configs: the space is exhausted
        study.optimize(objective, n_trials=1)
    if storage is None:
        return trials
    mine = {t.number for t in trials}
    peers = [p for p in map(_trial_of, study.get_trials(deepcopy=False)) if p is not None and p.number not in mine]
    return sorted(trials + peers, key=lambda t: t.number)


def verify_reserve(opts: TuneOptions) -> float:
    """Seconds one candidate's full cascade needs: (a), (c), (d) and the least (b) over the gate seeds."""
    return CASCADE_FIXED_S + 2 * len(opts.gate_seeds) * B_PHASE_S


def search_seconds(opts: TuneOptions) -> float:
    """The search's share of ``--time``: all but one verification's reserve, at least ``search_share``."""
    return min(opts.seconds, max(opts.seconds * opts.search_share, opts.seconds - verify_reserve(opts)))


def verify_order(res: TuneResult, opts: TuneOptions) -> list[Trial]:
    """The ``verify_top`` fastest trials the gate's (d) could pass: the per-shape rule rejects a slowdown
    the geometric mean hides, so a trial whose slowest shape ran below ``worst_floor`` is noted, not verified."""
    out = []
    for t in [t for t in res.ranked if t.value > 1.0]:
        if t.worst is not None and t.worst < opts.worst_floor:
            if len(out) < opts.verify_top:
                res.notes.append(f"trial {t.number} ({t.value:.3f}x) not verified: a shape ran {t.worst:.3f}x "
                                 f"in the search (floor {opts.worst_floor})")
            continue
        out.append(t)
    return out[: opts.verify_top]


def run_tune(baseline: KernelConfig, opts: TuneOptions, measure: Optional[Measure] = None,
             verify: Optional[Callable[[KernelConfig, float], CascadeResult]] = None,
             progress: Optional[Callable[[str], None]] = None) -> TuneResult:
    """Search, then gate the best trials until one is accepted or the time is spent."""
    t0 = time.monotonic()
    end = t0 + opts.seconds
    res = TuneResult(baseline, opts)
    measure = measure or gpu_measure(baseline, opts)
    res.trials = search(baseline, opts, measure, t0 + search_seconds(opts), progress)
    if opts.storage is not None:
        res.study_name = study_name(baseline, opts.shapes, searched_fields(opts.shapes, opts.fields))
    res.search_seconds = time.monotonic() - t0
    cache = getattr(measure, "cache", None)
    if cache is not None:
        cache.clear()  # the verification builds its own modules
    if hasattr(measure, "close"):
        measure.close()
    verify = verify or _gate(baseline, opts, progress)
    for trial in verify_order(res, opts):
        if time.monotonic() > end:
            res.notes.append(f"out of time before verifying trial {trial.number} ({trial.value:.3f}x)")
            break
        if progress is not None:
            progress(f"verifying trial {trial.number} ({trial.value:.3f}x in the search) with the full cascade")
        gate = verify(trial.config, end)
        res.verified.append((trial, gate))
        if gate.verdict == Decision.ACCEPT:
            res.winner = trial
            break
    if not res.ranked or res.ranked[0].value <= 1.0:
        res.notes.append("no trial was faster than the baseline in the search")
    res.seconds = time.monotonic() - t0
    return res


def _gate(baseline: KernelConfig, opts: TuneOptions, progress) -> Callable[[KernelConfig, float], CascadeResult]:
    from fuzz.budgets import get

    def verify(config: KernelConfig, end: float) -> CascadeResult:
        left = end - time.monotonic()
        per_phase = max(3.0, (left - CASCADE_FIXED_S) / (2 * len(opts.gate_seeds)))
        names = {s.name for s in opts.shapes}
        shapes = list(opts.shapes) + [s for s in PRESETS["bands"] if s.name not in names]
        copts = CascadeOptions(budget=get("quick").with_overrides(seconds=per_phase), seeds=opts.gate_seeds,
                               gamma=opts.gamma, shapes=shapes, shapes_name="search shapes + bands",
                               deadline=end, artifacts_dir=None if opts.out is None else opts.out / "artifacts")
        return run_cascade(baseline, config, copts, progress)

    return verify
