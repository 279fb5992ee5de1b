"""Warm-up: build every kernel specialization a campaign can reach into Triton's disk cache.

A campaign that compiles while it searches spends its time in the compiler (about half of
a minute-long GPU campaign did). The warm-up enumerates what the campaign can draw under
its KernelConfig(s): weights, output and index dtypes, per-sample weights, pooling,
optimizer, bounds-check mode (standalone or fused), every dimension bucket and rows wider
than the largest, the small-table path, the long tiers the config routes to. It then runs
one tiny case per combination (forward, backward and update; no oracle) in parallel worker
processes, so every specialization lands in the disk cache and the search only loads.
Which launches a case makes depends on host-known values only, so tiny cases reach the
same specializations as large ones (``fuzz.compile.specializations`` checks that on the CPU).
Under the interpreter nothing is compiled and the warm-up does nothing.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import time
from typing import Any, Callable, Optional, Sequence

from cases import CaseSpec, HotRow
from tbe.buckets import next_pow2
from tbe.layout import vector_width
from tbe.modes import FloatDtype, IndexDtype, Optimizer, Pooling, parse_float_dtype
from tbe.config import KernelConfig
from tbe.transpose import NARROW_KEYS

MODES = ("warning", "ignore", "fatal", "none")
MATRIX_MODE = MODES[0]  # the bounds-check mode of every matrix case; the others get cases of their own


@dataclasses.dataclass(frozen=True)
class WarmCase:
    config: KernelConfig
    spec: Any  # a CaseSpec, or a tour's bad-input case
    backward: bool = True
    small: bool = False  # one of ``small_table_cases``: its own readiness key (``fuzz.compile.background``)


def _shapes(config: KernelConfig, weighted: bool, weights_dtype: str) -> tuple[list, list]:
    """Tables covering every dimension bucket (each launch is per bucket); the per-sample-weight
    gradient's tile follows the widest table, so weighted cases also take each prefix; once more with
    a row wider than the largest bucket (the column-loop variant); and every bucket both with rows
    that 16-byte vectors fit (``tbe.layout.row_vector``: every D and the output stride a multiple)
    and without. Returns (shapes for every pooling and optimizer, shapes for each bounds-check mode):
    the modes take the column-loop layout and, where the check is fused, the vector one too, so the
    checked forward is built both ways."""
    buckets = list(config.dim_buckets)
    full = tuple((4, b) for b in buckets)
    wide = full + ((4, buckets[-1] + 1),)
    prefixes = [full[: k + 1] for k in range(len(buckets))] if weighted else [full]
    shapes = prefixes + [wide]
    vec = vector_width(parse_float_dtype("weights_dtype", weights_dtype).itemsize)
    aligned = tuple((rows, d) for rows, d in full if d % vec == 0)
    if aligned == full:
        shapes.append(full + ((4, 1),))  # every bucket's kernels once more on an unaligned layout
    elif aligned:
        shapes.append(aligned)  # the buckets whose rows vectors fit, on an aligned layout
    fused = [aligned] if aligned and config.fused_bounds_check else []  # else the checks leave the forward alone
    return shapes, list(dict.fromkeys([wide] + fused))


def _alone(config: KernelConfig) -> list:
    """Each bucket alone, its rows aligned to 16-byte vectors and not, and the wide row alone: the short tier of a
    module with several buckets first searches its bucket's runs (``tbe.backward_short.bucket_runs``, a constexpr),
    so one-bucket modules have short-tier kernels of their own."""
    buckets = list(config.dim_buckets)
    return ([((4, b),) for b in buckets] + [((4, b - 1),) for b in buckets if b > 1]
            + [((4, buckets[-1] + 1),)])


def key_width_tables(config: KernelConfig) -> list:
    """One table just past each narrow sort-key dtype's rows (``tbe.transpose.NARROW_KEYS``), alone and beside a
    row of the next bucket: the matrix's tables are tiny, so their keys take the narrowest dtype, and these reach
    the transpose's wider-key kernels, for one bucket and for several (whose runs carry their bucket)."""
    first, *rest = config.dim_buckets
    out = []
    for most, _ in NARROW_KEYS:
        out.append(((most + 1, first),))
        if rest:
            out.append(((most + 1, first), (1, rest[0])))
    return out


