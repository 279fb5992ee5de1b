"""The background warm-up's scheduling rule (fuzz.compile.background): deferral while building, the
strategies' own draws once built, tour groups first, a campaign end that drops unbuilt groups, group stamps that a
later run does not build again, and one builder per cache directory that other campaigns follow."""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
import time


from fuzz.budgets import Budget
from fuzz.campaign import CampaignOptions, CampaignRunner
from fuzz.compile import background
from fuzz.compile.background import Readiness, _BuilderPool, group_keys
from fuzz.compile.warmup import WarmCase, group_cases, tour_groups, warm_groups
from fuzz.judge import CaseResult
from fuzz.status import FailureKind
from cases import CaseSpec, split_draw
from strategies.config_space import campaign_configs
from strategies.space import campaign_cases
from tbe import KernelConfig
from tests.paths import REPO

BUDGET = Budget("t", seconds=60.0, shrink_seconds=0.0, max_examples=40, max_lookups=300)


class _InstantSupervisor:
    """Passes every case at once, so the tests see only what the campaign draws."""

    environment: dict = {}

    def run(self, case, config, pending=None, **options):
        return CaseResult(case, [], 1, frozenset(), 0.0)


def _drawn(readiness, seed=3):
    seen = []
    config = KernelConfig()
    CampaignRunner(config, BUDGET, seed, CampaignOptions(
        artifacts_dir=None, use_database=False, strategy=campaign_cases(config, BUDGET.max_lookups),
        supervisor=_InstantSupervisor(), observe=lambda res, result: seen.append(repr(result.case)),
        readiness=readiness)).run()
    return seen


def test_once_everything_is_built_the_draws_are_the_strategies_own():
    built = Readiness()  # nothing planned: finished
    assert built.finished
    assert _drawn(built) == _drawn(None)


def _keys(configs, weights=None):
    """The readiness keys of ``configs``' warm-up groups (of one weights dtype, when given)."""
    return [k for c in configs for g in warm_groups([c]) if g[0].backward
            and weights in (None, g[0].spec.spec.weights_dtype) for k in group_keys(g, per_case=False)]


def _group(config, w, o, i, weighted):
    return group_keys(group_cases(config, w, o, i, weighted), per_case=False)


def test_a_case_whose_group_is_building_is_steered_to_built_dtypes_not_checked():
    r = Readiness()
    configs = campaign_configs(KernelConfig())
    r.plan(_keys(configs, "fp16"))
    r.finished = False
    seen = []
    config = KernelConfig()
    CampaignRunner(config, BUDGET, 3, CampaignOptions(
        artifacts_dir=None, use_database=False, strategy=campaign_cases(config, BUDGET.max_lookups),
        supervisor=_InstantSupervisor(),
        observe=lambda res, result: seen.append(result.case.spec.weights_dtype), readiness=r)).run()
    assert seen and "fp16" not in seen
    assert r.steered > 0 and r.deferred == 0  # every fp16 draw ran on another weights dtype
    assert r.examples == len(seen)


def test_steering_changes_the_fewest_fields_and_prefers_the_drawn_config():
    base = KernelConfig()
    profile, other = campaign_configs(base)[1:3]
    r = Readiness()
    r.plan(_keys((base, profile, other)))
    r.finished = False
    spec = CaseSpec(tables=((10, 8), (5, 3)), batch_size=2, weights_dtype="bf16", output_dtype="fp16",
                    index_dtype="int32", weighted=True)
    assert r.steer(spec, profile, base) is None  # nothing built: the draw is deferred
    r.done(_group(base, "bf16", "fp16", "int32", False))  # the config under test, unweighted
    r.done(_group(profile, "fp32", "fp32", "int64", True))  # the drawn profile, three fields off
    case, cfg = r.steer(spec, profile, base)
    assert cfg is profile and (case.weights_dtype, case.output_dtype, case.index_dtype, case.weighted) == (
        "fp32", "fp32", "int64", True)
    assert case.tables == spec.tables and case.batch_size == spec.batch_size
    r.done(_group(profile, "bf16", "fp16", "int64", True))  # one field off on the profile
    case, cfg = r.steer(spec, profile, base)
    assert cfg is profile and case.index_dtype == "int64" and case.weights_dtype == "bf16"
    # a profile with nothing built: the config under test, its overrides dropped
    case, cfg = r.steer(spec, other, base)
    assert cfg is base and not case.weighted and case.index_dtype == "int32"


