"""The coverage matrix: which kernel path each checked example took, crossed with the edge classes it held.

A cell is (kernel path, edge class). An example counts once in every cell of its paths x its edges,
so a cell's count says how many examples ran that path while holding that edge (e.g. the fused long
tier on a table with D not a multiple of its block). ``facts_of`` reads what an example held from its
case and tensors (in the process that materialized them); ``cells_of`` names its cells under the
config it ran with, asking the kernels' own rules which path it took (``tbe.forward_dispatch.choose_path``,
the backward routing through ``backward_paths``, ``tbe.buckets.block_for_dim``), never a copy of them.

Paths: the bounds-check rows count every example whose mode checks ids (valid batches too: the
kernel runs on them); a bad-input batch counts there only, as ``fuzz.judge.check.tiers_of`` labels it.
``reachable(config)`` is the one definition of which cells a campaign under ``config`` can hit: the
cells of witness examples built over the configs the campaign runs (``strategies.config_space``),
so a cell is unreachable only where a rule forbids it (small-table path off, weighted on the
small-table path, a per-sample-weight gradient of an unweighted batch, ...).
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import itertools
from typing import Any, Iterable, Optional, Sequence

import torch

from fuzz.judge.teeth import BANDS, band_label
from cases import BAG_POSITIONS, ID_KINDS, OFFSET_KINDS, AnyCase, BadIdCase, CaseTensors, bag_index
from strategies.tiers import past_counter_fits, tier_report
from tbe import KernelConfig
from tbe.buckets import block_for_dim
from tbe.backend import default_device
from tbe.grid import num_sms
from tbe.loops import CLASSES, LoopClass
from tbe.kernel_loops import all_loops
from tbe.forward_dispatch import choose_path
from tbe.routing import LongEdge, Path, bounds_path, counts_backward, past_counter_length, segment_edges
from tbe.modes import BoundsCheckMode, FloatDtype, IndexDtype, Optimizer, Pooling
from fuzz.glossary import Term, see


class EdgeGroup(enum.Enum):
    __hash__ = object.__hash__
    BAD_ID_BAG = "bad id, bag"
    BAD_ID_SLOT = "bad id, id in bag"
    BAD_OFFSETS = "bad offsets"
    EMPTY_BAG = "empty bag"
    DIM = "D"
    SEGMENT = "SL band"
    LONG_RUN = "long run"
    DTYPE = "dtype"
    POOLING = "pooling"
    OPTIMIZER = "optimizer"
    STEPS = "steps"
    FEATURE_MAP = "feature map"
    VBE = "VBE"
    LOOP = "loop"


@dataclasses.dataclass(frozen=True)
class Edge:
    group: EdgeGroup
    value: str

    @property
    def label(self) -> str:
        return f"{self.group.value}: {self.value}"


Cell = tuple[Path, Edge]

SLOT_POSITIONS = ("first", "last")            # of the ids of a bag
DIM_CLASSES = ("1", "< 4", "not a multiple of BLOCK_D", "wider than the largest bucket", "> 1024")
STEP_CLASSES = ("0 (forward only)", "1", "> 1")
MANY_FEATURES = 4  # features on one table that make "many"
FEATURE_MAP_CLASSES = ("a table shared by features", f"many features (>= {MANY_FEATURES}) on one table")
VBE_CLASSES = ("a feature with batch 0", "batch sizes differ")


# a run past the chunk counter counts only in exact values: under random magnitudes one lost chunk of
# its million lookups hides inside the sum's error bound, so such an example tests nothing there
_LONG_EDGE_VALUES = {e: e.value for e in LongEdge} | {LongEdge.PAST_COUNTER: f"{LongEdge.PAST_COUNTER}, exact values"}


def loop_value(label: str, cls: LoopClass) -> str:
    return f"{label}: {cls.value}"


def loop_cells(seen: Iterable[tuple[Path, str, LoopClass]]) -> frozenset[Cell]:
    """The cells of loop classes a check's launches ran (``fuzz.judge.loop_use``)."""
    return frozenset((p, Edge(EdgeGroup.LOOP, loop_value(label, c))) for p, label, c in seen)