def _spec(tables, w, o, idx, weighted, pooling, opt, mode, hot: int = 0) -> CaseSpec:
    return CaseSpec(tables=tables, batch_size=2, pooling=pooling, weights_dtype=w, output_dtype=o,
                    index_dtype=idx, weighted=weighted, optimizer=opt, bounds_check=mode,
                    length_profile="fixed", max_length=2, steps=1, seed=1,
                    hot_rows=(HotRow(0, 0, hot),) if hot else ())


def _input_forms(spec: CaseSpec) -> list[CaseSpec]:
    """``spec`` and its forms with features sharing its first table and with a batch size per feature (VBE),
    alone and together: each is a constexpr of the kernels that read the batch by feature."""
    shared = dataclasses.replace(spec, feature_table_map=(0,) + tuple(range(len(spec.tables))))
    forms = [spec, shared]
    for s in (spec, shared):
        sizes = tuple(spec.batch_size if f % 2 == 0 else 1 for f in range(s.num_features))
        forms.append(dataclasses.replace(s, batch_size_per_feature=sizes))
    return forms


def group_cases(config: KernelConfig, w: str, o: str, idx: str, weighted: bool) -> list[WarmCase]:
    """Every case of one (weights, output, index dtype, weighted) group, for one worker: the cases in
    a group share forward kernels, so one process compiles each of those once."""
    out = []
    shapes, mode_shapes = _shapes(config, weighted, w)
    hots = [0]
    if config.fused_long_tier and config.fused_long_min_lookups > 0:
        hots.append(config.fused_long_min_lookups)  # the fused tier runs only from this many lookups
    for pooling, opt, tables, hot in itertools.product(Pooling, Optimizer, shapes, hots):
        for spec in _input_forms(_spec(tables, w, o, idx, weighted, pooling, opt, MATRIX_MODE, hot)):
            out.append(WarmCase(config, spec))
    for pooling, opt, tables in itertools.product(Pooling, Optimizer, _alone(config)):
        for spec in _input_forms(_spec(tables, w, o, idx, weighted, pooling, opt, MATRIX_MODE)):
            out.append(WarmCase(config, spec))
    for tables in key_width_tables(config):
        for spec in _input_forms(_spec(tables, w, o, idx, weighted, "sum", Optimizer.EXACT_SGD, MATRIX_MODE)):
            out.append(WarmCase(config, spec))
    # the bounds check's kernels (and the fused forward's flags) per mode
    for mode, tables in itertools.product([m for m in MODES if m != MATRIX_MODE], mode_shapes):
        for spec in _input_forms(_spec(tables, w, o, idx, weighted, "sum", Optimizer.EXACT_SGD, mode)):
            out.append(WarmCase(config, spec))
    return out


def small_table_cases(config: KernelConfig) -> list[list[WarmCase]]:
    """The counting path: one table per (rows tile, column tile), every index dtype, pooling and mode in a forward,
    and where the backward counts too, a step of each index dtype, pooling and optimizer. One group per tile pair:
    each case compiles a kernel of its own, so one group of all of them was the warm-up's last and longest."""
    if not config.small_table_path:
        return []
    c = config
    rows = sorted({max(16, next_pow2(e)): e for e in range(1, c.small_table_max_rows + 1)}.values())
    dims = sorted({max(16, next_pow2(d)): d for d in range(c.small_table_min_dim, c.small_table_max_dim + 1)}.values())
    length = max(1, c.small_table_min_pooling)
    groups = []
    for e, d in itertools.product(rows, dims):
        group = []
        for idx, pooling, mode in itertools.product(IndexDtype, Pooling, MODES):
            spec = CaseSpec(tables=((e, d),), batch_size=1, pooling=pooling, weights_dtype="fp16",
                            output_dtype="fp32", index_dtype=idx, length_profile="fixed", max_length=length,
                            bounds_check=mode, seed=1)
            group.append(WarmCase(config, spec, backward=False, small=True))
        for idx, pooling, opt in itertools.product(IndexDtype, Pooling, Optimizer) if c.small_table_backward else ():
            spec = CaseSpec(tables=((e, d),), batch_size=1, pooling=pooling, weights_dtype="fp16",
                            output_dtype="fp32", index_dtype=idx, length_profile="fixed", max_length=length,
                            optimizer=opt, bounds_check=MATRIX_MODE, seed=1)
            group.append(WarmCase(config, spec, small=True))
        groups.append(group)
    return groups