def test_a_long_build_does_not_end_the_search_for_want_of_ready_draws():
    """Hypothesis ends a run after 458 rejected draws with none valid; a build that keeps every draw waiting longer
    than that many draws take must not end the search: near the limit a draw waits for the next group."""
    r = Readiness()
    r.plan(_keys(campaign_configs(KernelConfig())))
    r.finished = False
    stop = threading.Event()

    def finish_once_waiting():  # the build ends only after the draws have reached the waiting rule, however slow
        while not stop.is_set() and r.deferred < background.DEFER_BASE:
            time.sleep(0.05)
        r.all_done()

    threading.Thread(target=finish_once_waiting, daemon=True).start()
    try:
        seen = _drawn(r)
    finally:
        stop.set()
    assert len(seen) == BUDGET.max_examples and r.deferred >= background.DEFER_BASE


def test_steering_takes_a_built_pooling_and_optimizer_and_only_the_matrix_bounds_mode():
    """Readiness is kept per pooling and optimizer and per bounds-check mode: with only the config under test's
    fp32 SUM / SGD cases built, a MEAN Adagrad draw runs as SUM / SGD, and a FATAL draw in the matrix's mode, never
    in another mode (NONE checks nothing: a bad id there would read out of bounds)."""
    config = KernelConfig()
    r = Readiness()
    r.plan(_keys([config]))
    r.finished = False
    fp32 = group_cases(config, "fp32", "fp32", "int64", False)
    r.done(group_keys([c for c in fp32 if (c.spec.pooling, c.spec.optimizer, c.spec.bounds_check)
                       == ("sum", "exact_sgd", "warning")], per_case=False))
    mean = CaseSpec(tables=((10, 8),), batch_size=2, pooling="mean", optimizer="exact_rowwise_adagrad")
    assert not r.ready(mean, config)
    case, cfg = r.steer(mean, config, config)
    assert (case.pooling, case.optimizer, case.tables) == ("sum", "exact_sgd", mean.tables) and cfg is config
    fatal = CaseSpec(tables=((10, 8),), batch_size=2, bounds_check="fatal")
    assert not r.ready(fatal, config) and r.steer(fatal, config, config)[0].bounds_check == "warning"
    r.done(group_keys([c for c in fp32 if c.spec.bounds_check == "none"], per_case=False))
    assert r.steer(fatal, config, config)[0].bounds_check == "warning"  # not to NONE, though it is built
    r.done(group_keys([c for c in fp32 if c.spec.bounds_check == "fatal"], per_case=False))
    assert r.ready(fatal, config) and not r.ready(mean, config)


def test_a_group_built_in_pieces_is_stamped_once_every_piece_is_built(tmp_path, monkeypatch):
    """The steering targets build as one piece per readiness key; a piece that fails leaves its whole group
    unstamped (the next run builds it again), while the groups around it are stamped."""
    from fuzz.compile.warmup import plan

    _stamped_cache(tmp_path, monkeypatch)
    config = KernelConfig()
    p = plan([("tour", config), ("matrix", config)])
    groups = p.indexed_groups()
    order = background._order(groups, config)
    counts = {}
    for u, i, _ in order:
        counts[u, i] = counts.get((u, i), 0) + 1
    target = next(k for k, n in counts.items() if n > 1)
    pieces = [g for u, i, g in order if (u, i) == target]
    whole = next(g for u, i, g in groups if (u, i) == target)
    assert sorted(repr(c) for g in pieces for c in g) == sorted(repr(c) for c in whole)
    assert all(len(group_keys(g, per_case=False)) == 1 for g in pieces)
    bad = repr(pieces[-1])

    def runner(group):
        return {"compiled": len(group), "errors": ["a planted build error"] if repr(group) == bad else []}

    handle = background.start([config], [config], processes=2, runner=runner,
                              executor=lambda n: cf.ThreadPoolExecutor(n), interpreted=False, stamped=True)
    handle.join(timeout=120)
    assert handle.readiness.finished and not p.group_built(*target)
    assert all(p.group_built(u, i) for u, i, _ in groups if (u, i) != target)