def _pooling_value(pooling: str, weighted: bool) -> str:
    return f"{pooling}, {'weighted' if weighted else 'unweighted'}"


LOOP_CLASS: dict[Edge, LoopClass] = {Edge(EdgeGroup.LOOP, loop_value(loop.label, c)): c
                                     for loop in all_loops() for c in CLASSES[loop.kind]}  # a loop edge's class
EDGES: tuple[Edge, ...] = (
    *(Edge(EdgeGroup.BAD_ID_BAG, f"{k} @ {p}") for k in ID_KINDS for p in BAG_POSITIONS),
    *(Edge(EdgeGroup.BAD_ID_SLOT, f"{k} @ {p}") for k in ID_KINDS for p in SLOT_POSITIONS),
    *(Edge(EdgeGroup.BAD_OFFSETS, k) for k in OFFSET_KINDS),
    Edge(EdgeGroup.EMPTY_BAG, "yes"),
    *(Edge(EdgeGroup.DIM, c) for c in DIM_CLASSES),
    *(Edge(EdgeGroup.SEGMENT, band_label(lo, hi)) for lo, hi in BANDS),
    *(Edge(EdgeGroup.LONG_RUN, _LONG_EDGE_VALUES[e]) for e in LongEdge),
    *(Edge(EdgeGroup.DTYPE, f"weights {d}") for d in FloatDtype),
    *(Edge(EdgeGroup.DTYPE, f"output {d}") for d in FloatDtype),
    *(Edge(EdgeGroup.DTYPE, f"index {d}") for d in IndexDtype),
    *(Edge(EdgeGroup.POOLING, _pooling_value(p.value, w)) for p in Pooling for w in (False, True)),
    *(Edge(EdgeGroup.OPTIMIZER, o.value) for o in Optimizer),
    *(Edge(EdgeGroup.STEPS, s) for s in STEP_CLASSES),
    *(Edge(EdgeGroup.FEATURE_MAP, m) for m in FEATURE_MAP_CLASSES),
    *(Edge(EdgeGroup.VBE, v) for v in VBE_CLASSES),
    *LOOP_CLASS,
)
PATHS: tuple[Path, ...] = tuple(Path)
PAST_COUNTER_EDGE = Edge(EdgeGroup.LONG_RUN, _LONG_EDGE_VALUES[LongEdge.PAST_COUNTER])
_BAD_GROUPS = (EdgeGroup.BAD_ID_BAG, EdgeGroup.BAD_ID_SLOT, EdgeGroup.BAD_OFFSETS)


@dataclasses.dataclass(frozen=True)
class Facts:
    """What one example held, as far as its cells go (read from its case and tensors); ``dims`` and ``rows``
    per feature, as the kernels see the batch."""

    dims: tuple[int, ...]
    rows: tuple[int, ...]
    batch_size: int
    lookups: int
    weights_dtype: str = "fp32"
    output_dtype: str = "fp32"
    index_dtype: str = "int64"
    pooling: str = "sum"
    weighted: bool = False
    optimizer: str = "exact_sgd"
    steps: int = 1
    bounds_check: str = "warning"
    empty_bag: bool = False
    segment_lengths: tuple[int, ...] = ()   # distinct SLs of the backward's runs; () when no backward ran
    exact: bool = False                     # exact-value data (``cases.dyadic``)
    bad: bool = False                       # a bad-input batch (cases.BadIdCase)
    bad_ids: tuple[tuple[str, str, str], ...] = ()  # (kind, bag position, id position) as placed
    bad_offsets: tuple[str, ...] = ()
    features_per_table: int = 1             # the most features reading one table (``feature_table_map``)
    batch_sizes: tuple[int, ...] = ()       # VBE: each feature's number of bags; () for a fixed batch
    loops: frozenset[Cell] = frozenset()    # the loop cells its launches ran (``loop_cells``)