def warm_groups(configs: Sequence[KernelConfig]) -> list[list[WarmCase]]:
    """All warm-up cases of ``configs``, in groups meant for one worker each."""
    groups = []
    for config in dict.fromkeys(configs):
        for w, o, idx, weighted in itertools.product(FloatDtype, FloatDtype, IndexDtype, (False, True)):
            groups.append(group_cases(config, w, o, idx, weighted))
        groups += small_table_cases(config)
    return groups


def exercise(case: Any, config: KernelConfig, backward: bool = True) -> None:
    """Run ``case`` (a CaseSpec or a bad-input case) through the module the way ``fuzz.judge.differential``
    does (forward, then the step). A FATAL bounds check stops at its error, as it would there."""
    import torch

    from cases import tensors
    from fuzz.sut import build_module
    from tbe.bounds_check import BoundsCheckError

    t = tensors(case, steps=backward, weights=False)
    spec = case.spec
    module = build_module(spec, config)
    dev = module.device
    psw = None
    steps = t.grad_outputs
    if t.per_sample_weights is not None:
        psw = t.per_sample_weights.to(dev).clone().requires_grad_(bool(steps))
    try:
        with torch.set_grad_enabled(bool(steps)):
            out = module(t.indices.to(dev), t.offsets.to(dev), psw, batch_size_per_feature=spec.batch_size_per_feature)
    except BoundsCheckError:
        return
    if steps:
        out.backward(steps[0].to(dev))


def tour_groups(config: KernelConfig, size: int = 1) -> list[list[WarmCase]]:
    """The opening tour's own cases under ``config`` (both of its size budgets), one per group by default: the
    tour's overrides lie outside the profiles, its cases reach only a handful of kernels, and a campaign's
    tour runs each case as soon as its own group is built."""
    from cases import split_draw
    from strategies.tour import tour

    seen: dict[str, WarmCase] = {}
    for budget in (1, 1 << 62):
        for drawn in tour(config, budget):
            case, cfg, _ = split_draw(drawn, config)
            seen.setdefault(repr((case, cfg)), WarmCase(cfg, case))
    cases = list(seen.values())
    return [cases[i:i + size] for i in range(0, len(cases), size)]


Unit = tuple[str, KernelConfig]  # ("matrix", config): its warm_groups; ("tour", config): its tour_groups


def campaign_units(bases: Sequence[KernelConfig], extra: Sequence[KernelConfig] = ()) -> list[Unit]:
    """What campaigns under ``bases`` run: each base and the override profiles drawn on it, and each
    base's opening tour (plus the ``extra`` configs, as they are)."""
    from strategies.config_space import campaign_configs

    configs = [c for b in bases for c in campaign_configs(b)] + list(extra)
    return [("matrix", c) for c in dict.fromkeys(configs)] + [("tour", b) for b in dict.fromkeys(bases)]


def unit_groups(unit: Unit) -> list[list[WarmCase]]:
    """The warm-up cases of one unit, in groups meant for one worker each."""
    kind, config = unit
    return warm_groups([config]) if kind == "matrix" else tour_groups(config)


