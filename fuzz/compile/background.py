"""Background warm-up: a campaign checks its first case at once while the kernels build beside it, steering or
deferring draws whose kernels are not built yet; the rule and its reasons: docs/design/execution.md."""

from __future__ import annotations

import collections
import concurrent.futures as cf
import dataclasses
import functools
import itertools
import os
import threading
import time
from typing import Any, Callable, Optional, Sequence

from tbe.config import KernelConfig
from tbe.modes import FloatDtype, IndexDtype, Optimizer, Pooling

from fuzz.compile.warmup import (
    MATRIX_MODE, WarmCase, WarmupResult, run_group, default_processes, plan,
)

PAUSE_S = 0.005  # after a deferral, while groups are still building
DEFER_BASE, DEFER_PER_ADMITTED = 229, 50  # half of Hypothesis's limit on rejected draws (458 + 100 x valid)
WAIT_S = 5.0  # longest wait for a group to finish, once deferrals near that limit
STEER_FIELDS = ("weights_dtype", "output_dtype", "index_dtype", "weighted", "pooling", "optimizer", "bounds_check")
_STEER_VALUES = tuple(itertools.product(FloatDtype, FloatDtype, IndexDtype, (False, True), Pooling, Optimizer))


@functools.lru_cache(maxsize=256)
def _config_key(config: KernelConfig) -> str:
    return config.to_json()


def _modes(spec: Any) -> tuple:
    return (spec.weights_dtype, spec.output_dtype, spec.index_dtype, bool(spec.weighted))


def _matrix_key(config: KernelConfig, spec: Any) -> tuple:
    """The warm-up cases of ``spec``'s modes under ``config`` in the bounds-check mode of the matrix."""
    return ("matrix", _config_key(config), *_modes(spec), spec.pooling, spec.optimizer)


def _mode_key(config: KernelConfig, spec: Any) -> tuple:
    """The warm-up cases of ``spec``'s bounds-check mode (a forward of its own) for its dtypes and weighting."""
    return ("mode", _config_key(config), *_modes(spec), spec.bounds_check)


def _warm_key(case: WarmCase) -> tuple:
    """The readiness key a built warm-up case counts toward."""
    spec = case.spec.spec
    if case.small:  # the small-table groups (fuzz.compile.warmup.small_table_cases)
        return ("small", _config_key(case.config))
    return _matrix_key(case.config, spec) if spec.bounds_check == MATRIX_MODE else _mode_key(case.config, spec)


def _may_take_small_table(config: KernelConfig, spec: Any) -> bool:
    """Conservative: true wherever ``tbe.forward_small_table.eligible`` can hold for some bag lengths."""
    if not config.small_table_path or len(spec.tables) != 1 or spec.weighted:
        return False
    rows, dim = spec.tables[0]
    return (spec.weights_dtype == "fp16" and spec.output_dtype == "fp32" and rows <= config.small_table_max_rows
            and config.small_table_min_dim <= dim <= config.small_table_max_dim)


PER_CASE = ("tour", "cases")  # units whose cases are readied one by one: the opening tour's, a fixed list's


def _case_key(case: Any, config: KernelConfig) -> tuple:
    return ("case", repr((case, config)))


def group_keys(group: Sequence[WarmCase], per_case: bool) -> list[tuple]:
    """The readiness keys a finished group counts toward, each once (a key is ready when every group
    holding it has finished): one per case for the ``PER_CASE`` units, else the warm-up's keys."""
    if per_case:
        return [_case_key(c.spec, c.config) for c in group]
    return list(dict.fromkeys(_warm_key(c) for c in group))


