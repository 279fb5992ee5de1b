"""Aimed cases: one small case built for each reachable coverage cell the search has left at zero.

Random draws reach a rare (kernel path, edge class) pair, such as the fused long tier on bf16 rows or
the small-table path with a run of exactly the threshold, once in hundreds of examples, and a quick
campaign checks a few hundred. So the last share of a campaign's search time (``FILL_SHARE``) goes to
the cells still at zero: for each, ``aimed_case`` composes a case from a recipe for the cell's path
(the shape, dtypes and config that route a batch there) and one for its edge (the D, run length,
bad id, dtype, pooling, optimizer or step count), over the campaign's own configs (the config
under test first, then its override profiles, which a GPU warm-up builds), and keeps the first
candidate that the cell classifier (``fuzz.judge.coverage``, the rule the report counts by) says
hits the cell. Nothing is assumed about the routing: a candidate that misses is dropped.

Written here rather than as a Hypothesis strategy: which cells are at zero is known only while a
campaign runs, and a strategy's distribution is fixed before it starts.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import time
from typing import Any, Iterable, Iterator, Optional

from fuzz.judge import coverage
from fuzz.judge import case_result
from fuzz.judge import Cell, EdgeGroup, loop_cells, run_observed
from cases import BadBatchSpec, BadId, BadIdCase, CaseSpec, Drawn, HotRow, tensors, with_rate_and_steps
from strategies.config_space import usable_profiles
from strategies.tiers import past_counter_fits
from tbe import KernelConfig
from tbe.backend import INTERPRETED
from tbe.loops import LoopClass
from tbe.kernel_loops import all_loops
from tbe.routing import Path, past_counter_length

FILL_SHARE = 0.2     # of a campaign's search time, kept for aimed cases when it has zero cells
SEEDS = (11, 12)     # materialization seeds tried per recipe (an empty bag, say, can depend on it)
PLAN_SECONDS = 1.0   # longest search for one cell's case
LOOP_CANDIDATES = 6  # candidates tried for a loop cell, each run on the kernels to show what it reaches


def aimed_case(cell: Cell, base: KernelConfig, max_lookups: int, fixed: frozenset[str] = frozenset(),
               seconds: float = PLAN_SECONDS) -> Optional[Drawn]:
    """A case (with its config overrides) that hits ``cell`` under ``base`` or one of its override profiles,
    or None when no recipe did within ``seconds``."""
    found = _aimed(cell, base, max_lookups, fixed, seconds)
    return None if found is None else found[0]


@functools.lru_cache(maxsize=4096)
def _aimed(cell: Cell, base: KernelConfig, max_lookups: int, fixed: frozenset[str], seconds: Optional[float],
           candidates: Optional[int] = None) -> Optional[tuple[Drawn, frozenset[Cell]]]:
    """The first candidate that hits ``cell``, with every cell it hits, within ``seconds`` and ``candidates``
    (None: no limit)."""
    end = None if seconds is None else time.perf_counter() + seconds
    for n, drawn in enumerate(_candidates(cell, base, max_lookups, fixed)):
        if (end is not None and time.perf_counter() > end) or (candidates is not None and n >= candidates):
            return None
        try:
            cells = predicted_cells(drawn, base, loops=cell[1].group == EdgeGroup.LOOP)
        except ValueError:  # a recipe the case cannot hold (more hot rows than rows): not a candidate
            continue
        if cell in cells:
            return drawn, cells
    return None


@functools.lru_cache(maxsize=1024)
def predicted_cells(drawn: Drawn, base: KernelConfig, loops: bool = False) -> frozenset[Cell]:
    """The cells ``drawn`` counts in once run (materialized here, no kernel launched); with ``loops``, its loop
    cells too, which only its launches show: its steps run on the kernels, unjudged (``run_observed``)."""
    cfg = drawn.config(base)
    cells = case_result(drawn.case, tensors(drawn.case, weights=False), cfg, 0.0, None, None).cells
    return cells | loop_cells(run_observed(drawn.case, cfg).seen) if loops else cells


def plan(zero: Iterable[Cell], base: KernelConfig, max_lookups: int, fixed: frozenset[str] = frozenset(),
         deadline: Optional[float] = None, loops: bool = False) -> list[tuple[Cell, Drawn]]:
    """Aimed cases for the ``zero`` cells, the paths taken in turn (a short run then aims at every path it can),
    one case per cell it hits first; a case that also hits later cells of ``zero`` covers them (they get none
    of their own). With ``loops`` (the campaign's checks observe loop cells) loop cells are aimed at too, under
    the interpreter only (their candidates run on the kernels: on a GPU that run would compile in this process):
    the classes the draws reach least (a reused workspace, a second pass) before the other cells, the rest after
    them, each loop cell trying at most ``LOOP_CANDIDATES`` candidates. No step depends on the clock but the
    ``deadline``, which only cuts the plan short, so a repeated campaign plans the same cases in the same order."""
    turn: collections.Counter = collections.Counter()
    keyed = []
    for cell in zero:  # the n-th zero cell of a path goes in the n-th round
        group = _plan_group(cell)
        if group != PLAIN and not (loops and INTERPRETED):
            continue
        rank = LOOP_RANK.get(coverage.LOOP_CLASS.get(cell[1]), 0)
        keyed.append(((group, rank, turn[cell[0], group], coverage.PATHS.index(cell[0])), cell))
        turn[cell[0], group] += 1
    out: list[tuple[Cell, Drawn]] = []
    covered: set[Cell] = set()
    for key, cell in sorted(keyed, key=lambda kc: kc[0]):
        if cell in covered:
            continue
        if deadline is not None and time.perf_counter() > deadline:
            break
        loop = key[0] != PLAIN
        found = _aimed(cell, base, max_lookups, fixed, None if loop else PLAN_SECONDS, LOOP_CANDIDATES if loop else None)
        if found is not None:
            out.append((cell, found[0]))
            covered |= found[1]
    return out


RARE_LOOPS, PLAIN, OTHER_LOOPS = 0, 1, 2  # plan groups, in planning order
LOOP_RANK = {LoopClass.REUSE: 0, LoopClass.MORE_PASSES: 1}  # within the rare group: one cell per path first


def _plan_group(cell: Cell) -> int:
    if cell[1].group != EdgeGroup.LOOP:
        return PLAIN
    return RARE_LOOPS if coverage.LOOP_CLASS[cell[1]] in LOOP_RANK else OTHER_LOOPS


# ----------------------------------------------------------------------------- recipes
@dataclasses.dataclass(frozen=True)
class _Recipe:
    """Part of a case: CaseSpec fields, and the D, hot-row count, bad input, features on table 0 or the batch size
    of its last feature (VBE, the others keeping the batch) it needs."""

    fields: tuple[tuple[str, Any], ...] = ()
    dim: Optional[int] = None
    hot: Optional[int] = None
    bad_id: Optional[BadId] = None
    bad_offsets: tuple[str, ...] = ()
    features: Optional[int] = None
    last_batch: Optional[int] = None
    hots: int = 1  # hot rows of ``hot`` lookups each (rows 0, 1, ... of table 0)
    extra: Optional[int] = None  # one more hot row of table 0, of this many lookups, beside the path's own


def _r(dim: Optional[int] = None, hot: Optional[int] = None, bad_id: Optional[BadId] = None,
       bad_offsets: tuple[str, ...] = (), features: Optional[int] = None, last_batch: Optional[int] = None,
       hots: int = 1, extra: Optional[int] = None, **fields: Any) -> _Recipe:
    return _Recipe(tuple(sorted(fields.items())), dim, hot, bad_id, bad_offsets, features, last_batch, hots, extra)


_GENERIC_TABLES = ((24, 8), (10, 5))


def _path_configs(path: Path, base: KernelConfig, fixed: frozenset[str]) -> list[dict[str, Any]]:
    """Overrides of the campaign's configs on which ``path`` can run, the config under test first."""
    wants = {
        Path.FWD_SMALL_TABLE: lambda c: c.small_table_path,
        Path.BWD_SMALL_TABLE: lambda c: c.small_table_path and c.small_table_backward,
        Path.BOUNDS_FUSED: lambda c: c.fused_bounds_check,
        Path.BOUNDS_STANDALONE: lambda c: not c.fused_bounds_check,
        Path.BWD_LONG: lambda c: not c.fused_long_tier,
        Path.BWD_FUSED: lambda c: c.fused_long_tier,
    }.get(path, lambda c: True)
    out = [ov for ov in [{}] + usable_profiles(base, fixed) if wants(base.replace(**ov) if ov else base)]
    if path in (Path.BWD_LONG, Path.BWD_FUSED):  # a short threshold first: long runs stay cheap
        out.sort(key=lambda ov: (base.replace(**ov) if ov else base).long_run_threshold)
    return out


def _path_recipes(path: Path, c: KernelConfig) -> list[_Recipe]:
    if path in (Path.FWD_SMALL_TABLE, Path.BWD_SMALL_TABLE):  # one example takes both
        rows = max(2, min(c.small_table_max_rows, 16))
        dim = max(1, c.small_table_min_dim)
        bags = c.small_table_bags_per_program + 1
        return [_r(tables=((rows, dim),), batch_size=bags, length_profile="fixed",
                   max_length=max(2, c.small_table_min_pooling), weights_dtype="fp16", output_dtype="fp32")]
    if path in (Path.BWD_LONG, Path.BWD_FUSED):
        lookups = max(0, c.fused_long_min_lookups) if path == Path.BWD_FUSED else 0
        batch = max(4, -(-lookups // (2 * 4)))  # two tables of bags of up to four ids
        return [_r(tables=((max(24, c.long_run_threshold), 8), (10, 5)), batch_size=batch, max_length=4,
                   hot=c.long_run_threshold)]
    if path == Path.PSW_GRAD:
        return [_r(tables=_GENERIC_TABLES, batch_size=4, max_length=4, weighted=True)]
    return [_r(tables=_GENERIC_TABLES, batch_size=4, max_length=4), _r(tables=((24, 8),), batch_size=4, max_length=4)]


def _dims_for(value: str, c: KernelConfig) -> list[int]:
    wanted = coverage.Edge(EdgeGroup.DIM, value)
    probe = [1, 2, 3, 5, 7, 9, 17, 33, 65, 129, 1025] + [b + 1 for b in c.dim_buckets]
    return [d for d in dict.fromkeys(probe) if wanted in coverage.dim_edges(d, c)][:2]


def _run_lengths(c: KernelConfig, max_lookups: int) -> list[int]:
    th, ch = c.long_run_threshold, c.chunk_size
    lengths = sorted({th, th + 1, ch, ch + 1, 2 * ch, 2 * ch + 1, 3 * ch + 1})
    return [n for n in lengths if th <= n <= max_lookups // 2]


def _edge_recipes(edge: coverage.Edge, c: KernelConfig, max_lookups: int) -> list[_Recipe]:
    g, v = edge.group, edge.value
    # bad input under MEAN, beside offsets whose repair moves a bag's length: the divisor must follow the repair
    if g in (EdgeGroup.BAD_ID_BAG, EdgeGroup.BAD_ID_SLOT):
        kind, _, where = v.partition(" @ ")
        bad = BadId(kind, "first", where, "first") if g == EdgeGroup.BAD_ID_BAG else BadId(kind, "first", "first", where)
        return [_r(bad_id=bad, bad_offsets=("decreasing",), pooling="mean"), _r(bad_id=bad, pooling="mean"),
                _r(bad_id=bad)]
    if g == EdgeGroup.BAD_OFFSETS:
        return [_r(bad_offsets=(v,), pooling="mean"), _r(bad_offsets=(v,))]
    if g == EdgeGroup.EMPTY_BAG:
        return [_r(length_profile="uniform", max_length=2, batch_size=8), _r(length_profile="empty", hot=2)]
    if g == EdgeGroup.DIM:
        return [_r(dim=d) for d in _dims_for(v, c)]
    if g == EdgeGroup.SEGMENT:
        lo = int(v.split("-")[0].replace(">= ", "").replace("2^20", str(1 << 20)))
        fits = 2 <= lo <= max_lookups - 256
        return [_r()] + ([_r(hot=lo), _r(extra=lo)] if fits else [])  # extra: beside the path's long run
    if edge == coverage.PAST_COUNTER_EDGE:  # exact values: one lost chunk moves a sum by a grid unit
        fits = past_counter_fits(c, max_lookups)
        return [_r(hot=past_counter_length(c), values="dyadic", learning_rate=0.5)] if fits else []
    if g == EdgeGroup.LONG_RUN:
        return [_r(hot=n) for n in _run_lengths(c, max_lookups)]
    if g == EdgeGroup.DTYPE:
        which, _, dtype = v.partition(" ")
        return [_r(**{f"{which}_dtype": dtype})]
    if g == EdgeGroup.POOLING:
        pooling, _, weighting = v.partition(", ")
        return [_r(pooling=pooling, weighted=weighting == "weighted")]
    if g == EdgeGroup.OPTIMIZER:
        return [_r(optimizer=v)]
    if g == EdgeGroup.STEPS:
        return [] if v.startswith("0") else [_r(steps=1 if v == "1" else 2)]
    if g == EdgeGroup.FEATURE_MAP:  # a hot row of table 0, spread over its features
        n = coverage.MANY_FEATURES if v == coverage.FEATURE_MAP_CLASSES[1] else 2
        return [_r(features=n, hot=2 * n), _r(features=n)]
    if g == EdgeGroup.VBE:  # the last feature's batch 0 (or 1) beside the others' whole batch
        last = 0 if v == coverage.VBE_CLASSES[0] else 1
        return [_r(last_batch=last, hot=3), _r(last_batch=last)]
    if g == EdgeGroup.LOOP:
        return _loop_recipes(coverage.LOOP_CLASS[edge], c, max_lookups)
    return []


def _loop_recipes(cls: LoopClass, c: KernelConfig, max_lookups: int) -> list[_Recipe]:
    """Candidates for a loop cell of class ``cls``: which loop one reaches only a run tells (``predicted_cells``),
    so each names a few shapes that give the class in most loops: long runs of whole and partial chunks
    (``bwd_apply_parts`` chunks fill the apply kernel's group), a second step on the same workspace, several long
    runs, many short runs, fixed bag lengths, and rows wider than the largest bucket (the one-run-at-a-time short
    kernel)."""
    th, ch, parts = c.long_run_threshold, c.chunk_size, c.bwd_apply_parts
    wide = c.dim_buckets[-1] + 1
    many = dict(batch_size=32, max_length=8, tables=((4096, 8), (4096, 16)))
    recipes = {
        LoopClass.FIRST_USE: [_r(hot=th)],
        LoopClass.REUSE: [_r(hot=th, steps=2), _r(hot=3 * ch + 1, steps=2)],
        LoopClass.ONE_PASS: [_r(hot=th), _r(dim=wide)],
        LoopClass.MORE_PASSES: [_r(dim=wide, **many), _r(hot=th, hots=9, tables=((17, 8),)), _r(**many),
                                _r(hot=3 * ch + 1)],
        LoopClass.WHOLE: [_r(dim=wide, hot=16), _r(hot=parts * ch), _r(hot=2 * ch),
                          _r(length_profile="fixed", batch_size=4, max_length=16)],
        LoopClass.REMAINDER: [_r(dim=wide, hot=5), _r(hot=parts * ch + 1), _r(hot=2 * ch + 1),
                              _r(length_profile="fixed", batch_size=5, max_length=3)],
    }[cls]
    return [r for r in recipes if r.hot is None or r.hot * r.hots <= max_lookups // 2]


def _compose(path: _Recipe, edge: _Recipe, seed: int) -> Optional[Any]:
    """The case of ``path`` with ``edge`` laid over it (the edge's fields win), or None where they clash."""
    fields = dict(path.fields)
    fields.update(edge.fields)
    tables = tuple(fields.pop("tables", _GENERIC_TABLES))
    dim = edge.dim if edge.dim is not None else path.dim
    if dim is not None:
        tables = tuple((e, dim) for e, _ in tables)
    hot = edge.hot if edge.hot is not None else path.hot
    rows = tables[0][0]
    counts = ([hot] * edge.hots if hot is not None else []) + ([edge.extra] if edge.extra is not None else [])
    if counts:
        if rows < max(2, len(counts)):
            tables = ((max(2, len(counts)), tables[0][1]),) + tables[1:]
        fields["hot_rows"] = tuple(HotRow(0, r, n) for r, n in enumerate(counts))
    if edge.features is not None:  # table 0 read by ``features`` features, the last after the other tables
        fields["feature_table_map"] = tuple(range(len(tables))) + (0,) * (edge.features - 1)
    if edge.last_batch is not None:  # at least two features, the last of its own batch size
        fmap = fields.get("feature_table_map") or tuple(range(len(tables)))
        fmap = fmap if len(fmap) >= 2 else fmap + (0,)
        batch = max(2, fields.get("batch_size", 4))
        fields.update(feature_table_map=fmap, batch_size=batch,
                      batch_size_per_feature=(batch,) * (len(fmap) - 1) + (edge.last_batch,))
    steps = fields.pop("steps", 1)
    rate = fields.pop("learning_rate", 0.05)
    try:
        spec = with_rate_and_steps(CaseSpec(tables=tables, seed=seed, **fields), rate, steps)
    except (TypeError, ValueError):
        return None
    if edge.bad_id is None and not edge.bad_offsets:
        return spec
    spec = dataclasses.replace(spec, batch_size=max(3, spec.batch_size), hot_rows=(), steps=1,
                               length_profile="uniform", max_length=max(2, min(spec.max_length, 4)))
    bad = BadBatchSpec(spec.tables, spec.batch_size, max_length=spec.max_length, index_dtype=spec.index_dtype,
                       weighted=spec.weighted, bad_ids=(edge.bad_id,) if edge.bad_id else (),
                       bad_offsets=edge.bad_offsets, seed=seed)
    try:
        return BadIdCase(spec, bad)
    except ValueError:
        return None


def _candidates(cell: Cell, base: KernelConfig, max_lookups: int, fixed: frozenset[str]) -> Iterator[Drawn]:
    path, edge = cell
    configs = _path_configs(path, base, fixed)
    if coverage.LOOP_CLASS.get(edge) == LoopClass.MORE_PASSES:  # the fewest programs first: work outgrows them soonest
        loops = [lp for lp in all_loops() if lp.path == path and coverage.loop_value(lp.label, LoopClass.MORE_PASSES)
                 == edge.value]
        configs.sort(key=lambda ov: min(lp.programs(base.replace(**ov), 1) for lp in loops))
    elif edge.group == EdgeGroup.LOOP:  # the config under test first: its own tiles and chunks, not the cheapest ones
        configs.sort(key=lambda ov: ov != {})
    for ov in configs:
        c = base.replace(**ov) if ov else base
        seeds = SEEDS[:1] if edge.group == EdgeGroup.LOOP else SEEDS  # a loop candidate costs a run
        for p, e, seed in itertools.product(_path_recipes(path, c), _edge_recipes(edge, c, max_lookups), seeds):
            case = _compose(p, e, seed)
            if case is None or case.spec.expected_lookups() > max_lookups:
                continue
            yield Drawn(case, tuple(sorted(ov.items())))