def test_readiness_keys_follow_the_warmup_groups():
    config = KernelConfig()
    groups = warm_groups([config])
    r = Readiness()
    r.plan([k for g in groups for k in group_keys(g, per_case=False)])
    r.finished = False
    spec = CaseSpec(tables=((10, 8),), batch_size=2, weights_dtype="bf16", output_dtype="fp32", index_dtype="int32")
    assert not r.ready(spec, config)
    mine = [g for g in groups if g[0].backward and g[0].spec.spec.weights_dtype == "bf16"
            and g[0].spec.spec.output_dtype == "fp32" and g[0].spec.spec.index_dtype == "int32"
            and not g[0].spec.spec.weighted]
    assert len(mine) == 1
    r.done(group_keys(mine[0], per_case=False))
    assert r.ready(spec, config)
    # a single fp16 table the small-table path may take also waits for that path's groups
    small = CaseSpec(tables=((32, 64),), batch_size=1, weights_dtype="fp16", output_dtype="fp32")
    fp16 = [g for g in groups if g[0].backward and g[0].spec.spec.weights_dtype == "fp16"
            and g[0].spec.spec.output_dtype == "fp32" and g[0].spec.spec.index_dtype == "int64"
            and not g[0].spec.spec.weighted]
    r.done(group_keys(fp16[0], per_case=False))
    assert not r.ready(small, config)
    for g in groups:
        if not g[0].backward:
            r.done(group_keys(g, per_case=False))
    assert r.ready(small, config)
    # a config no group was planned for has nothing to wait for
    assert r.ready(spec, config.replace(chunk_size=config.chunk_size * 2))


def test_tour_cases_wait_for_their_group_only_once_the_builder_has_finished_one():
    """Before the builder's first group a tour case runs at once (its worker compiles it); after, it waits."""
    config = KernelConfig()
    first, second = (g[0] for g in tour_groups(config)[:2])
    r = Readiness()
    r.plan([k for g in tour_groups(config) for k in group_keys(g, per_case=True)])
    r.finished = False
    t0 = time.perf_counter()
    assert r.wait(first.spec, first.config, timeout=5.0) is False and time.perf_counter() - t0 < 1.0
    r.done(group_keys([first], per_case=True))  # the builder's first group
    t0 = time.perf_counter()
    assert r.wait(second.spec, second.config, timeout=0.5) is False and time.perf_counter() - t0 >= 0.5
    threading.Timer(0.2, r.done, args=(group_keys([second], per_case=True),)).start()
    assert r.wait(second.spec, second.config, timeout=5.0) is True


def test_tour_groups_build_first_and_readiness_finishes():
    order = []
    lock = threading.Lock()

    def runner(group):
        with lock:
            order.append(group)
        return {"compiled": len(group)}

    config = KernelConfig()
    handle = background.start([config], [config], processes=1, runner=runner,
                              executor=lambda n: cf.ThreadPoolExecutor(n), interpreted=False)
    res = handle.join(timeout=120)
    assert handle.readiness.finished and handle.readiness.seconds_to_built is not None
    n_tour = len(tour_groups(config))
    assert n_tour > 0 and res.groups == n_tour + len(warm_groups([config])) < len(order)  # some built as pieces
    assert sorted(repr(c) for g in order for c in g) == sorted(
        repr(c) for g in tour_groups(config) + warm_groups([config]) for c in g)
    tour_specs = [repr(c.spec) for g in tour_groups(config) for c in g]
    ran = [repr(c.spec) for g in order for c in g]
    half = (n_tour + 1) // 2
    assert ran[:half] == tour_specs[:half]  # the tour's first half first, in tour order
    at = {repr(c.spec): k for k, g in enumerate(order) for c in reversed(g)}
    assert max(at[t] for t in tour_specs) < 2 * n_tour  # the second half takes turns with the targets' pieces
    assert res.compiled == res.cases


def test_stop_drops_the_groups_not_started():
    gate = threading.Event()

    def runner(group):
        gate.wait(30)
        return {}

    config = KernelConfig()
    handle = background.start([config], [config], processes=1, runner=runner,
                              executor=lambda n: cf.ThreadPoolExecutor(n), interpreted=False)
    timer = threading.Timer(0.5, gate.set)
    timer.start()
    res = handle.stop()
    timer.cancel()
    assert handle.cancelled > 0 and res.not_built == handle.cancelled and not res.errors
    assert handle.readiness.finished and not handle.readiness.built
    assert handle.readiness.examples_before_built is None and "not built" in res.text()


def test_the_interpreter_builds_nothing():
    handle = background.start([KernelConfig()], [KernelConfig()], interpreted=True)
    assert handle.thread is None and handle.readiness.finished and handle.result.skipped


def _sleepy_group(group):
    """A stand-in builder: the first group returns at once, the others take far longer than the test."""
    time.sleep(0 if group == ["quick"] else 600)
    return {"compiled": 1}