class Readiness:
    """Which warm-up groups have finished; thread-safe. ``planned`` holds every key of a group still to build,
    with a count (the small-table key belongs to several groups)."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._pending: dict[tuple, int] = {}
        self._cases: set[tuple] = set()  # keys of cases readied one by one: such a case needs its own group only
        self.finished = True
        self.built = True  # False when the warm-up was stopped before every group finished
        self.deferred = 0
        self.steered = 0
        self.admitted = 0
        self._news = 0  # groups finished so far (wait_for_news waits for it to move)
        self.examples = 0
        self.examples_before_built: Optional[int] = None
        self.seconds_to_built: Optional[float] = None
        self.first_example_s: Optional[float] = None  # from the warm-up's start to the first checked case
        self.first_draw_s: Optional[float] = None  # to the random search's first admitted draw
        self.built_first = 0  # cases built ahead of the warm-up's own groups (``build_first``)
        self._first: Optional[Callable[[list], Optional["Readiness"]]] = None  # the builder's, while it runs
        self._t0 = time.perf_counter()

    def know_cases(self, keys: Sequence[tuple]) -> None:
        """Cases readied one by one and already built (a stamped tour): such a case needs nothing, not its matrix
        group."""
        with self._lock:
            self._cases.update(k for k in keys if k[0] == "case")

    def plan(self, keys: Sequence[tuple]) -> None:
        with self._lock:
            for k in keys:
                self._pending[k] = self._pending.get(k, 0) + 1
                if k[0] == "case":
                    self._cases.add(k)
            self.finished = not self._pending

    def done(self, keys: Sequence[tuple]) -> None:
        with self._lock:
            for k in keys:
                left = self._pending.get(k, 0) - 1
                if left > 0:
                    self._pending[k] = left
                else:
                    self._pending.pop(k, None)
            self._news += 1
            self._lock.notify_all()

    def all_done(self, built: bool = True) -> None:
        """Every group finished (``built``), or the warm-up stopped: either way nothing is deferred any more."""
        with self._lock:
            self._pending.clear()
            if not self.finished:
                self.finished = True
                self.built = built
                if built:
                    self.examples_before_built = self.examples
                    self.seconds_to_built = time.perf_counter() - self._t0
            self._lock.notify_all()

    def _needs(self, case: Any, config: KernelConfig) -> list[tuple]:
        own = _case_key(case, config)
        if own in self._cases:
            return [own]
        spec = case.spec
        keys = [_matrix_key(config, spec)]
        if spec.bounds_check != MATRIX_MODE:
            keys.append(_mode_key(config, spec))
        if _may_take_small_table(config, spec):
            keys.append(("small", _config_key(config)))
        return keys

    def ready(self, case: Any, config: KernelConfig) -> bool:
        if self.finished:
            return True
        with self._lock:
            return not any(k in self._pending for k in self._needs(case, config))

    def admit(self, case: Any, config: KernelConfig) -> bool:
        """Whether the random search runs this draw now (see the rule above); False: it is deferred."""
        if self.ready(case, config):
            self._admit()
            return True
        if self.deferred >= DEFER_BASE + DEFER_PER_ADMITTED * self.admitted:
            self.wait_for_news(WAIT_S)
            if self.ready(case, config):
                self._admit()
                return True
        else:
            time.sleep(PAUSE_S)
        self.deferred += 1
        return False

    def _admit(self) -> None:
        self.admitted += 1
        if self.first_draw_s is None:
            self.first_draw_s = time.perf_counter() - self._t0

    def admit_or_steer(self, case: Any, config: KernelConfig, base: KernelConfig) -> Optional[tuple[Any, KernelConfig]]:
        """What the random search runs now (see the rule above): the drawn ``case`` under ``config`` when ready,
        else the nearest ready variant (a steered case, under ``config`` or ``base``, the config under test), else
        None after the deferral rule (it may wait for the next group first)."""
        if self.ready(case, config):
            self._admit()
            return case, config
        steered = self.steer(case, config, base)
        if steered is not None:
            self.steered += 1
            self._admit()
            return steered
        return (case, config) if self.admit(case, config) else None

    def steer(self, case: Any, config: KernelConfig, base: KernelConfig) -> Optional[tuple[Any, KernelConfig]]:
        """The ready variant of ``case`` with the fewest of ``STEER_FIELDS`` changed, under ``config`` first, then
        ``base``; None when no finished group takes it."""
        spec = case.spec
        drawn = tuple(getattr(spec, f) for f in STEER_FIELDS)
        checks = tuple(dict.fromkeys((spec.bounds_check, MATRIX_MODE)))  # a mode is steered only back to the matrix's
        options = []
        for cfg_rank in (0, 1) if base != config else (0,):
            for modes, check in itertools.product(_STEER_VALUES, checks):
                values = (*modes, check)
                changed = [a != b for a, b in zip(values, drawn)]
                if any(changed) or cfg_rank:  # the drawn case under its own config is not ready
                    options.append((cfg_rank, sum(changed), changed, values))
        for cfg_rank, n_changed, _, values in sorted(options, key=lambda o: o[:3]):
            cfg = (config, base)[cfg_rank]
            variant = case.with_modes(**dict(zip(STEER_FIELDS, values))) if n_changed else case
            if self.ready(variant, cfg):
                return variant, cfg
        return None

    def wait_for_news(self, timeout: float) -> None:
        """Block until another group finishes or the build ends, at most ``timeout`` seconds."""
        with self._lock:
            seen = self._news
            self._lock.wait_for(lambda: self.finished or self._news != seen, timeout)

    @property
    def building_started(self) -> bool:
        """Whether the builder has finished a group yet (or the build ended)."""
        return self.finished or self._news > 0

    def wait(self, case: Any, config: KernelConfig, timeout: float) -> bool:
        """Block until ``case`` is ready (the tour's cases), at most ``timeout`` seconds; at once (False) while the
        builder has finished no group: the caller's worker then compiles the case's kernels itself."""
        if not self.building_started:
            return self.ready(case, config)
        end = time.perf_counter() + timeout
        with self._lock:
            while not self.finished and any(k in self._pending for k in self._needs(case, config)):
                left = end - time.perf_counter()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 1.0))
        return True

    def build_first(self, pairs: Sequence[tuple[Any, KernelConfig]]) -> Optional["Readiness"]:
        """Build the kernels of ``pairs`` (case, config) now, ahead of the groups left, one group per pair in order
        (``start_cases``); the readiness of those pairs, or None when nothing builds them (the build has ended,
        or no builder runs in this process)."""
        if self.finished or self._first is None or not pairs:
            return None
        first = self._first(list(pairs))
        if first is not None:
            self.built_first += len(pairs)
        return first

    def checked(self) -> None:
        """A case's result came back (tour or search)."""
        if self.first_example_s is None:
            self.first_example_s = time.perf_counter() - self._t0
        self.examples += 1

    def to_dict(self, since: Optional[float] = None) -> dict[str, Any]:
        """``since``: the process's start (time.perf_counter), for the first checked example's time from it."""
        first = None if self.first_example_s is None or since is None else self.first_example_s + self._t0 - since
        draw = None if self.first_draw_s is None or since is None else self.first_draw_s + self._t0 - since
        return {"deferred_draws": self.deferred, "steered_draws": self.steered,
                "examples_before_built": self.examples_before_built,
                "first_example_since_start_seconds": None if first is None else round(first, 1),
                "first_draw_since_start_seconds": None if draw is None else round(draw, 1),
                "seconds_to_built": None if self.seconds_to_built is None else round(self.seconds_to_built, 1),
                "built_first": self.built_first,
                "first_example_seconds": None if self.first_example_s is None else round(self.first_example_s, 1),
                "built": self.built}


@dataclasses.dataclass
class BackgroundWarmup:
    """A warm-up running beside a campaign: ``readiness`` for the campaign, ``result`` once ``join`` or ``stop``
    returns."""

    readiness: Readiness
    result: WarmupResult
    thread: Optional[threading.Thread] = None
    futures: dict = dataclasses.field(default_factory=dict)  # each build's future -> its group's (unit, index)
    cancelled: int = 0
    waiting: int = 0  # groups a follower still waited for when the campaign ended
    stopping: bool = False
    pool: Any = None
    first: Optional["BackgroundWarmup"] = None  # a list built ahead of this build's groups (``build_first``)
    _make_pool: Any = None  # the pool factory and group runner, for ``build_first``'s own build
    _runner: Any = None

    def join(self, timeout: Optional[float] = None) -> WarmupResult:
        if self.thread is not None:
            self.thread.join(timeout)
        return self.result

    def build_first(self, pairs: list) -> Optional[Readiness]:
        """Build ``pairs`` beside this build, on a builder of their own at a higher priority
        (``Readiness.build_first``); one list per build."""
        if self.stopping or self.first is not None:
            return None
        make_pool = self._make_pool or functools.partial(_BuilderPool, nice=FIRST_NICE)
        self.first = start_cases(pairs, min(self.result.processes, len(pairs)), runner=self._runner,
                                 executor=make_pool, interpreted=False)
        return self.first.readiness

    def stop(self) -> WarmupResult:
        """The campaign ended: drop the groups not finished (their units get no stamp) and end the builder."""
        if self.first is not None:
            self.first.stop()
        self.stopping = True
        self.cancelled = len({self.futures[f] for f in list(self.futures) if _cancel(f)})  # groups, not pieces
        if self.pool is not None and self.cancelled:
            _terminate(self.pool)  # groups in flight too: Triton writes each cache file whole, so none is torn
        self.join(timeout=30)
        self.result.not_built = self.waiting + len({g for f, g in self.futures.items()
                                                    if f.cancelled() or (f.done() and f.exception() is not None)})
        return self.result


def start(configs: Sequence[KernelConfig], tours: Sequence[KernelConfig], processes: Optional[int] = None,
          progress: Optional[Callable[[str], None]] = None, runner: Optional[Callable[[list], dict]] = None,
          executor: Optional[Callable[[int], cf.Executor]] = None, interpreted: Optional[bool] = None,
          force: bool = False, stamped: Optional[bool] = None) -> BackgroundWarmup:
    """Start building ``configs``' groups and ``tours``' opening-tour groups in the background; returns at once.
    Groups with a group stamp are not built again. Where another process holds the cache directory's builder
    lock (``fuzz.compile.stamp.builder_lock``), this one follows that build's group stamps instead, and
    builds what is left if that process ends first. ``runner`` (a group's builder), ``executor`` (a pool
    factory), ``interpreted`` and ``stamped`` (read and write stamps; default: unless ``runner`` is given)
    exist for tests."""
    readiness = Readiness()
    if interpreted is None:
        from tbe.backend import INTERPRETED as interpreted  # noqa: N811
    if interpreted:
        return BackgroundWarmup(readiness, WarmupResult(skipped="kernels run in Triton's interpreter: nothing to compile"))
    p = plan([("tour", c) for c in tours] + [("matrix", c) for c in configs], force=force,
             stamped=runner is None if stamped is None else stamped)
    groups = _order(p.indexed_groups(), configs[0] if configs else None)
    n = processes or default_processes()
    res = WarmupResult(cases=sum(len(g) for _, _, g in groups), groups=len({(u, i) for u, i, _ in groups}), processes=n,
                       reused=len(p.units) - len(p.todo))
    readiness.know_cases([k for u in p.units if u[0] in PER_CASE for g in p.unit_groups(u) for k in group_keys(g, True)])
    readiness.plan([k for u, _, g in groups for k in group_keys(g, u[0] in PER_CASE)])
    if not groups:
        res.stamped_at = p.newest_stamp()
        return BackgroundWarmup(readiness, res)
    return _begin(readiness, res, p, groups, runner, executor, progress)


def start_cases(pairs: Sequence[tuple[Any, KernelConfig]], processes: Optional[int] = None,
                progress: Optional[Callable[[str], None]] = None, runner: Optional[Callable[[list], dict]] = None,
                executor: Optional[Callable[[int], cf.Executor]] = None,
                interpreted: Optional[bool] = None) -> BackgroundWarmup:
    """Build the kernels of a fixed list of (case, config) pairs in the background, one group per pair in the
    list's order, each ready on its own (``PER_CASE``): a caller that runs the list in that order (the gate)
    waits for each case's own build, not for a whole warm-up. Nothing is stamped (the list is the caller's);
    a kernel two pairs share is built once (``fuzz.compile.kernel_cache``). Returns at once."""
    readiness = Readiness()
    if interpreted is None:
        from tbe.backend import INTERPRETED as interpreted  # noqa: N811
    if interpreted:
        return BackgroundWarmup(readiness, WarmupResult(skipped="kernels run in Triton's interpreter: nothing to compile"))
    unique = {repr(pair): WarmCase(pair[1], pair[0]) for pair in pairs}  # first use kept, duplicates dropped
    groups = [(("cases", None), i, [c]) for i, c in enumerate(unique.values())]
    res = WarmupResult(cases=len(groups), groups=len(groups), processes=processes or default_processes())
    readiness.plan([k for _, _, g in groups for k in group_keys(g, True)])
    if not groups:
        return BackgroundWarmup(readiness, res)
    return _begin(readiness, res, plan([], stamped=False), groups, runner, executor, progress)


def _begin(readiness: Readiness, res: WarmupResult, p: Any, groups: list, runner: Any, executor: Any,
           progress: Any) -> BackgroundWarmup:
    """The build of ``groups`` started in its own thread (``_drive``); readiness unfinished until it ends."""
    readiness.finished = False
    handle = BackgroundWarmup(readiness, res, _make_pool=executor, _runner=runner)
    readiness._first = handle.build_first
    handle.thread = threading.Thread(target=_drive, args=(handle, p, groups, runner, executor or _process_pool, progress),
                                     name="tbe-fuzz-warmup", daemon=True)
    handle.thread.start()
    return handle


STEER_TARGET = ("fp32", "fp32", "int64")  # the base config's dtypes built first: every steered draw can take them


def _order(groups: list, base: Optional[KernelConfig]) -> list:
    """The opening tour's groups first (in tour order), its second half taking turns with the base config's groups
    of ``STEER_TARGET`` and its small-table groups, which any not-ready draw can be steered to, split into
    ``_pieces`` (``_piece_rank``): a tour case still building runs between draws, so the draws should not wait
    for the whole tour. Then the base config's other groups (about half the draws use it), then the rest, each
    config's largest groups first so that the slowest work starts earliest."""
    tour = [g for g in groups if g[0][0] == "tour"]

    def target(g) -> bool:
        spec = g[2][0].spec.spec
        return g[0][1] == base and (g[2][0].small or (spec.weights_dtype, spec.output_dtype,
                                                             spec.index_dtype) == STEER_TARGET)

    matrix = [g for g in groups if g[0][0] == "matrix"]
    first = sorted((p for g in matrix if target(g) for p in _pieces(g)), key=_piece_rank)
    rest = sorted((g for g in matrix if not target(g)), key=lambda g: (g[0][1] != base, -len(g[2])))
    half = (len(tour) + 1) // 2
    turns = [g for pair in itertools.zip_longest(tour[half:], first) for g in pair if g is not None]
    return tour[:half] + turns + rest


_KEY_RANK = {"matrix": 0, "mode": 1, "small": 2}  # what a steered draw needs first: its pooling and optimizer


def _piece_rank(entry: tuple) -> tuple:
    """Matrix pieces first (any draw can be steered to one), then bounds-check modes (a draw can be steered back
    to WARNING), then the small-table groups (to other weights); the smallest first within each."""
    return _KEY_RANK[_warm_key(entry[2][0])[0]], len(entry[2])


def _pieces(entry: tuple) -> list:
    """A group ``(unit, index, cases)`` as one group per readiness key, same unit and index (its stamp waits for
    every piece): pieces build in parallel, and a key is ready as soon as its own piece is."""
    u, i, g = entry
    by_key: dict[tuple, list] = {}
    for c in g:
        by_key.setdefault(_warm_key(c), []).append(c)
    return [(u, i, piece) for piece in by_key.values()]


POLL_S = 0.5  # how often a follower reads the builder's group stamps
WARMUP_NICE = 10  # the warm-up's builder: below the search's driver and worker
STOP_GRACE_S = 3.0  # how long a stopped builder may take to end its pool before its group is killed
FIRST_NICE = 5  # a list built first (``build_first``): below the search, above the warm-up (about 3x its share)


def _drive(handle: BackgroundWarmup, p: Any, groups: list, runner: Any, make_pool: Any, progress: Any) -> None:
    """Follow another process's build while it holds the builder lock; build what is left once this process
    holds it (at once, where no other builder runs)."""
    from fuzz.compile import stamp as warm_stamp

    res, readiness = handle.result, handle.readiness
    t0 = time.perf_counter()
    lock: Optional[int] = None
    left = list(groups)  # none stamped when the plan was read
    try:
        while p.keys and left and not handle.stopping:  # an unstamped plan (tests) has no lock to take
            lock = warm_stamp.builder_lock()
            if lock is not None:
                if res.followed_seconds:  # the builder ended: what it stamped since the last look
                    left = _take_built(p, readiness, left)
                break
            if not res.followed_seconds and progress is not None:
                progress("  warm-up: another process is building in this cache; following its build")
            time.sleep(POLL_S)
            res.followed_seconds = time.perf_counter() - t0
            left = _take_built(p, readiness, left)
        handle.waiting = len({(u, i) for u, i, _ in left}) if handle.stopping else 0
        if left and not handle.stopping:
            _build(handle, p, left, runner or run_group, make_pool, progress)
    finally:
        if lock is not None:
            os.close(lock)
        res.seconds = time.perf_counter() - t0
        readiness.all_done(built=not handle.stopping)
    p.stamp(res.seconds)  # a unit whose groups are all stamped, by this run or another


def _take_built(p: Any, readiness: Readiness, groups: list) -> list:
    """Make ready the groups another process has stamped since; the rest, still to build."""
    left = []
    for u, i, g in groups:
        if p.group_built(u, i):
            readiness.done(group_keys(g, u[0] in PER_CASE))
        else:
            left.append((u, i, g))
    return left


def _build(handle: BackgroundWarmup, p: Any, groups: list, run_group: Any, make_pool: Any, progress: Any) -> None:
    """Build ``groups`` in ``make_pool(processes)``; each finished group is stamped and made ready."""
    res, readiness = handle.result, handle.readiness
    t0 = time.perf_counter()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    pieces_left = collections.Counter((u, i) for u, i, _ in groups)  # a group may build as several pieces
    failed: set = set()
    with make_pool(res.processes) as pool:
        handle.pool = pool
        futures = {pool.submit(run_group, g): (u, i, g) for u, i, g in groups}
        handle.futures.update({f: (u, i) for f, (u, i, _) in futures.items()})
        getattr(pool, "start", lambda: None)()  # the builder process starts once every group is queued
        if handle.stopping:  # stop() came before the futures existed
            handle.cancelled = len({futures[f][:2] for f in futures if _cancel(f)})
        for k, fut in enumerate(cf.as_completed(futures), 1):
            u, i, g = futures[fut]
            try:
                r = fut.result()
            except cf.CancelledError:
                continue
            except Exception as e:  # noqa: BLE001  (a worker that died: say so, keep the rest)
                if not handle.stopping:  # terminated by stop(): counted there, not an error
                    res.errors.append(f"warm-up worker failed: {type(e).__name__}: {e}")
            else:
                if not res.add(r):
                    failed.add((u, i))
                pieces_left[u, i] -= 1
                if not pieces_left[u, i] and (u, i) not in failed:
                    p.stamp_group(u, i)
            readiness.done(group_keys(g, u[0] in PER_CASE))  # a failed group is not retried: its cases JIT
            if progress is not None and k % 32 == 0:
                built = res.groups - sum(1 for n in pieces_left.values() if n)
                progress(f"  warm-up (background): {built}/{res.groups} groups, {time.perf_counter() - t0:.0f}s")


def _cancel(fut: cf.Future) -> bool:
    """Cancel a group not started and tell its waiters: ``Future.cancel`` alone wakes no ``as_completed``
    (only ``set_running_or_notify_cancel`` does, which our builder pool never calls for a cancelled group)."""
    if not fut.cancel():
        return False
    try:
        fut.set_running_or_notify_cancel()
    except RuntimeError:  # already notified (a thread pool's worker did it)
        pass
    return True


def _terminate(pool: Any) -> None:
    """End a pool's work now: the builder's process group, or a test's thread pool (nothing to kill)."""
    kill = getattr(pool, "kill", None)
    if kill is not None:
        kill()


class _BuilderPool:
    """Groups built in a builder process of its own (its own process group, with its own process pool), results
    read back over a queue. Why not a ``ProcessPoolExecutor`` here: stopping one whose workers are busy, by
    terminating them, can leave its shutdown (and the interpreter's exit) waiting forever; a process group is
    killed whole, and the driver holds no executor that could wait."""

    def __init__(self, n: int, nice: int = WARMUP_NICE) -> None:
        self.n = n
        self.nice = nice
        self._items: list = []
        self._futures: list[cf.Future] = []
        self._proc: Any = None

    def __enter__(self) -> "_BuilderPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._proc is not None:
            self._proc.join(timeout=5)
            self.kill()

    def submit(self, fn: Callable, group: Any) -> cf.Future:
        fut: cf.Future = cf.Future()
        self._items.append((fn, group))
        self._futures.append(fut)
        return fut

    def start(self) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self._queue = ctx.Queue()
        self._proc = ctx.Process(target=_builder_main, args=(self._items, self.n, self._queue, self.nice))
        self._proc.start()
        threading.Thread(target=self._read, name="tbe-fuzz-warmup-reader", daemon=True).start()

    def _read(self) -> None:
        import queue as queue_mod

        while True:
            try:
                msg = self._queue.get(timeout=1.0)
            except queue_mod.Empty:
                if self._proc.is_alive():
                    continue
                msg = ("end",)
            if msg[0] == "end":
                for fut in self._futures:
                    if not fut.done() and fut.set_running_or_notify_cancel():
                        fut.set_exception(RuntimeError("the warm-up's builder process ended before this group"))
                return
            i, ok, payload = msg
            fut = self._futures[i]
            if not fut.done() and fut.set_running_or_notify_cancel():
                fut.set_result(payload) if ok else fut.set_exception(RuntimeError(payload))

    def kill(self) -> None:
        """Stop the build now: SIGTERM asks the builder to kill its pool's workers and exit, which releases its
        pool's semaphores (killed outright, it leaves them for the resource tracker to report as leaked at the
        campaign's exit); then whatever is left of its process group is killed."""
        import signal

        if self._proc is None or self._proc.pid is None:
            return
        if self._proc.is_alive():
            try:
                os.kill(self._proc.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
            self._proc.join(timeout=STOP_GRACE_S)
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._proc.join(timeout=5)


def _builder_main(items: list, n: int, out: Any, nice: int) -> None:
    """The builder process: a group of its own (so ``kill`` takes its pool too), at a lower priority than the
    search (``nice``), groups built ``n`` at a time."""
    import multiprocessing as mp

    import signal

    os.setpgrp()
    try:
        os.nice(nice)  # the search's driver and worker come first; the build takes the cores they leave
    except OSError:
        pass

    def stop(*_: Any) -> None:  # _BuilderPool.kill: the workers go now, the pool's semaphores on the way out
        for child in mp.active_children():
            child.kill()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    with cf.ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(fn, group): i for i, (fn, group) in enumerate(items)}
        for fut in cf.as_completed(futures):
            try:
                out.put((futures[fut], True, fut.result()))
            except Exception as e:  # noqa: BLE001  (reported to the driver as that group's failure)
                out.put((futures[fut], False, f"{type(e).__name__}: {e}"))
    out.put(("end",))


def _process_pool(n: int) -> _BuilderPool:
    return _BuilderPool(n)
