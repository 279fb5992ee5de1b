"""``tbe-fuzz tune``'s search and bookkeeping on the CPU: real Optuna, a stand-in measurement.

The stand-in scores a config by a known function of its fields, so the tests can check that
the baseline is trial 0, the hints are tried, the search finds the best region, the time
budget stops it, a crashing candidate scores 0, and only a gate-accepted trial is written as
the winner. Timing on the GPU is tests/fuzz/gate/test_cascade_gpu.py's job.
"""

from __future__ import annotations

import json
import time

import pytest

from fuzz.gate.cascade import CascadeOptions, CascadeResult, Level
from fuzz.status import Decision
from fuzz.budgets import Budget
from fuzz.gate import PRESETS, PerfShape
from fuzz.tune.space import GROUPS, RUNS, TILES, group_of, hint_configs, params_of, searched_fields, suggest
from tbe import KernelConfig

optuna = pytest.importorskip("optuna", reason="optuna==5.0.0 (requirements) is not installed")
from fuzz.tune import search as tune  # noqa: E402
from fuzz.tune import report as tune_report

SHAPES = PRESETS["bench-lite"][:2]


def fake_gate(verdict: str):
    calls = []

    def verify(config, end):
        calls.append(config)
        statuses = "pppp" if verdict == Decision.ACCEPT else "pppf"
        levels = {k: Level(k, {"p": "pass", "f": "fail"}[s], [] if s == "p" else ["slower"])
                  for k, s in zip("abcd", statuses)}
        return CascadeResult(KernelConfig(), config, config.to_dict(),
                             CascadeOptions(budget=Budget("t", 1, 1, 1, 1)), levels)

    verify.calls = calls
    return verify


def _speed(config: KernelConfig) -> float:
    runs = config.bwd_short_runs_per_program.bit_length() - 1
    return 1.0 + 0.02 * runs + (0.05 if config.fwd_gather_unweighted == 2 else 0.0)


def score(config: KernelConfig) -> float:
    """Speedup over the defaults: faster with more short runs per program and a gather of 2; a crash at 32 runs."""
    if config.bwd_short_runs_per_program == 32:
        raise RuntimeError("out of resources")
    return _speed(config) / _speed(KernelConfig())


def fake_measure(delay: float = 0.0):
    def measure(config, report):
        time.sleep(delay)
        value = score(config)
        for step in range(len(SHAPES)):
            if not report(step, value):
                return float("nan")
        return value
    return measure


def test_space_reproduces_the_baseline_and_the_hints():
    base = KernelConfig(fwd_bucket_tiles=((128, 4, 2, 4),))
    fields = searched_fields(SHAPES)
    assert TILES in fields and "fwd_gather_weighted" not in fields  # no weighted shape among the two
    for cfg in [base] + hint_configs(base, fields):
        trial = optuna.trial.FixedTrial(params_of(cfg, base, SHAPES, fields))
        assert suggest(trial, base, SHAPES, fields) == cfg
    assert "fwd_gather_weighted" in searched_fields(PRESETS["bench-lite"])
    with pytest.raises(ValueError, match="not_a_field"):
        searched_fields(SHAPES, ["fwd_num_warps", "not_a_field"])
    assert searched_fields(SHAPES, ["fwd_num_warps"]) == ["fwd_num_warps"]


def test_space_searches_short_runs_per_bucket():
    """``bwd_short_bucket_runs`` is searched a bucket at a time in the short tier's group: a trial can set, change
    or drop a bucket's entry (0), entries of buckets the shapes never use stay, and every such config is a point the
    space reproduces."""
    base = KernelConfig(bwd_short_bucket_runs=((32, 2), (128, 4)))  # the two shapes are D128 and D64: no 32 bucket
    fields = searched_fields(SHAPES)
    assert RUNS in fields and group_of("runs64") == group_of("bwd_short_runs_per_program") == "short tier"
    params = params_of(base, base, SHAPES, fields)
    assert (params["runs64"], params["runs128"]) == (0, 4) and "runs32" not in params
    changed = dict(params, runs64=8, runs128=0)
    cfg = suggest(optuna.trial.FixedTrial(changed), base, SHAPES, fields)
    assert cfg.bwd_short_bucket_runs == ((32, 2), (64, 8))
    assert cfg.short_runs(64) == 8 and cfg.short_runs(128) == cfg.bwd_short_runs_per_program
    assert params_of(cfg, base, SHAPES, fields) == changed
    assert RUNS not in searched_fields(SHAPES, ["fwd_num_warps"])


