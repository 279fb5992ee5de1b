"""Config-space search: overrides drawn around the config under test, saved with a failure, shared by the gate."""

from __future__ import annotations

import collections
import json

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from fuzz.budgets import Budget
from fuzz.campaign import CampaignOptions, CampaignRunner
from fuzz.cli import main
from cases import CaseKind, CaseSpec, Drawn, HotRow, split_draw
from strategies.config_space import config_overrides
from fuzz.gate.correctness import shared_cases
from strategies.space import campaign_cases
from tbe import KernelConfig

TINY = Budget("tiny", seconds=20.0, shrink_seconds=20.0, max_examples=4, max_lookups=300)


def draws(strategy, n: int = 150, seed: int = 0) -> list:
    out: list = []

    @hypothesis_seed(seed)
    @settings(max_examples=n, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(x):
        out.append(x)

    collect()
    return out


def test_overrides_are_valid_varied_and_often_absent():
    base = KernelConfig()
    # paired with a counter so Hypothesis does not skip repeated draws of "no overrides"
    drawn = [ov for ov, _ in draws(st.tuples(config_overrides(base), st.integers(0, 10**9)), 300)]
    assert all(base.replace(**ov) for ov in drawn)  # validates
    fields = collections.Counter(k for ov in drawn for k in ov)
    assert sum(1 for ov in drawn if not ov) >= 60, "the config under test itself must stay common"
    for name in ("long_run_threshold", "chunk_size", "fused_long_tier", "fused_bounds_check", "hoist_transpose",
                 "small_table_max_rows", "bwd_short_runs_per_program", "fwd_bucket_tiles", "dim_buckets",
                 "bounds_check_block", "classify_block", "short_grid_multiplier"):
        assert fields[name] >= 5, (name, fields)
    assert not fields["faults"] and not fields["fence"]
    assert all(ov.get("index_dtype", "auto") != "int32" for ov in drawn)


def test_bad_id_cases_draw_only_profiles_that_change_the_bounds_check():
    """A bad-id case stops after the bounds check, so a profile aimed at the backward would change nothing it
    runs: its draws go among the base config and the profiles that move the check, the fused one included."""
    from strategies.field_groups import BOUNDS_FIELDS

    seen = collections.Counter()
    for drawn in draws(campaign_cases(KernelConfig(), 4000), 400):
        if drawn.case.bad is not None:
            overrides = dict(drawn.overrides)
            assert not overrides or BOUNDS_FIELDS & set(overrides), overrides
            seen["fused" if overrides.get("fused_bounds_check") else "standalone"] += 1
        else:
            seen["other"] += 1
    assert seen["fused"] >= 10 and seen["standalone"] >= 10 and seen["other"] >= 200, seen


def test_fixed_fields_are_never_overridden_and_faults_survive():
    base = KernelConfig(chunk_size=100, fused_long_tier=True)
    fixed = frozenset({"chunk_size", "fused_long_tier", "small_table_min_dim"})
    for ov in draws(config_overrides(base, fixed), 200):
        assert not set(ov) & fixed, ov
        base.replace(**ov)
    d = Drawn(CaseSpec(tables=((3, 2),), batch_size=1), (("long_run_threshold", 8),))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TBE_FUZZ_ALLOW_FAULTS", "1")
        faulty = KernelConfig(faults=("fwd_skip_last_id",))
        case, cfg, ov = split_draw(d, faulty)
        assert cfg.faults == faulty.faults and cfg.long_run_threshold == 8 and ov == {"long_run_threshold": 8}


def test_campaign_draws_cases_at_the_drawn_configs_edges():
    """Hot-row counts follow the effective threshold, so small drawn thresholds give cheap long runs."""
    drawn = draws(campaign_cases(KernelConfig(), 4000), 600)  # measured: 4-24 such cases per 600 over 4 seeds
    assert all(isinstance(d, Drawn) for d in drawn)
    long_runs = 0
    for d in drawn:
        case, cfg, _ = split_draw(d, KernelConfig())
        if case.kind is CaseKind.SPEC and any(h.count >= cfg.long_run_threshold for h in case.hot_rows):
            long_runs += cfg.long_run_threshold < 256
    assert long_runs >= 3
    plain = draws(campaign_cases(KernelConfig(), 4000, search_config=False), 20)
    assert not any(isinstance(d, Drawn) for d in plain)


def test_each_configs_case_strategy_is_built_once_and_draws_at_that_config():
    """``drawn_cases`` asks ``cases_for`` once per effective config, however many draws (a strategy built per
    draw cost a third of the draw), and each case still comes from its own config's strategy."""
    from strategies.config_space import drawn_cases

    asked: list[KernelConfig] = []

    def cases_for(config):
        asked.append(config)
        return st.just(config.long_run_threshold)  # the case names the threshold it was drawn at

    base = KernelConfig()
    drawn = draws(st.tuples(drawn_cases(base, cases_for), st.integers(0, 10**9)), 300)
    assert len(asked) == len(set(asked)) >= 3, asked
    for d, _ in drawn:
        assert d.case == d.config(base).long_run_threshold
    assert {d.config(base) for d, _ in drawn} == set(asked)


@pytest.mark.fuzz
def test_failure_under_drawn_overrides_saves_the_effective_config_and_replays(tmp_path, capsys):
    """A fault only the long tier shows, found under drawn overrides: config.json is the effective config."""
    spec = CaseSpec(tables=((30, 6),), batch_size=3, max_length=2, hot_rows=(HotRow(0, 4, 11),), seed=3)
    overrides = (("chunk_size", 4), ("long_run_threshold", 8))
    config = KernelConfig(faults=("skip_last_chunk_update",))
    res = CampaignRunner(config, TINY, options=CampaignOptions(
        artifacts_dir=tmp_path, use_database=False, strategy=st.just(Drawn(spec, overrides)))).run()
    assert not res.ok and res.failure_overrides == dict(overrides)
    saved = KernelConfig.load(res.artifact / "config.json")
    assert saved == config.replace(**dict(overrides))
    meta = json.loads((res.artifact / "meta.json").read_text())
    assert meta["config_overrides"] == dict(overrides) and meta["config_under_test"]["chunk_size"] == 256
    assert main(["replay", str(res.artifact)]) == 1
    clean = tmp_path / "clean.json"
    saved.replace(faults=()).save(clean)
    assert main(["replay", str(res.artifact), "--config", str(clean)]) == 0
    capsys.readouterr()


def test_gate_shares_overrides_that_leave_the_changed_fields_alone():
    base = KernelConfig()
    cand = base.replace(long_run_threshold=128, dim_buckets=(8, 64))
    changed = frozenset(base.diff(cand))
    shared = shared_cases(base, Budget("t", 5.0, 5.0, 40, 2000), seed=3, count=40, fixed=changed)
    assert len(shared) == 40 and any(d.overrides for d in shared)
    for d in shared:
        assert not {k for k, _ in d.overrides} & changed
        split_draw(d, cand)[1].validate()


@pytest.mark.parametrize("config", [KernelConfig(), KernelConfig(long_run_threshold=64, chunk_size=32,
                                                                 dim_buckets=(8, 32), small_table_path=False)])
def test_the_opening_tour_reaches_every_path(config):
    """Without running kernels: the tour's cases take every forward path, backward tier and bounds check."""
    from cases import tensors
    from fuzz.judge.check import tiers_of
    from strategies.tour import tour

    seen = set()
    for d in tour(config, 4000):
        case, cfg, _ = split_draw(d, config)
        t = tensors(case)
        assert t.indices.numel() <= 2000, d
        seen |= tiers_of(case, t, cfg)[0]
    assert {"fwd:generic", "fwd:small_table", "bwd:short", "bwd:long", "bwd:long_fused", "bwd:multi_chunk",
            "bounds:standalone", "bounds:fused"} <= seen, seen
    assert len(tour(config, 4000, fixed=frozenset({"fused_long_tier"}))) < len(tour(config, 4000))


def test_a_gpu_budget_tour_runs_one_run_past_4096_chunks_in_exact_values():
    """Where the budget affords it, the tour holds one run past 4,096 chunks of the config's own chunk size, in
    exact values (so one lost chunk of a million lookups is a mismatch); under the interpreter's budget, none."""
    import torch

    from cases import tensors
    from strategies.tour import tour

    for config in (KernelConfig(), KernelConfig(chunk_size=64)):
        big = []
        for d in tour(config, 1_200_000):
            case, cfg, _ = split_draw(d, config)
            if getattr(case, "values", "") == "dyadic" and case.hot_rows:
                big.append((case, cfg))
        assert len(big) == 1
        case, cfg = big[0]
        ids = tensors(case, steps=False, weights=False).indices.long()
        assert cfg == config and int(torch.bincount(ids).max()) > 4096 * config.chunk_size
    assert not any(getattr(split_draw(d, KernelConfig())[0], "values", "") == "dyadic"
                   for d in tour(KernelConfig(), 4000))


def test_small_table_cases_mostly_take_the_path_and_reach_its_edges():
    """Half the small-table draws stay inside the path's limits (each limit drawn independently on either
    side left about one in six on it); the others cross one limit. Some have empty bags, some train more
    than one step, and some fill the budget so a row's run passes the long-run threshold."""
    import torch

    from cases import tensors
    from strategies.space import small_table_specs
    from tbe.forward_dispatch import choose_path
    from tbe.routing import Path

    config = KernelConfig()
    seen = collections.Counter()
    for spec in draws(small_table_specs(config, 40_000), 200):
        t = tensors(spec, steps=False, weights=False)
        (rows, dim), = spec.tables
        path = choose_path([dim], [rows], t.indices.numel(), spec.batch_size, torch.float16, torch.float32,
                           False, config)
        seen[path] += 1
        seen["empty bag"] += bool((t.offsets.diff() == 0).any())
        seen["steps > 1"] += spec.steps > 1
        seen["long run"] += bool(t.indices.numel()) and int(torch.bincount(t.indices.long()).max()) > \
            config.long_run_threshold
    assert seen[Path.FWD_SMALL_TABLE] >= 200 // 3 and seen[Path.FWD_GENERIC] >= 200 // 5, seen
    assert seen["empty bag"] >= 5 and seen["steps > 1"] >= 40 and seen["long run"] >= 20, seen


def test_interpreter_caps_bound_every_general_draw():
    """Under the interpreter's caps (``fuzz.profiles``) a drawn case needs at most ``max_chunks`` long-tier chunks
    of its config, its general cases at most ``max_work`` lookups times column blocks times steps, and its rows at
    most ``max_column_blocks`` blocks of the widest bucket: a case past them cost a whole quick budget."""
    from cases import tensors
    from strategies.space import work

    max_chunks, max_work, blocks = 40, 1500, 4
    seen = 0
    for drawn in draws(campaign_cases(KernelConfig(), 4000, max_column_blocks=blocks, max_chunks=max_chunks,
                                      max_work=max_work), 300):
        case, cfg, _ = split_draw(drawn, KernelConfig())
        specs = case.subs
        assert tensors(case, weights=False).indices.numel() <= max_chunks * cfg.chunk_size
        for spec in specs:
            if any(d > 1024 for _, d in spec.tables) or len(spec.tables) == 1 and spec.weights_dtype == "fp16":
                continue  # the wide-row and small-table branches: capped by their own shapes
            seen += 1
            assert work(spec, cfg) <= max_work, spec
            lookups = tensors(spec, steps=False, weights=False).indices.numel()
            assert lookups * spec.steps <= max_work, spec  # each lookup is at least one column block, every step
            assert all(-(-d // max(cfg.dim_buckets)) <= blocks for _, d in spec.tables), spec
    assert seen >= 100