def facts_of(case: AnyCase, t: CaseTensors, segment_hist: Sequence[tuple[int, int]] = (),
             loops: Iterable[tuple[Path, str, LoopClass]] = ()) -> Facts:
    """The facts of ``case`` materialized as ``t``; ``segment_hist`` is the (SL, runs) histogram of its
    backward (``fuzz.judge.check.tiers_of``; empty when no backward ran); ``loops``: the loop classes its
    launches ran (``fuzz.judge.loop_use``; empty when not observed)."""
    spec = case.spec
    off = t.offsets.to(torch.int64)
    empty = bool((off[1:] - off[:-1] == 0).any()) if off.numel() > 1 else False
    bad_ids: tuple = ()
    bad_offsets: tuple = ()
    if case.bad is not None:
        bad_offsets = tuple(case.bad.bad_offsets)
        bad_ids = tuple(_placements(case))
    layout = spec.layout
    fmap = layout.feature_tables
    return Facts(
        dims=tuple(layout.feature_dims), rows=tuple(layout.feature_rows), batch_size=spec.batch_size,
        lookups=int(t.indices.numel()), weights_dtype=spec.weights_dtype, output_dtype=spec.output_dtype,
        index_dtype=spec.index_dtype, pooling=spec.pooling, weighted=spec.weighted, optimizer=spec.optimizer,
        steps=len(t.grad_outputs), bounds_check=spec.bounds_check, empty_bag=empty,
        segment_lengths=tuple(sorted({int(length) for length, _ in segment_hist})), exact=spec.values == "dyadic",
        bad=case.bad is not None, bad_ids=bad_ids, bad_offsets=bad_offsets,
        features_per_table=max(fmap.count(t) for t in set(fmap)),
        batch_sizes=tuple(spec.batch_size_per_feature or ()),
        loops=loop_cells(loops),
    )


def _placements(case: BadIdCase) -> list[tuple[str, str, str]]:
    """(kind, bag position, id position) of each bad id the batch keeps (a later id at the same place
    overwrites an earlier one, as ``cases.materialize_bad`` writes them); positions are within the bags of the
    id's feature (under VBE, its own batch size)."""
    sizes = case.bad.batch_sizes
    placed: dict[tuple[int, int, str], str] = {}
    for bad in case.bad.bad_ids:
        f = case.bad.feature_of(bad)
        placed[(f, bag_index(bad.bag, sizes[f]), bad.element)] = bad.kind
    out = []
    for (f, b, element), kind in placed.items():
        where = [p for p, hit in (("first", b == 0), ("last", b == sizes[f] - 1)) if hit] or ["middle"]
        out += [(kind, w, element) for w in where]
    return out


def backward_paths(segment_lengths: Sequence[int], lookups: int, config: KernelConfig,
                   forward: Path = Path.FWD_GENERIC) -> tuple[frozenset, frozenset]:
    """(backward paths, long-run edges) of runs of these lengths after a forward on ``forward``: the project's
    routing rule, asked once here."""
    return _backward_paths(tuple(int(s) for s in segment_lengths), lookups, config, forward)


@functools.lru_cache(maxsize=4096)  # the reachability witnesses ask for the same runs under each config many times
def _backward_paths(segment_lengths: tuple[int, ...], lookups: int, config: KernelConfig,
                    forward: Path) -> tuple[frozenset, frozenset]:
    report = tier_report(torch.tensor(segment_lengths, dtype=torch.int64), lookups, config, forward)
    return report.tiers, report.edges


def forward_path(f: Facts, config: KernelConfig) -> Path:
    return _forward_path(f, FloatDtype(f.weights_dtype).torch, FloatDtype(f.output_dtype).torch, config)


def _forward_path(f: Facts, weights_dtype: torch.dtype, output_dtype: torch.dtype, config: KernelConfig) -> Path:
    return choose_path(list(f.dims), list(f.rows), f.lookups, f.batch_size, weights_dtype, output_dtype,
                       f.weighted, config, vbe=bool(f.batch_sizes))


def paths_of(f: Facts, config: KernelConfig) -> set[Path]:
    paths = set()
    if f.bounds_check != BoundsCheckMode.NONE.value:
        paths.add(bounds_path(config))
    if f.bad:
        return paths
    forward = forward_path(f, config)
    paths.add(forward)
    if f.segment_lengths:
        paths |= backward_paths(f.segment_lengths, f.lookups, config, forward)[0]
        if f.weighted:
            paths.add(Path.PSW_GRAD)
    return paths