@dataclasses.dataclass
class Plan:
    """Which units a warm-up builds: those whose finished warm-up Triton's cache does not hold a stamp of
    (``fuzz.compile.stamp``), unless forced. ``keys`` is empty for an unstamped plan (tests), which writes none."""

    units: list[Unit]
    keys: dict[Unit, str]
    stamps: dict[Unit, Optional[dict[str, Any]]]
    _groups: dict = dataclasses.field(default_factory=dict, repr=False)  # unit -> its groups, enumerated once

    def unit_groups(self, unit: Unit) -> list[list[WarmCase]]:
        if unit not in self._groups:
            self._groups[unit] = unit_groups(unit)
        return self._groups[unit]

    @property
    def todo(self) -> list[Unit]:
        return [u for u in self.units if self.stamps[u] is None]

    def indexed_groups(self) -> list[tuple[Unit, int, list[WarmCase]]]:
        """The groups still to build: those of unstamped units without a group stamp, with their index."""
        return [(u, i, g) for u in self.todo for i, g in enumerate(self.unit_groups(u)) if not self.group_built(u, i)]

    def group_built(self, unit: Unit, index: int) -> bool:
        from fuzz.compile import stamp as warm_stamp

        return unit in self.keys and warm_stamp.group_done(self.keys[unit], index)

    def stamp_group(self, unit: Unit, index: int) -> None:
        """Mark one finished group (a unit's stamp waits for all of them)."""
        from fuzz.compile import stamp as warm_stamp

        if unit in self.keys:
            warm_stamp.write_group(self.keys[unit], index)

    def newest_stamp(self) -> Optional[str]:
        return max((s.get("stamped_at", "?") for s in self.stamps.values() if s), default=None)

    def stamp(self, seconds: float) -> None:
        """Stamp every unit whose groups all have a group stamp (built without a failure, by this run or an
        earlier one)."""
        from fuzz.compile import stamp as warm_stamp

        todo = self.todo
        for u in todo:
            if u in self.keys and all(self.group_built(u, i) for i in range(len(self.unit_groups(u)))):
                warm_stamp.write(self.keys[u], {"seconds": round(seconds, 1), "units_in_run": len(todo)})


def plan(units: Sequence[Unit], force: bool = False, stamped: bool = True) -> Plan:
    """The ``Plan`` of ``units`` (duplicates dropped, order kept); ``stamped=False`` reads and writes no stamp."""
    units = list(dict.fromkeys(units))
    if not stamped:
        return Plan(units, {}, {u: None for u in units})
    from fuzz.compile import stamp as warm_stamp

    env = warm_stamp.environment()
    keys = {u: warm_stamp.stamp_key([u[1]], tag=u[0], env=env) for u in units}
    return Plan(units, keys, {u: None if force else warm_stamp.find(keys[u]) for u in units})


def run_group(cases: list[WarmCase]) -> dict[str, Any]:
    """Worker: run one group's cases, count what Triton compiled and loaded."""
    from fuzz.compile.watch import watch
    from tbe import faults

    t0 = time.perf_counter()
    errors = []
    with faults.allow(), watch() as counts:
        for c in cases:
            try:
                exercise(c.spec, c.config, c.backward)
            except Exception as e:  # noqa: BLE001  (a kernel that fails to build is reported, not hidden)
                errors.append(f"{type(e).__name__}: {str(e)[:300]} (case {json.dumps(c.spec.to_dict())})")
    return {"cases": len(cases), "compiled": counts.compiled, "loaded": counts.loaded,
            "by_kernel": dict(counts.by_kernel), "errors": errors, "seconds": time.perf_counter() - t0}