def test_the_builder_process_is_killed_whole_when_the_campaign_ends():
    """The production pool: a builder process of its own; stopping it while groups are in flight returns at once
    (no executor left waiting) and its processes are gone."""
    pool = _BuilderPool(2)
    futures = [pool.submit(_sleepy_group, ["quick"]), pool.submit(_sleepy_group, ["slow"]),
               pool.submit(_sleepy_group, ["slow"])]
    pool.start()
    assert futures[0].result(timeout=120) == {"compiled": 1}
    t0 = time.perf_counter()
    assert all(f.cancel() for f in futures[1:])
    pool.kill()
    pool.__exit__(None, None, None)
    assert time.perf_counter() - t0 < 15
    assert not pool._proc.is_alive()
    deadline = time.monotonic() + 5  # a SIGKILLed process takes a moment to exit
    while _running_in_group(pool._proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _running_in_group(pool._proc.pid) == []  # the builder's pool went with it


def _touch_and_sleep(path):
    """A stand-in group that says it has started, then builds for longer than the test."""
    open(path, "w").close()
    time.sleep(600)


_STOP_MID_BUILD = """
import os, sys, time
from fuzz.compile.background import _BuilderPool
from tests.fuzz.compile.test_background_warmup import _touch_and_sleep
mark = sys.argv[1]
pool = _BuilderPool(2)
futures = [pool.submit(_touch_and_sleep, mark) for _ in range(3)]
pool.start()
deadline = time.monotonic() + 120
while not os.path.exists(mark) and time.monotonic() < deadline:
    time.sleep(0.05)
assert os.path.exists(mark), "no group started"
pool.kill()
print("builder alive after kill:", pool._proc.is_alive())
"""


def test_a_builder_stopped_mid_build_leaves_no_semaphore_for_the_resource_tracker_to_report(tmp_path):
    """A campaign that ends while groups build stops its builder; the builder's pool must release its semaphores,
    or every GPU campaign ends with the resource tracker's 'leaked semaphore objects' warning."""
    import subprocess
    import sys

    root = str(REPO)
    proc = subprocess.run([sys.executable, "-c", _STOP_MID_BUILD, str(tmp_path / "started")], cwd=root,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "builder alive after kill: False" in proc.stdout
    assert "leaked semaphore" not in proc.stderr, proc.stderr


def _running_in_group(pgid):
    """Pids of the live (not zombie) processes in process group ``pgid``, read from /proc."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(d))
    return out


def _stamped_cache(tmp_path, monkeypatch):
    from fuzz.compile import stamp as warm_stamp

    monkeypatch.setattr(warm_stamp, "cache_dir", lambda: tmp_path)
    return warm_stamp


def _recording_runner():
    built, lock = [], threading.Lock()

    def runner(group):
        with lock:
            built.extend(repr(c) for c in group)  # per case: a group may build as several pieces
        return {"compiled": len(group)}
    return built, runner


def test_built_groups_are_stamped_and_not_built_again(tmp_path, monkeypatch):
    """A group finished by an earlier (stopped) run carries a group stamp: the next run builds only the rest, and
    once every group of a unit is built the unit is stamped and a third run builds nothing."""
    from fuzz.compile.warmup import plan

    warm_stamp = _stamped_cache(tmp_path, monkeypatch)
    config = KernelConfig()
    units = [("tour", config), ("matrix", config)]
    earlier = plan(units)
    done = [(u, i) for u, i, _ in earlier.indexed_groups()][:5]
    for u, i in done:
        earlier.stamp_group(u, i)
    todo = sorted(repr(c) for _, _, g in earlier.indexed_groups() for c in g)
    built, runner = _recording_runner()
    pool = lambda n: cf.ThreadPoolExecutor(n)  # noqa: E731
    handle = background.start([config], [config], processes=2, runner=runner, executor=pool, interpreted=False,
                              stamped=True)
    res = handle.join(timeout=120)
    assert handle.readiness.finished and handle.readiness.built
    total = sum(len(earlier.unit_groups(u)) for u in units)
    assert res.groups == total - len(done)
    assert sorted(built) == todo
    assert all(warm_stamp.find(earlier.keys[u]) for u in units)
    first_run = len(built)
    again = background.start([config], [config], processes=2, runner=runner, executor=pool, interpreted=False,
                             stamped=True)
    assert again.thread is None and again.result.groups == 0 and again.result.stamped_at
    assert len(built) == first_run


def test_a_second_process_follows_the_builder_and_takes_over_when_it_ends(tmp_path, monkeypatch):
    """One builder per cache directory: while another holds the builder lock, a campaign's warm-up builds nothing
    and marks ready what the builder's group stamps say is built; when the builder lets go, it builds the rest."""
    from fuzz.compile.warmup import plan

    warm_stamp = _stamped_cache(tmp_path, monkeypatch)
    monkeypatch.setattr(background, "POLL_S", 0.05)
    config = KernelConfig()
    other = warm_stamp.builder_lock()  # the other process's builder
    assert other is not None and warm_stamp.builder_lock() is None
    built, runner = _recording_runner()
    handle = background.start([config], [config], processes=2, runner=runner,
                              executor=lambda n: cf.ThreadPoolExecutor(n), interpreted=False, stamped=True)
    p = plan([("tour", config), ("matrix", config)])
    (tour_unit, first, group), *_ = p.indexed_groups()
    case = group[0]
    assert tour_unit[0] == "tour" and not handle.readiness.ready(case.spec, case.config)
    p.stamp_group(tour_unit, first)  # the builder finished that group
    deadline = time.monotonic() + 10
    while not handle.readiness.ready(case.spec, case.config) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert handle.readiness.ready(case.spec, case.config) and built == [] and not handle.readiness.finished
    os.close(other)  # the builder ended
    res = handle.join(timeout=120)
    assert handle.readiness.finished and handle.readiness.built and res.followed_seconds > 0
    rest = [repr(c) for u in p.units for i, g in enumerate(p.unit_groups(u)) if (u, i) != (tour_unit, first) for c in g]
    assert sorted(built) == sorted(rest)
    assert "followed another process's build" in res.text()


def test_a_built_tour_case_does_not_wait_for_its_configs_groups(tmp_path, monkeypatch):
    """With the tour stamped and the matrix still building, the tour's cases run at once: a tour case needs its own
    group only, never the (larger) matrix group of its config."""
    from fuzz.compile.warmup import plan

    _stamped_cache(tmp_path, monkeypatch)
    monkeypatch.setattr(background, "POLL_S", 0.05)
    config = KernelConfig()
    p = plan([("tour", config)])
    for u, i, _ in p.indexed_groups():
        p.stamp_group(u, i)
    p.stamp(1.0)
    gate = threading.Event()

    def runner(group):
        gate.wait(30)
        return {}

    handle = background.start([config], [config], processes=1, runner=runner,
                              executor=lambda n: cf.ThreadPoolExecutor(n), interpreted=False, stamped=True)
    try:
        assert handle.result.reused == 1 and not handle.readiness.finished
        cases = [c for g in tour_groups(config) for c in g]
        assert cases and all(handle.readiness.ready(c.spec, c.config) for c in cases)
    finally:
        gate.set()
        handle.stop()


def test_the_steering_targets_build_beside_the_second_half_of_the_tour():
    """Any not-ready draw can be steered to the config under test's fp32 and small-table groups: their pieces take
    turns with the tour's second half, pooling and optimizer pieces first, the smallest first, before any other
    group."""
    from fuzz.compile.background import STEER_TARGET, _order
    from fuzz.compile.warmup import plan

    config = KernelConfig()
    p = plan([("tour", config)] + [("matrix", c) for c in campaign_configs(config)], stamped=False)
    order = _order(p.indexed_groups(), config)
    tours = sum(1 for u, _, _ in order if u[0] == "tour")
    half = (tours + 1) // 2
    assert all(u[0] == "tour" for u, _, _ in order[:half])
    mixed = order[half:half + 2 * (tours - half)]
    assert [u[0] for u, _, _ in mixed] == ["tour", "matrix"] * (tours - half)
    first = [g for u, _, g in order[half:] if u[0] == "matrix"][:12]
    assert all(u[1] == config for u, _, g in order[half:] if u[0] == "matrix" and g in first)
    dtypes = [(g[0].spec.spec.weights_dtype, g[0].spec.spec.output_dtype,
               g[0].spec.spec.index_dtype) for g in first if g[0].backward]
    assert dtypes and all(d == STEER_TARGET for d in dtypes)
    assert all(len(group_keys(g, per_case=False)) == 1 for g in first)  # one readiness key a piece
    kinds = [group_keys(g, per_case=False)[0][0] for g in first]
    assert kinds[:8] == ["matrix"] * 8  # the pooling and optimizer pieces first: any draw can be steered to one
    assert [len(g) for g in first[:4]] == sorted(len(g) for g in first[:4])  # the smallest first


class _SlowSupervisor(_InstantSupervisor):
    """Passes every case after a pause (so a build can finish between draws); fails the cases ``fail`` names."""

    def __init__(self, fail=()):
        self.fail = set(fail)

    def run(self, case, config, pending=None, **options):
        time.sleep(0.02)
        if repr(case) in self.fail:
            return CaseResult(case, [], 1, frozenset(), 0.0, error="a planted failure",
                              error_kind=FailureKind.EXCEPTION)
        return CaseResult(case, [], 1, frozenset(), 0.0)


def _tour_building(config):
    """Readiness with the tour's groups planned, the first built (the builder has started), the rest not."""
    keys = [k for g in tour_groups(config) for k in group_keys(g, per_case=True)]
    r = Readiness()
    r.plan(keys)
    r.finished = False
    r.done(keys[:1])
    return r, keys


def test_tour_cases_still_building_run_between_draws_and_all_of_them_run():
    """A tour case whose group is still building does not hold the draws back: the draws run (their kernels are
    built), the postponed tour cases run between them as their groups finish, and every tour case runs."""
    from strategies.tour import tour

    config = KernelConfig()
    r, keys = _tour_building(config)
    threading.Timer(0.4, r.done, args=(keys[1:],)).start()
    tour_cases = {repr(c) for c in (split_draw(d, config)[0] for d in tour(config, BUDGET.max_lookups))}
    seen = []
    res = CampaignRunner(config, BUDGET, 3, CampaignOptions(
        artifacts_dir=None, use_database=False, strategy=None, supervisor=_SlowSupervisor(), readiness=r,
        observe=lambda res, result: seen.append(repr(result.case) in tour_cases))).run()
    assert res.ok and res.tour_examples == len(tour_cases) == sum(seen)
    first_draw = seen.index(False)
    assert seen[0] and any(seen[first_draw:])  # a tour case ran first, and others after draws had run
    assert r.examples == len(seen)


def test_a_postponed_tour_case_that_fails_is_the_campaigns_failure():
    from strategies.tour import tour

    config = KernelConfig()
    r, keys = _tour_building(config)
    threading.Timer(0.3, r.done, args=(keys[1:],)).start()
    last = split_draw(tour(config, BUDGET.max_lookups)[-1], config)[0]
    res = CampaignRunner(config, BUDGET, 3, CampaignOptions(
        artifacts_dir=None, use_database=False, strategy=None, supervisor=_SlowSupervisor(fail=[repr(last)]),
        readiness=r, shrink=False)).run()
    assert not res.ok and res.failure is not None and repr(res.failure.case) == repr(last)
    assert res.stopped_by == "failure"


def test_a_fixed_list_builds_each_case_once_in_its_order_and_each_is_ready_on_its_own():
    config = KernelConfig()
    other = config.replace(chunk_size=64)
    specs = [CaseSpec(tables=((20, d),), batch_size=2, seed=d) for d in (4, 8, 12)]
    pairs = [(specs[0], config), (specs[0], other), (specs[1], config), (specs[0], config), (specs[2], other)]
    built = []
    release = threading.Event()

    def runner(group):
        built.append((group[0].spec, group[0].config))
        if len(built) == 3:
            release.wait(30)  # the third case stays unbuilt until the test lets it go
        return {"compiled": 1}

    handle = background.start_cases(pairs, processes=1, runner=runner,
                                    executor=lambda n: cf.ThreadPoolExecutor(n), interpreted=False)
    r = handle.readiness
    for _ in range(30):  # the first build done: waits block from now on (news may already have come)
        if r.building_started:
            break
        r.wait_for_news(1)
    assert r.wait(specs[0], other, 30)  # its own build done: it waits for no other
    assert not r.ready(specs[1], config) and not r.ready(specs[2], other)
    release.set()
    res = handle.join(timeout=30)
    assert built == [(specs[0], config), (specs[0], other), (specs[1], config), (specs[2], other)]  # once, in order
    assert res.groups == 4 and res.compiled == 4 and r.finished and r.ready(specs[2], other)


def test_a_fixed_list_on_the_interpreter_builds_nothing():
    handle = background.start_cases([(CaseSpec(tables=((20, 4),), batch_size=2), KernelConfig())], interpreted=True)
    assert handle.thread is None and handle.readiness.finished and handle.result.skipped


def _niceness(group):
    return {"nice": os.nice(0)}


def test_cases_built_first_run_above_the_warmups_priority():
    """The production pools: the warm-up's builds at ``WARMUP_NICE`` below the caller, a list built first at
    ``FIRST_NICE``, which is higher (the kernel scheduler gives it the larger share of the cores)."""
    here = os.nice(0)
    seen = []
    for pool in (_BuilderPool(1), _BuilderPool(1, nice=background.FIRST_NICE)):
        with pool:
            fut = pool.submit(_niceness, ["any"])
            pool.start()
            seen.append(fut.result(timeout=120)["nice"] - here)
    assert seen == [min(background.WARMUP_NICE, 19 - here), min(background.FIRST_NICE, 19 - here)]
    assert background.FIRST_NICE < background.WARMUP_NICE


def test_cases_built_first_build_beside_the_warmup_and_are_ready_one_by_one():
    """``build_first``: the listed cases build on a pool of their own, in order, each ready on its own, while the
    warm-up's groups are still in flight. Nothing is built first once the build has ended."""
    assert Readiness().build_first([(CaseSpec(tables=((20, 4),), batch_size=2), KernelConfig())]) is None
    config = KernelConfig()
    aimed = [(CaseSpec(tables=((20, d),), batch_size=2, seed=d), config.replace(fused_bounds_check=True))
             for d in (4, 12)]
    started, hold, built, go = threading.Event(), threading.Event(), [], threading.Event()

    def runner(group):
        pair = (group[0].spec, group[0].config)
        if pair in aimed:
            go.wait(30)
            built.append(pair)
            return {"compiled": 1}
        started.set()
        hold.wait(30)  # the warm-up's groups stay in flight until the test ends
        return {}

    # one process: the warm-up's only builder stays busy, and the first list's own builder runs its groups one at
    # a time, so the order they finish in is the order they were listed in (two builders would finish in any order)
    handle = background.start([config], [], processes=1, runner=runner,
                              executor=lambda n: cf.ThreadPoolExecutor(n), interpreted=False)
    try:
        assert started.wait(30)
        r = handle.readiness
        first = r.build_first(aimed)
        assert first is not None and r.built_first == 2 and not r.finished
        assert not first.ready(*aimed[0]) and not first.ready(*aimed[1])
        go.set()
        for _ in range(30):  # the first list's builder has finished a group: waits block from now on
            if first.building_started:
                break
            first.wait_for_news(1)
        assert all(first.wait(*pair, 30) for pair in aimed) and built == aimed
        assert not r.finished  # the warm-up goes on
        assert r.build_first(aimed) is None  # one list per build
    finally:
        hold.set()
        handle.stop()
    assert r.build_first(aimed) is None  # the build has ended


AIM_SHARE = 0.3  # the aimed cases' share of the test campaigns below (fill.FILL_SHARE)


def _campaign_building_aimed_cases(monkeypatch, finish, observe=None):
    """A campaign of 8 s whose warm-up has not built its override profiles. Its ``build_first`` answers with a
    Readiness of its own, on which ``finish(first, pairs)`` runs half a second into the aimed cases' share.
    Returns the result, the calls to ``build_first`` (time, pairs, which were ready then), the runs started
    (time, repr(case), config), the campaign's start and its budget."""
    from fuzz.campaign import fill
    from tests.passing_supervisor import PassingSupervisor

    monkeypatch.setattr(fill, "FILL_SHARE", AIM_SHARE)
    config = KernelConfig()
    budget = Budget("t", seconds=8.0, shrink_seconds=0.0, max_examples=100_000, max_lookups=4000)
    r = Readiness()
    r.plan([k for g in warm_groups(campaign_configs(config)[1:]) for k in group_keys(g, False)])  # the profiles'
    r.finished = False
    asked, starts = [], []

    def build_first(pairs):
        pairs = list(pairs)
        asked.append((time.perf_counter(), pairs, [r.ready(*p) for p in pairs]))
        first = Readiness()
        first.plan([k for case, cfg in pairs for k in group_keys([WarmCase(cfg, case)], True)])
        first.finished = False
        first.done([])  # the builder has started
        wait = max(0.3, t0 + budget.seconds * (1 - AIM_SHARE) + 0.5 - time.perf_counter())
        threading.Timer(wait, finish, (first, pairs)).start()
        return first

    class Recording(PassingSupervisor):
        def run(self, case, config, pending=None, **options):
            starts.append((time.perf_counter(), repr(case), config))
            return super().run(case, config, pending, **options)

    r._first = build_first
    t0 = time.perf_counter()
    res = CampaignRunner(config, budget, 1, CampaignOptions(
        artifacts_dir=None, supervisor=Recording(), tour_share=None, readiness=r, observe=observe)).run()
    return res, asked, starts, t0, budget


def test_the_aimed_cases_kernels_build_ahead_of_the_warmup_and_the_aimed_cases_wait_for_them(monkeypatch):
    """While the warm-up has not built its override profiles, a campaign asks, ``AIM_BUILD_LEAD`` aimed shares of time
    before its aimed cases, to build first the aimed cases whose kernels are not built; those cases then wait for
    that build."""
    from fuzz.campaign.search import AIM_BUILD_LEAD
    done_at, ran = [], []

    def finish(first, pairs):
        done_at.append(time.perf_counter())
        first.all_done()

    res, asked, starts, t0, budget = _campaign_building_aimed_cases(
        monkeypatch, finish, lambda res, result: ran.append((time.perf_counter(), res.fill_examples, result.case)))
    assert len(asked) == 1
    when, pairs, were_ready = asked[0]
    assert pairs and not any(were_ready)  # only cases whose kernels the warm-up had not built
    assert when - t0 >= budget.seconds * (1 - (1 + AIM_BUILD_LEAD) * AIM_SHARE) - 0.5  # not before the lead
    aimed = [(t, case) for t, n, case in ran if n]
    assert aimed and when < aimed[0][0]
    # (case, config): one case may also be aimed at under another config whose kernels are built
    built_first = {(repr(case), cfg) for case, cfg in pairs}
    waited = [t for t, case, cfg in starts if (case, cfg) in built_first and t > when]
    assert waited and done_at and min(waited) >= done_at[0]  # each ran once its own build was done (half a second in)
    # the aimed cases already built go first: the first aimed case (observed just before the count of aimed
    # cases moves) is not one that waits; starts and observations pair up, one run per case
    first = next(i for i, (_, n, _) in enumerate(ran) if n) - 1
    assert len(starts) == len(ran) and (starts[first][1], starts[first][2]) not in built_first


def test_aimed_cases_run_as_their_kernels_are_built_and_one_never_built_is_left_out(monkeypatch):
    """The aimed cases run in the order their builds finish, not the order planned: a case whose build never
    finishes holds back none behind it, and it is not run at all (it would compile in the worker past the end)."""
    from fuzz.campaign import search

    def finish(first, pairs):  # every case but the first planned: that one never finishes building
        for case, cfg in pairs[1:]:
            first.done(group_keys([WarmCase(cfg, case)], True))

    planned = []  # the aimed cases planned when their share begins: a cell the draws reached since is not aimed
    plan = search._aimed

    def recorded(*args):
        cases = plan(*args)
        planned.extend(cases)
        return cases

    monkeypatch.setattr(search, "_aimed", recorded)
    res, asked, starts, t0, budget = _campaign_building_aimed_cases(monkeypatch, finish)
    assert len(asked) == 1 and len(asked[0][1]) >= 2
    pairs = asked[0][1]
    config = KernelConfig()
    still = {(repr(case), cfg) for case, cfg in (split_draw(d, config)[:2] for d in planned)}
    stuck = (repr(pairs[0][0]), pairs[0][1])
    later = {(repr(case), cfg) for case, cfg in pairs[1:]} & still
    aimed = [(case, cfg) for t, case, cfg in starts if t >= t0 + budget.seconds * (1 - AIM_SHARE)]
    assert stuck not in aimed  # never built: never run, though planned first
    assert later and later <= set(aimed)  # each of the others still aimed at ran once built
    assert stuck not in still or res.fill_examples < res.fill_planned


def test_a_build_ahead_that_fails_is_said_and_never_a_failure_of_the_draw(monkeypatch):
    from fuzz.campaign import fill
    from tests.passing_supervisor import PassingSupervisor

    monkeypatch.setattr(fill, "FILL_SHARE", 0.3)
    config = KernelConfig()
    r = Readiness()
    r.plan([k for g in warm_groups(campaign_configs(config)[1:]) for k in group_keys(g, False)])
    r.finished = False

    def broken(pairs):
        raise OSError("no processes left")

    r._first = broken
    said = []
    budget = Budget("t", seconds=4.0, shrink_seconds=0.0, max_examples=100_000, max_lookups=4000)
    res = CampaignRunner(config, budget, 1, CampaignOptions(
        artifacts_dir=None, supervisor=PassingSupervisor(), tour_share=None, readiness=r, announce=said.append)).run()
    assert res.ok and res.failure is None and res.fill_examples > 0
    assert any("could not be built ahead (OSError: no processes left)" in line for line in said)