def dim_edges(dim: int, config: KernelConfig) -> set[Edge]:
    hits = (dim == 1, dim < 4, dim % block_for_dim(dim, config) != 0, dim > config.dim_buckets[-1], dim > 1024)
    return {Edge(EdgeGroup.DIM, c) for c, hit in zip(DIM_CLASSES, hits) if hit}


def run_edges(segment_lengths: Sequence[int], lookups: int, config: KernelConfig, exact: bool) -> set[Edge]:
    """SL bands and long-run edges; ``exact``: the example's values are exact (``_LONG_EDGE_VALUES``)."""
    out = set()
    for lo, hi in BANDS:
        if any(lo <= s and (hi is None or s <= hi) for s in segment_lengths):
            out.add(Edge(EdgeGroup.SEGMENT, band_label(lo, hi)))
    if segment_lengths:
        long = backward_paths(segment_lengths, lookups, config)[1] - (set() if exact else {LongEdge.PAST_COUNTER})
        out |= {Edge(EdgeGroup.LONG_RUN, _LONG_EDGE_VALUES[e]) for e in long}
    return out


def _dtype_edges(w: str, o: str, i: str) -> set[Edge]:
    return {Edge(EdgeGroup.DTYPE, f"weights {w}"), Edge(EdgeGroup.DTYPE, f"output {o}"),
            Edge(EdgeGroup.DTYPE, f"index {i}")}


def feature_map_edges(features_per_table: int) -> set[Edge]:
    """The feature-map classes of a batch whose busiest table is read by ``features_per_table`` features."""
    hits = (features_per_table >= 2, features_per_table >= MANY_FEATURES)
    return {Edge(EdgeGroup.FEATURE_MAP, m) for m, hit in zip(FEATURE_MAP_CLASSES, hits) if hit}


def vbe_edges(batch_sizes: Sequence[int]) -> set[Edge]:
    """The VBE classes of a batch whose features have ``batch_sizes`` bags (empty: a fixed batch): a feature of
    batch 0 beside one with bags, and sizes that differ at all."""
    hits = (0 in batch_sizes and max(batch_sizes) > 0, len(set(batch_sizes)) > 1)
    return {Edge(EdgeGroup.VBE, v) for v, hit in zip(VBE_CLASSES, hits) if hit}


def _steps_edge(steps: int) -> Edge:
    return Edge(EdgeGroup.STEPS, STEP_CLASSES[min(steps, 2)])


def edges_of(f: Facts, config: KernelConfig) -> set[Edge]:
    out = {Edge(EdgeGroup.BAD_ID_BAG, f"{k} @ {b}") for k, b, _ in f.bad_ids}
    out |= {Edge(EdgeGroup.BAD_ID_SLOT, f"{k} @ {s}") for k, _, s in f.bad_ids}
    out |= {Edge(EdgeGroup.BAD_OFFSETS, k) for k in f.bad_offsets}
    if f.empty_bag:
        out.add(Edge(EdgeGroup.EMPTY_BAG, "yes"))
    for d in set(f.dims):
        out |= dim_edges(d, config)
    out |= run_edges(f.segment_lengths, f.lookups, config, f.exact)
    out |= _dtype_edges(f.weights_dtype, f.output_dtype, f.index_dtype)
    out.add(Edge(EdgeGroup.POOLING, _pooling_value(f.pooling, f.weighted)))
    out.add(Edge(EdgeGroup.OPTIMIZER, f.optimizer))
    out.add(_steps_edge(f.steps))
    return out | feature_map_edges(f.features_per_table) | vbe_edges(f.batch_sizes)


def cells_of(f: Facts, config: KernelConfig) -> frozenset[Cell]:
    """Every cell the example counts in under ``config`` (the config it ran with)."""
    edges = edges_of(f, config)
    cells = {(p, e) for p in paths_of(f, config) for e in edges}
    return frozenset(cells | f.loops)