def _beats_the_hints(res) -> bool:
    best = res.ranked[0]
    hints = max(t.value for t in res.trials if t.origin == "hint")
    return best.value > hints and best.config.bwd_short_runs_per_program >= 8


def test_the_sampler_beats_the_hints_on_most_seeds(tmp_path):
    """25 trials from a seed: the sampler finds the better region beyond the hints on at least 5 seeds of 6 (one
    seed can spend its trials elsewhere in a space of this many fields)."""
    wins = 0
    for seed in range(6):
        opts = tune.TuneOptions(shapes=SHAPES, seconds=60.0, trials=25, seed=seed, out=tmp_path / str(seed),
                                verify_top=2)
        wins += _beats_the_hints(tune.run_tune(KernelConfig(), opts, measure=fake_measure(),
                                               verify=fake_gate(Decision.ACCEPT)))
    assert wins >= 5, f"the sampler beat the hints on {wins} seeds of 6"


def test_tune_finds_the_better_region_and_writes_the_winner(tmp_path):
    verify = fake_gate(Decision.ACCEPT)
    opts = tune.TuneOptions(shapes=SHAPES, seconds=60.0, trials=25, seed=0, out=tmp_path, verify_top=2)
    res = tune.run_tune(KernelConfig(), opts, measure=fake_measure(), verify=verify)
    assert res.trials[0].origin == "baseline" and res.trials[0].config == KernelConfig()
    assert res.aa_value == pytest.approx(1.0)
    assert {t.origin for t in res.trials[1:7]} == {"hint"}
    assert any(t.error and "out of resources" in t.error and t.value == 0.0 for t in res.trials) or \
        all(t.config.bwd_short_runs_per_program != 32 for t in res.trials)
    best = res.ranked[0]
    assert _beats_the_hints(res)
    assert res.winner is best and verify.calls == [best.config]
    tune_report.write(res, tmp_path)
    assert KernelConfig.load(tmp_path / "winner.json") == best.config
    data = json.loads((tmp_path / "tune.json").read_text())
    assert data["winner_trial"] == best.number and len(data["trials"]) == len(res.trials)
    assert (tmp_path / f"gate-trial{best.number}" / "report.md").is_file()
    assert "| trial |" in (tmp_path / "tune.md").read_text()


def test_each_search_trial_moves_one_group_away_from_the_best_so_far():
    """Block-wise search: a trial changes only the fields of its group (the rest keep the best trial's
    values, so Triton recompiles only the kernels that group touches)."""
    opts = tune.TuneOptions(shapes=SHAPES, seconds=60.0, trials=30, seed=3)
    trials = tune.search(KernelConfig(), opts, fake_measure(), time.monotonic() + 60)
    searched = [t for t in trials if t.origin.startswith("search: ")]
    assert len({t.origin for t in searched}) == len(GROUPS)  # every group got its turns
    for t in searched:
        done = [p for p in trials[: t.number] if p.value is not None]
        top = max(p.value for p in done)
        group = set(GROUPS[t.origin.removeprefix("search: ")])
        assert any(set(p.config.diff(t.config)) <= group for p in done if p.value == top), t


