"""The campaign's search space: general CaseSpecs plus bad-id batches, aimed at the config's edges.

Hot-row counts are drawn around the config's ``long_run_threshold`` and ``chunk_size`` (the
segment lengths where the backward changes tier or splits a run) and at power-of-two
chunk counts, so a campaign under a moved threshold probes the moved edge. General cases
draw random-magnitude or exact-value data (``cases.dyadic``) at every SL. One draw
in five is a single fp16 table at the small-table path's edges, one a bad-id batch for
the bounds check (repair under WARNING/IGNORE, MEAN over the repaired length), one a table
wider than 1,024 columns. Learning rates are drawn too, so the optimizer update can dominate
a row and gradient errors become visible, and general cases run one to three training steps,
so optimizer state carried between steps is checked.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from hypothesis import strategies as st

from cases import VALUE_KINDS, BadBatchSpec, BadIdCase, CaseSpec, with_rate_and_steps
from strategies.bad_inputs import bad_batch_specs, spread_bad_ids
from strategies.pack import packs
from strategies.specs import MAX_DIM, case_specs
from tbe import KernelConfig
from tbe.buckets import block_for_dim
from tbe.modes import FloatDtype
from tbe.routing import chunk_count_edges, segment_edges, step_edge


def hot_row_counts(config: KernelConfig, max_lookups: int) -> st.SearchStrategy[int]:
    """Short runs, the routing/chunking edges, the exact threshold (the edge that matters most) and
    power-of-two chunk counts (up to one past 4,096 chunks where the budget reaches)."""
    limit = max(1, max_lookups // 2)
    edges = segment_edges(config, limit)
    small = st.integers(1, 40)
    if not edges:
        return small
    exact = [st.just(config.long_run_threshold)] if config.long_run_threshold <= limit else []
    # on a GPU budget, runs far past the chunk size too (thousands of chunks in one run)
    huge = [st.integers(3 * config.chunk_size, limit)] if limit > 10 * config.chunk_size else []
    counts = chunk_count_edges(config, max_lookups - 64)  # leave a few lookups for the background
    # the two largest chunk counts the budget reaches get a branch of their own (4,096 and 4,097
    # chunks on a GPU's quick budget), so a short campaign meets them
    by_count = [st.sampled_from(counts), st.sampled_from(counts[-2:])] if counts else []
    return st.one_of(small, st.sampled_from(edges), *exact, *huge, *by_count)


def max_batch(max_lookups: int) -> int:
    """Bags per table: 16 on the interpreter's budget, growing with the lookup budget on a GPU."""
    return max(16, min(8192, max_lookups // 256))


# bad ids one campaign case may carry: each lands at its own (kind, bag, element) place, so a case covers
# several of the bounds check's placement cells at once (``benchmarks.draw_coverage`` measured the effect)
MAX_BAD_IDS = 8


def with_middle_bags(bad: BadBatchSpec, bad_ids: tuple) -> BadBatchSpec:
    """``bad`` carrying ``bad_ids`` instead, its first and last features (where bad ids go) given at least
    three bags, so that the first, a middle and the last bag differ."""
    if not bad.vbe:
        return dataclasses.replace(bad, batch_size=max(3, bad.batch_size), bad_ids=bad_ids)
    ends = {0, bad.num_features - 1}
    sizes = tuple(max(3, b) if f in ends else b for f, b in enumerate(bad.batch_sizes))
    return dataclasses.replace(bad, batch_size=max(sizes), batch_size_per_feature=sizes, bad_ids=bad_ids)


@st.composite
def bad_id_cases(draw: st.DrawFn, shared_tables: bool = False, vbe: bool = False) -> BadIdCase:
    """A bad-id batch with a module spec that matches it (pooling, mode, optimizer drawn); ``shared_tables``,
    ``vbe``: some batches with features sharing tables and a batch size per feature (a SUT declaring them)."""
    bad = draw(bad_batch_specs(allow_empty_batch=False, max_bad_ids=MAX_BAD_IDS, shared_tables=shared_tables,
                               vbe=vbe))
    if draw(st.booleans()):  # every kind once, spread over the places (bad offsets kept), with a middle bag
        bad = with_middle_bags(bad, draw(spread_bad_ids()))
    spec = CaseSpec(
        tables=bad.tables, feature_table_map=bad.feature_table_map, batch_size=bad.batch_size,
        batch_size_per_feature=bad.batch_size_per_feature, pooling=draw(st.sampled_from(["mean", "sum"])),
        index_dtype=bad.index_dtype, weighted=bad.weighted,
        optimizer=draw(st.sampled_from(["exact_sgd", "exact_rowwise_adagrad"])),
        bounds_check=draw(st.sampled_from(["warning", "ignore", "fatal"])), max_length=bad.max_length,
        seed=bad.seed,
    )
    return BadIdCase(spec, bad)


# which of the small-table path's limits a drawn table crosses: none half the time (the path's own cells),
# else rows, D or the mean bag length just past its limit (the dispatcher's boundary)
SMALL_TABLE_OFF = (None, None, None, "rows", "dim", "length")


@st.composite
def small_table_specs(draw: st.DrawFn, config: KernelConfig, max_lookups: int) -> CaseSpec:
    """One fp16 table at the small-table path's limits: rows, D (and one D just past the smallest, whose
    columns the tile masks) and mean bag length at or inside them, or one of them just past
    (``SMALL_TABLE_OFF``). Bags of one length, or uniform ones of the same mean (empty bags among them); a
    third of the batches fill the budget, so one row's run reaches the long tiers' lengths; one to three
    steps, as general cases train."""
    c = config
    off = draw(st.sampled_from(SMALL_TABLE_OFF))
    rows = [c.small_table_max_rows + 1] if off == "rows" else sorted({1, 2, c.small_table_max_rows})
    inside = [c.small_table_min_dim, c.small_table_min_dim + 1, c.small_table_max_dim]  # the odd one: masked columns
    dims = [c.small_table_min_dim - 1, c.small_table_max_dim + 1] if off == "dim" else [
        d for d in inside if d <= c.small_table_max_dim]
    low = c.small_table_min_pooling - 1
    lengths = [low] if off == "length" and low > 0 else sorted({max(1, c.small_table_min_pooling), step_edge(c),
                                                                 step_edge(c) + 1})
    rows, dim, length = draw(st.sampled_from(rows)), draw(st.sampled_from(sorted(set(dims) - {0}))), \
        draw(st.sampled_from(lengths))
    profile = draw(st.sampled_from(["fixed", "uniform"]))  # uniform in [0, 2L]: mean L
    longest = max(1, min(length if profile == "fixed" else 2 * length, max_lookups))
    most = max(1, max_lookups // longest)
    full = draw(st.sampled_from([False, False, True]))
    batch = most if full else draw(st.integers(1, max(1, min(2 * c.small_table_bags_per_program + 2, most))))
    spec = CaseSpec(
        tables=((rows, dim),), batch_size=batch, length_profile=profile, max_length=longest,
        weights_dtype="fp16", output_dtype="fp32", pooling=draw(st.sampled_from(["sum", "mean"])),
        optimizer=draw(st.sampled_from(["exact_sgd", "exact_rowwise_adagrad"])),
        index_dtype=draw(st.sampled_from(["int64", "int32"])), seed=draw(st.integers(0, 2**31 - 1)),
    )
    return with_rate_and_steps(spec, draw(learning_rates()), draw(step_counts()))


def learning_rates() -> st.SearchStrategy[float]:
    """The default rate first (shrinking goes there); large rates make the update dominate the row,
    so errors in the accumulated gradient show above the weights' own rounding."""
    return st.sampled_from([0.05, 0.5, 2.0])


def step_counts() -> st.SearchStrategy[int]:
    """Training steps of a general case: one most often (shrinking goes there), else two or three, so a
    row's optimizer state is read back after its first update."""
    return st.sampled_from([1, 1, 2, 3])


# rows past 1,024 columns (FBGEMM's forward once returned zeros there): just past it, odd, and past
# further column blocks
WIDE_DIMS = (1025, 1031, 1088, 1537, 2049)


def wide_dims(config: KernelConfig, max_column_blocks: Optional[int] = None) -> list[int]:
    """``WIDE_DIMS`` that span at most ``max_column_blocks`` blocks of ``config``'s widest bucket (None: all)."""
    widest = max(config.dim_buckets)
    return [d for d in WIDE_DIMS if max_column_blocks is None or -(-d // widest) <= max_column_blocks]


@st.composite
def wide_row_specs(draw: st.DrawFn, dims: list[int]) -> CaseSpec:
    """A table wider than 1,024 columns (beside a narrow one at times), one or two bags of a few ids:
    few lookups, since every id costs a column loop."""
    tables = [(draw(st.integers(1, 8)), draw(st.sampled_from(dims)))]
    if draw(st.booleans()):
        tables.append((draw(st.integers(1, 8)), draw(st.integers(1, 40))))
    if draw(st.booleans()):
        tables.reverse()  # the wide table's columns start past another table's
    spec = CaseSpec(
        tables=tuple(tables), batch_size=draw(st.integers(1, 2)),
        length_profile=draw(st.sampled_from(["fixed", "uniform"])), max_length=draw(st.integers(1, 3)),
        pooling=draw(st.sampled_from(["sum", "mean"])), weighted=draw(st.booleans()),
        weights_dtype=draw(st.sampled_from(FloatDtype)),
        output_dtype=draw(st.sampled_from(FloatDtype)),
        index_dtype=draw(st.sampled_from(["int64", "int32"])),
        optimizer=draw(st.sampled_from(["exact_sgd", "exact_rowwise_adagrad"])),
        seed=draw(st.integers(0, 2**31 - 1)),
    )
    return with_rate_and_steps(spec, draw(learning_rates()), draw(st.sampled_from([1, 2])))


def campaign_cases(config: KernelConfig, max_lookups: int, search_config: bool = True,
                   fixed: frozenset[str] = frozenset(), max_column_blocks: Optional[int] = None,
                   pack: int = 1, max_chunks: Optional[int] = None, max_work: Optional[int] = None,
                   profiles: Optional[Any] = None, shared_tables: bool = False, vbe: bool = False) -> st.SearchStrategy:
    """What a campaign draws: ``cases.Drawn`` (a case and KernelConfig overrides drawn
    around ``config``, never of ``fixed`` fields), or with ``search_config=False`` plain cases.
    ``max_column_blocks`` caps the column blocks of a row wider than 1,024 under the effective config
    (the interpreter's cost grows with them; None: no cap); ``pack`` > 1 lets a general case hold up to
    that many sub-cases (``strategies.pack``); ``max_chunks`` caps a case's lookups at that many long-tier
    chunks of the effective config and ``max_work`` its general cases' lookups times column blocks (None: no cap);
    ``profiles``: the override profiles drawn (a SUT's own; default ``strategies.config_space.PROFILES``);
    ``shared_tables``: general cases may give several features one table (a SUT declaring it); ``vbe``: general
    cases may give each feature its own batch size (a SUT declaring it)."""
    if search_config:
        from strategies.config_space import drawn_cases
        from strategies.field_groups import BOUNDS_FIELDS

        # a bad-id case runs the bounds check and stops: of the profiles, only those that change the check
        # give it a different run, so it draws among them (the others' draws go to the cases they change)
        rest = drawn_cases(config, lambda c: plain_cases(c, max_lookups, max_column_blocks, pack, bad_ids=False,
                                                         max_chunks=max_chunks, max_work=max_work,
                                                         shared_tables=shared_tables, vbe=vbe), fixed,
                           profiles=profiles)
        bad = drawn_cases(config, lambda c: bad_id_cases(shared_tables, vbe), fixed, touching=BOUNDS_FIELDS,
                          profiles=profiles)
        # bad-id cases keep their one share among plain_cases' distinct branches (a sampled index: st.one_of
        # merges equal branches, as ``packed`` is ``whole`` without packs)
        others = 2 + (pack > 1) + bool(wide_dims(config, max_column_blocks))
        return st.sampled_from([rest] * others + [bad]).flatmap(lambda s: s)
    return plain_cases(config, max_lookups, max_column_blocks, pack, max_chunks=max_chunks, max_work=max_work,
                       shared_tables=shared_tables, vbe=vbe)


def general_cases(config: KernelConfig, max_lookups: int, max_work: Optional[int] = None,
                  max_column_blocks: Optional[int] = None, shared_tables: bool = False,
                  vbe: bool = False) -> st.SearchStrategy[CaseSpec]:
    """General cases of one to three steps at ``config``'s segment-length edges, random or exact-value data;
    ``max_work``: see ``within_work``; ``max_column_blocks``: rows of at most that many blocks of the widest bucket;
    ``shared_tables``: some with features sharing tables (``strategies.specs.feature_table_maps``); ``vbe``: some
    with a batch size per feature (``strategies.specs.batch_sizes``). Under ``stochastic_rounding`` fp32 weights
    (nothing to round) are drawn as fp16."""
    max_dim = MAX_DIM if max_column_blocks is None else min(MAX_DIM, max_column_blocks * max(config.dim_buckets))
    cases = st.tuples(
        case_specs(max_lookups=max_lookups, max_batch=max_batch(max_lookups), max_dim=max_dim,
                   hot_row_counts=hot_row_counts(config, max_lookups), values=VALUE_KINDS,
                   shared_tables=shared_tables, vbe=vbe),
        learning_rates(), step_counts(),
    ).map(lambda x: with_rate_and_steps(*x))
    if config.stochastic_rounding:
        cases = cases.map(rounded_weights)
    return cases if max_work is None else cases.map(lambda spec: within_work(spec, config, max_work))


def rounded_weights(spec: CaseSpec) -> CaseSpec:
    """``spec`` with fp16 weights where it drew fp32: stochastic rounding acts on fp16 and bf16 stores alone."""
    return dataclasses.replace(spec, weights_dtype="fp16") if spec.weights_dtype == "fp32" else spec


def work(spec: CaseSpec, config: KernelConfig) -> int:
    """Lookups times the column blocks of their table's rows under ``config`` (at most; before materializing),
    times the steps: every step runs the batch through the forward and the backward again."""
    per_table = [0] * spec.num_tables
    for t, b in zip(spec.feature_tables, spec.batch_sizes):
        per_table[t] += b * (0 if spec.length_profile == "empty" else spec.max_length)
    for h in spec.hot_rows:
        per_table[h.table] += h.count
    return max(1, spec.steps) * sum(n * _column_blocks(d, config) for n, (_, d) in zip(per_table, spec.tables))


def _column_blocks(dim: int, config: KernelConfig) -> int:
    return -(-dim // block_for_dim(dim, config))


def within_work(spec: CaseSpec, config: KernelConfig, max_work: int) -> CaseSpec:
    """``spec`` with its bags, then its hot rows, shortened until ``work`` is at most ``max_work``: the
    interpreter's cost grows with lookups times column blocks (a row of 142 columns under 4-wide buckets is
    36 blocks, and 2,306 such lookups cost 70 s over two steps) and with the steps (1,031 lookups of 16 and
    8 columns: 2.2-3.3 s in one step, 5.0-5.2 in two, 6.5-7.6 in three); the shape's edges (D, tables, dtypes,
    steps) stay."""
    total = work(spec, config)
    if total <= max_work:
        return spec
    hot = work(dataclasses.replace(spec, max_length=0), config)  # the hot rows' share
    if hot < max_work:  # the bags give way first
        keep = (max_work - hot) / (total - hot)
        return dataclasses.replace(spec, max_length=int(spec.max_length * keep))
    keep = max_work / hot
    return dataclasses.replace(spec, max_length=0, hot_rows=tuple(
        dataclasses.replace(h, count=max(1, int(h.count * keep))) for h in spec.hot_rows))


def plain_cases(config: KernelConfig, max_lookups: int, max_column_blocks: Optional[int] = None,
                pack: int = 1, bad_ids: bool = True, max_chunks: Optional[int] = None,
                max_work: Optional[int] = None, shared_tables: bool = False, vbe: bool = False) -> st.SearchStrategy:
    """Cases at ``config``'s edges, one branch each: general cases of one to three steps (shrinking prefers them),
    some bad-id batches, some single fp16 tables at the small-table (counts + tl.dot) path's edges
    and some rows wider than 1,024 columns (where ``max_column_blocks`` allows one). With ``pack`` > 1
    a second general branch draws packs of up to ``pack`` cases of 1/``pack`` of the lookups each
    (``strategies.pack.packs``); the others run alone, since a neighbour would move them off the forward
    path they are drawn for. ``max_chunks``: at most that many chunks of ``config``'s long tier (one row may
    take every lookup), so a small chunk size keeps the batch small; ``max_work``: general cases at most that
    many lookups times column blocks (``within_work``); ``shared_tables``, ``vbe``: see ``general_cases``."""
    if max_chunks is not None:
        max_lookups = min(max_lookups, max_chunks * config.chunk_size)
    whole = general_cases(config, max_lookups, max_work, max_column_blocks, shared_tables, vbe)
    # a general branch of packs of smaller cases, that share the budget
    packed = (packs(general_cases(config, max(1, max_lookups // pack), max_work and max(1, max_work // pack),
                                  max_column_blocks, shared_tables, vbe), pack, max_lookups) if pack > 1 else whole)
    dims = wide_dims(config, max_column_blocks)
    wide = [wide_row_specs(dims)] if dims else []
    # one share each: st.one_of merges equal branches, so listing one twice would not draw it more often
    # (real double shares were measured with benchmarks.draw_coverage and left more cells at zero)
    small = small_table_specs(config, max_lookups)
    return st.one_of(whole, packed, *([bad_id_cases(shared_tables, vbe)] if bad_ids else []), small, *wide)