# ----------------------------------------------------------------------------- reachability
def reachable(config: KernelConfig, search_config: bool = True, forward_only: bool = False,
              max_lookups: Optional[int] = None, feature_map: bool = True, vbe: bool = True) -> frozenset[Cell]:
    """The cells a campaign under ``config`` can hit: under ``config`` alone, or with ``search_config``
    under every config its config-space search runs (``strategies.config_space.campaign_configs``).
    ``forward_only``: the run also checks forward-only cases (a test session does; a campaign never
    does, since every case it draws runs at least one step), so "0 steps" cells count. ``max_lookups``:
    the most lookups a case may hold (a campaign's budget), so no segment, or lookup count a tier needs,
    is longer (None: no limit). ``feature_map``: the SUT takes features sharing tables (its capability), else
    no feature-map cell is reachable; ``vbe``: likewise for a batch size per feature."""
    if not search_config:
        cells = _reachable_one(config, forward_only, max_lookups)
    else:
        from strategies.config_space import campaign_configs

        cells = frozenset().union(*(_reachable_one(c, forward_only, max_lookups) for c in campaign_configs(config)))
    off = {g for g, on in ((EdgeGroup.FEATURE_MAP, feature_map), (EdgeGroup.VBE, vbe)) if not on}
    return frozenset(c for c in cells if c[1].group not in off)


@functools.lru_cache(maxsize=64)
def _reachable_one(config: KernelConfig, forward_only: bool = False,
                   max_lookups: Optional[int] = None) -> frozenset[Cell]:
    """Cells of witness examples under one config. Witnesses vary what decides a path (the forward's
    shape and dtypes; the backward's segment lengths and lookups; the bounds mode); the edges no rule
    ties to a path (optimizer, step count, index dtype, pooling, an empty bag where the batch has two
    bags) are paired with every path their example can take."""
    c = config
    dims = sorted({1, 2, 3, 5, 7, 1025, 2000, c.small_table_min_dim, c.small_table_max_dim, c.small_table_max_dim + 1,
                   max(1, c.small_table_min_dim - 1)} | {b + k for b in c.dim_buckets for k in (0, 1)})
    all_dims = set().union(*(dim_edges(d, c) for d in dims))
    probe = {d: _forward_path(Facts((d,), (1,), 1, 1 << 20), torch.float16, torch.float32, c) for d in dims}
    dims = list({(frozenset(dim_edges(d, c)), probe[d]): d for d in dims}.values())  # one D per (edges, path)
    # witnesses: every routing edge of the config, each SL band's bounds and the run past the counter, the
    # shortest one of each class (its band, long-run edges and tiers: what its cells depend on)
    cap = float("inf") if max_lookups is None else max_lookups
    past = max_lookups is None or past_counter_fits(c, max_lookups)  # the run and the room an aimed case keeps
    sls = [s for s in sorted(set(segment_edges(c)) | {b for band in BANDS for b in band if b is not None}
                             | {past_counter_length(c)}) if s <= cap and (past or s < past_counter_length(c))]
    sls = sorted({(frozenset(run_edges((s,), s, c, True)), backward_paths((s,), s, c)[0]): s
                  for s in reversed(sls)}.values())
    # and every two of them in one batch: a batch's bands count for each path it takes, so a short run of 4-31
    # lookups beside a long run puts the long tier in the 4-31 band
    seg_sets = [ss for ss in [(s,) for s in sls] + [(a, b) for i, a in enumerate(sls) for b in sls[i + 1:]]
                if sum(ss) <= cap and (past or max(ss) < past_counter_length(c))]
    all_segments = set().union(*(run_edges(ss, sum(ss), c, True) for ss in seg_sets))
    shared = ({Edge(EdgeGroup.OPTIMIZER, o.value) for o in Optimizer}
              | {Edge(EdgeGroup.DTYPE, f"index {i}") for i in IndexDtype})
    cells: set[Cell] = set()

    def add(paths: Iterable[Path], edges: Iterable[Edge]) -> None:
        edges = list(edges)
        cells.update((p, e) for p in paths for e in edges)

    # forward: its path depends on the shape and the dtypes (keys first: hashing edges is the slow part)
    keys = set()
    for d, e, tables, b, mean_len, w, o, weighted in itertools.product(
            dims, (1, c.small_table_max_rows + 1), (1, 2), (1, 2),
            (0, max(1, c.small_table_min_pooling)), FloatDtype, FloatDtype, (False, True)):
        f = Facts(dims=(d,) * tables, rows=(e,) * tables, batch_size=b, lookups=mean_len * b,
                  weights_dtype=w, output_dtype=o, weighted=weighted)
        empty = tables * b >= 2 or not f.lookups  # one bag can be empty while another holds the lookups
        # features past the first read one table, however many (the forward's path counts features only)
        features = MANY_FEATURES if tables > 1 else 1
        keys.add((_forward_path(f, FloatDtype(w).torch, FloatDtype(o).torch, c), d, w, o, weighted, bool(f.lookups), empty, features))
    for path, d, w, o, weighted, lookups, empty, features in keys:
        edges = dim_edges(d, c) | _dtype_edges(w, o, "int64") | shared | feature_map_edges(features)
        if path == Path.FWD_GENERIC and features > 1:  # VBE takes the generic forward, and two features
            edges |= vbe_edges((0, 1))
        edges |= {Edge(EdgeGroup.POOLING, _pooling_value(p.value, weighted)) for p in Pooling}
        edges |= ({_steps_edge(0)} if forward_only else set()) | (
            {_steps_edge(1), _steps_edge(2)} | all_segments if lookups else set())
        if empty:
            edges.add(Edge(EdgeGroup.EMPTY_BAG, "yes"))
        add({path}, edges)
        if lookups and counts_backward(path, c):  # its step: the small-table backward, on the same example
            add({Path.BWD_SMALL_TABLE}, edges - {_steps_edge(0)})
    # backward: its tiers depend on the segment lengths and the lookups
    anything = all_dims | shared | {Edge(EdgeGroup.EMPTY_BAG, "yes"), _steps_edge(1), _steps_edge(2)}
    anything |= feature_map_edges(MANY_FEATURES)  # a run's tier is its length's, whichever features it spans
    anything |= vbe_edges((0, 1))  # and whichever bags hold it
    anything |= {Edge(EdgeGroup.DTYPE, f"{k} {d}") for k in ("weights", "output") for d in FloatDtype}
    seen = set()
    for ss in seg_sets:
        for lookups in sorted(n for n in {sum(ss), max(sum(ss), c.fused_long_min_lookups)} if n <= cap):
            tiers, runs = backward_paths(ss, lookups, c)[0], frozenset(run_edges(ss, lookups, c, True))
            if (tiers, runs) in seen:  # another witness gave these cells already
                continue
            seen.add((tiers, runs))
            edges = runs | anything
            for weighted in (False, True):
                pooled = {Edge(EdgeGroup.POOLING, _pooling_value(p.value, weighted)) for p in Pooling}
                add(tiers | ({Path.PSW_GRAD} if weighted else set()), edges | pooled)
    # bounds check: every example whose mode checks ids, bad-input batches only there
    bad = {e for e in EDGES if e.group in _BAD_GROUPS}
    valid = {e for p, e in cells}
    add({bounds_path(c)}, bad | valid)
    return frozenset(cells | _reachable_loop_cells(c, {p for p, _ in cells}, max_lookups))