def test_tune_keeps_the_baseline_when_the_gate_rejects(tmp_path):
    verify = fake_gate(Decision.KEEP)
    opts = tune.TuneOptions(shapes=SHAPES, seconds=60.0, trials=8, seed=0, verify_top=2)
    res = tune.run_tune(KernelConfig(), opts, measure=fake_measure(), verify=verify)
    assert res.winner is None and len(verify.calls) == 2 and len(res.verified) == 2
    assert [t.value for t, _ in res.verified] == sorted((t.value for t, _ in res.verified), reverse=True)
    tune_report.write(res, tmp_path)
    assert not (tmp_path / "winner.json").exists()
    assert "KEEP the baseline" in tune_report.text(res)


def test_trials_with_a_slow_shape_are_not_verified():
    """A gather of 2 is fastest on average here but halves one shape: (d)'s per-shape rule would reject
    it, so the tuner verifies the fastest trials without such a shape and notes the ones it passed over."""
    inner = fake_measure()

    def measure(config, report):
        measure.last_worst = 0.5 if config.fwd_gather_unweighted == 2 else 1.0
        return inner(config, report)

    verify = fake_gate(Decision.ACCEPT)
    opts = tune.TuneOptions(shapes=SHAPES, seconds=60.0, trials=25, seed=1, verify_top=2)
    res = tune.run_tune(KernelConfig(), opts, measure=measure, verify=verify)
    fastest = res.ranked[0]
    assert fastest.config.fwd_gather_unweighted == 2 and fastest.worst == 0.5
    assert verify.calls and all(c.fwd_gather_unweighted != 2 for c in verify.calls)
    assert res.winner is not None and res.winner.worst == 1.0
    assert any(f"trial {fastest.number} " in n and "0.500x" in n for n in res.notes)
    assert "| slowest shape |" in tune_report.markdown(res)


def test_tune_search_stops_at_its_time_budget():
    opts = tune.TuneOptions(shapes=SHAPES, seconds=2.0, search_share=0.5, seed=0, verify_top=1)
    res = tune.run_tune(KernelConfig(), opts, measure=fake_measure(delay=0.3), verify=fake_gate(Decision.ACCEPT))
    # the search has 1s; a trial started before the deadline may finish (0.3s), none starts after it
    assert res.search_seconds < 1.0 + 0.3 + 2.0  # slack for a loaded machine, far below the 60 s default
    assert 1 <= len(res.trials) <= 5


def test_trial_warm_up_cases_are_the_shapes_kinds_and_run():
    """One tiny case per kind of shape (width, weight dtype, weighting, optimizer), runnable as is."""
    from fuzz.tune.warm import tiny_specs
    from fuzz.compile.warmup import WarmCase, run_group

    specs = tiny_specs(PRESETS["quick"], KernelConfig())
    kinds = {(s.tables[0][1], s.weights_dtype, s.weighted, s.optimizer) for s in specs}
    assert len(specs) == len(kinds) == 5 and all(s.bounds_check == "none" for s in specs)
    fused = tiny_specs(SHAPES, KernelConfig(fused_long_tier=True, fused_long_min_lookups=300))
    assert all(s.hot_rows[0].count == 300 for s in fused)
    assert run_group([WarmCase(KernelConfig(), specs[2])])["errors"] == []


def test_tune_shape_file(tmp_path):
    shapes = [PerfShape("tiny", 1000, 16, bags=10)]
    assert searched_fields(shapes) and TILES in searched_fields(shapes)


@pytest.mark.parametrize("seconds, share, expected", [(270.0, 0.3, 90.0), (600.0, 0.3, 420.0), (100.0, 0.3, 30.0),
                                                      (90.0, 1.0, 90.0)])
def test_search_leaves_one_verification_its_reserve(seconds, share, expected):
    """A short --time still gives the search its least share; a long one leaves the cascade's reserve."""
    opts = tune.TuneOptions(shapes=SHAPES, seconds=seconds, search_share=share)
    assert tune.verify_reserve(opts) == 180.0  # the expectations below are worked out for this reserve
    assert tune.search_seconds(opts) == pytest.approx(expected)