@dataclasses.dataclass
class WarmupResult:
    cases: int = 0
    groups: int = 0
    processes: int = 0
    seconds: float = 0.0
    compiled: int = 0
    loaded: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)
    skipped: Optional[str] = None  # why nothing ran (the interpreter)
    reused: int = 0  # configs (and tours) whose warm-up Triton's cache already held (``fuzz.compile.stamp``)
    stamped_at: Optional[str] = None  # set when every config was: the newest stamp
    not_built: int = 0  # groups a background warm-up dropped because its run (a campaign, a gate) ended first
    followed_seconds: float = 0.0  # spent following another process's build (``fuzz.compile.stamp.builder_lock``)

    def text(self) -> str:
        if self.skipped:
            return f"warm-up: skipped ({self.skipped})"
        if self.stamped_at:
            return (f"warm-up: all {self.reused} configs and tours already built in Triton's cache (stamped "
                    f"{self.stamped_at}); nothing compiled")
        line = (f"warm-up: {self.cases} cases in {self.groups} groups on {self.processes} processes, "
                f"{self.seconds:.1f}s; {self.compiled} kernels compiled, {self.loaded} loaded from the disk cache")
        if self.reused:
            line += f"; {self.reused} config(s) or tour(s) already built (stamped)"
        if self.followed_seconds:
            line += f"; followed another process's build for {self.followed_seconds:.1f}s"
        if self.not_built:
            line += f"; {self.not_built} groups not built (the run ended first; Triton's cache keeps what was built)"
        if self.errors:
            line += f"\n  warm-up: {len(self.errors)} case(s) failed; first: {self.errors[0]}"
        return line

    def add(self, group: dict[str, Any]) -> bool:
        """Count one built group's report (``run_group``'s); True when it built without an error."""
        self.compiled += group.get("compiled", 0)
        self.loaded += group.get("loaded", 0)
        self.errors += group.get("errors", [])
        return not group.get("errors")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def default_processes() -> int:
    return max(1, min(32, os.cpu_count() or 1))


def warmup(configs: Sequence[KernelConfig], processes: Optional[int] = None,
           progress: Optional[Callable[[str], None]] = None, force: bool = False,
           tours: Sequence[KernelConfig] = ()) -> WarmupResult:
    """Build every specialization of ``configs`` (and the opening tour's cases under each of ``tours``)
    into Triton's disk cache in parallel processes. A config or tour whose finished warm-up is stamped
    in that cache (same sources, Triton, torch and device) is not run again unless ``force``: loading
    a warm cache case by case costs minutes too."""
    from tbe.backend import INTERPRETED

    if INTERPRETED:
        return WarmupResult(skipped="kernels run in Triton's interpreter: nothing to compile")
    import concurrent.futures as cf
    import multiprocessing as mp

    t0 = time.perf_counter()
    p = plan([("matrix", c) for c in configs] + [("tour", c) for c in tours], force=force)
    groups = p.indexed_groups()
    n = processes or default_processes()
    res = WarmupResult(cases=sum(len(g) for _, _, g in groups), groups=len(groups), processes=n,
                       reused=len(p.units) - len(p.todo))
    if not p.todo:
        res.stamped_at = p.newest_stamp()
        res.seconds = time.perf_counter() - t0
        return res
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # many processes: one thread each
    with cf.ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn")) as pool:
        # largest groups first, so the slowest work starts earliest
        futures = {pool.submit(run_group, g): (u, i)
                   for u, i, g in sorted(groups, key=lambda uig: len(uig[2]), reverse=True)}
        for k, fut in enumerate(cf.as_completed(futures), 1):
            u, i = futures[fut]
            try:
                r = fut.result()
            except Exception as e:  # noqa: BLE001  (a worker that died: say so, keep the rest)
                res.errors.append(f"warm-up worker failed: {type(e).__name__}: {e}")
                continue
            if res.add(r):
                p.stamp_group(u, i)
            if progress is not None and k % 8 == 0:
                progress(f"  warm-up: {k}/{len(groups)} groups, {time.perf_counter() - t0:.0f}s")
    res.seconds = time.perf_counter() - t0
    p.stamp(res.seconds)
    return res


def warm_campaigns(bases: Sequence[KernelConfig], processes: Optional[int] = None,
                   progress: Optional[Callable[[str], None]] = None, force: bool = False,
                   extra: Sequence[KernelConfig] = ()) -> WarmupResult:
    """``warmup`` of what campaigns under ``bases`` run (``campaign_units``)."""
    units = campaign_units(bases, extra)
    return warmup([c for kind, c in units if kind == "matrix"], processes, progress, force=force,
                  tours=[c for kind, c in units if kind == "tour"])