def _reachable_loop_cells(c: KernelConfig, paths: set[Path], max_lookups: Optional[int]) -> set[Cell]:
    """The loop cells of the paths a config reaches: every class of every loop its kernels can launch with, but a
    second grid-stride pass only where a case may hold more work items (lookups bound them) than programs."""
    sms = num_sms(default_device())
    out = set()
    for loop in all_loops():
        if loop.path not in paths or not loop.launched(c):
            continue
        for cls in CLASSES[loop.kind]:
            if cls == LoopClass.MORE_PASSES and max_lookups is not None and max_lookups <= loop.programs(c, sms):
                continue
            out.add((loop.path, Edge(EdgeGroup.LOOP, loop_value(loop.label, cls))))
    return out


# ----------------------------------------------------------------------------- counting
@dataclasses.dataclass
class Coverage:
    """Examples per cell over a run; ``to_json`` adds the reachable cells still at zero."""

    counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    examples: int = 0

    def add(self, cells: Iterable[Cell]) -> None:
        self.examples += 1
        self.counts.update(set(cells))

    def merge(self, other: "Coverage") -> None:
        self.examples += other.examples
        self.counts.update(other.counts)

    def rarest(self, cells: Iterable[Cell]) -> Optional[int]:
        """The smallest count among ``cells`` (None for no cells)."""
        return min((self.counts[c] for c in cells), default=None)

    def to_json(self, reachable_cells: frozenset[Cell]) -> dict[str, Any]:
        counts: dict[str, dict[str, int]] = {}
        for (p, e), n in sorted(self.counts.items(), key=lambda kv: cell_order(kv[0])):
            if n:
                counts.setdefault(p.label, {})[e.label] = n
        zero = sorted((c for c in reachable_cells if not self.counts[c]), key=cell_order)
        odd = sorted((c for c in self.counts if self.counts[c] and c not in reachable_cells), key=cell_order)
        return _summary(self.examples, counts, [[p.label, e.label] for p, e in zero], len(reachable_cells),
                        [[p.label, e.label] for p, e in odd])


_EDGE_INDEX = {e: i for i, e in enumerate(EDGES)}
_PATH_INDEX = {p: i for i, p in enumerate(PATHS)}


def cell_order(cell: Cell) -> tuple[int, int]:
    """The report's order of cells: by path, then by edge."""
    return _PATH_INDEX[cell[0]], _EDGE_INDEX[cell[1]]


def _summary(examples: int, counts: dict, zero: list, reachable_count: int, unexpected: list) -> dict[str, Any]:
    return {
        "examples": examples, "paths": [p.label for p in PATHS], "edges": [e.label for e in EDGES],
        "counts": counts, "reachable": reachable_count, "covered": reachable_count - len(zero),
        "zero": zero, "unexpected": unexpected,
    }


def merge_json(parts: Sequence[Optional[dict[str, Any]]]) -> Optional[dict[str, Any]]:
    """The coverage of several runs (``run --workers N``, pytest-xdist workers) from their JSON: counts add
    up; a cell is at zero where some run could reach it and no run hit it (runs may differ in config)."""
    parts = [p for p in parts if isinstance(p, dict)]
    if not parts:
        return None
    counts: dict[str, dict[str, int]] = {}
    hit, expected_hit, zero, odd = set(), set(), set(), set()
    for p in parts:
        unexpected = {tuple(c) for c in p["unexpected"]}
        for path, row in p["counts"].items():
            for edge, n in row.items():
                counts.setdefault(path, {})[edge] = counts.get(path, {}).get(edge, 0) + n
                hit.add((path, edge))
                if (path, edge) not in unexpected:
                    expected_hit.add((path, edge))
        zero |= {tuple(c) for c in p["zero"]}
        odd |= unexpected
    zero -= hit
    odd -= expected_hit | zero
    order = {(pa, e): (i, j) for i, pa in enumerate(parts[0]["paths"]) for j, e in enumerate(parts[0]["edges"])}
    rank = lambda c: order.get(c, (len(order), 0))  # noqa: E731
    return _summary(sum(p["examples"] for p in parts), counts, [list(c) for c in sorted(zero, key=rank)],
                    len(expected_hit) + len(zero), [list(c) for c in sorted(odd, key=rank)])


def text(cov: Optional[dict[str, Any]], limit: int = 6, why_unlisted: str = "") -> list[str]:
    """Summary lines of a coverage JSON: the first ``limit`` cells at zero; with ``limit`` 0, ``why_unlisted``
    says why none is listed."""
    if cov is None:
        return ["  coverage: not counted (the matrix names this project's kernel paths; another SUT has none)"]
    lines = [f"  coverage: {cov['covered']} of {cov['reachable']} reachable cells (kernel path x edge class; "
             f"{see(Term.COVERAGE)}) hit "
             f"by {cov['examples']} examples; {len(cov['zero'])} at zero"
             + (f" ({why_unlisted})" if why_unlisted and not limit and cov["zero"] else "")]
    for p, e in cov["zero"][:limit]:
        lines.append(f"    zero: {p} x {e}")
    if limit and len(cov["zero"]) > limit:
        lines.append(f"    ... and {len(cov['zero']) - limit} more")
    if cov["unexpected"]:
        lines.append(f"  coverage: {len(cov['unexpected'])} cell(s) hit that the reachability rule calls "
                     f"unreachable (a classifier bug): {cov['unexpected'][:3]}")
    return lines
