"""The general-purpose CaseSpec strategy: tables, batch shape, dtypes, modes, lengths, hot rows.

Every draw respects ``max_lookups`` (the backend's measured budget) so an example never
costs more than the interpreter can afford; dtype and mode sets can be narrowed by the
caller (for example to what FBGEMM's CPU TBE supports).
"""

from __future__ import annotations

from typing import Optional, Sequence

from hypothesis import strategies as st

from cases import LENGTH_PROFILES, CaseSpec, HotRow
from tbe.modes import FloatDtype, Pooling

MAX_DIM = 160  # the widest row a general case draws


def dims(max_dim: int = MAX_DIM, multiple_of: int = 1) -> st.SearchStrategy[int]:
    """D >= 1, biased to edges (1, odd sizes, powers of two and their neighbours)."""
    edges = sorted({d for p in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) for d in (p - 1, p, p + 1)
                    if 1 <= d <= max_dim and d % multiple_of == 0})
    return st.one_of(st.sampled_from(edges), st.integers(1, max_dim).filter(lambda d: d % multiple_of == 0))


def table_shapes(
    max_tables: int = 4, max_rows: int = 1000, max_dim: int = MAX_DIM, dim_multiple: int = 1
) -> st.SearchStrategy[tuple[tuple[int, int], ...]]:
    rows = st.one_of(st.sampled_from([1, 2, 3, 63, 64, 65]), st.integers(1, max_rows))
    return st.lists(st.tuples(rows, dims(max_dim, dim_multiple)), min_size=1, max_size=max_tables).map(tuple)


def case_specs(
    max_lookups: int = 2000,
    max_tables: int = 4,
    max_batch: int = 16,
    max_rows: int = 1000,
    max_dim: int = MAX_DIM,
    dim_multiple: int = 1,
    weights_dtypes: Sequence[str] = tuple(FloatDtype),
    output_dtypes: Sequence[str] = tuple(FloatDtype),
    poolings: Sequence[str] = tuple(Pooling),
    optimizers: Sequence[str] = ("exact_sgd", "exact_rowwise_adagrad"),
    weighted: Optional[bool] = None,
    hot_row_counts: Optional[st.SearchStrategy[int]] = None,
    steps: int = 1,
    values: Sequence[str] = ("random",),
    shared_tables: bool = False,
    vbe: bool = False,
) -> st.SearchStrategy[CaseSpec]:
    """A CaseSpec whose batch holds at most ``max_lookups`` ids: ordinary lookups take at most
    half, hot rows what the ordinary ones leave. ``values`` are the value kinds drawn from
    (``cases.VALUE_KINDS``); ``shared_tables``: some draws give several features one table
    (``feature_table_maps``); ``vbe``: some draws give each feature its own batch size (``batch_sizes``). The
    strategies of the fixed choices are built here, once,
    not at every draw (building and validating them was a third of a draw's time)."""
    tables_st = table_shapes(max_tables, max_rows, max_dim, dim_multiple)
    batch_st = st.integers(0, max_batch) | st.sampled_from([1, max_batch])
    profile_st = st.sampled_from(LENGTH_PROFILES)
    hot_n_st = st.integers(0, 2)
    pooling_st = st.sampled_from(list(poolings))
    weights_st = st.sampled_from(list(weights_dtypes))
    output_st = st.sampled_from(list(output_dtypes))
    index_st = st.sampled_from(["int32", "int64"])
    weighted_st = st.booleans()
    optimizer_st = st.sampled_from(list(optimizers))
    skew_st = st.sampled_from([0.0, 0.0, 1.1, 2.0])
    seed_st = st.integers(0, 2**31 - 1)
    values_st = st.sampled_from(list(values))

    @st.composite
    def one(draw: st.DrawFn) -> CaseSpec:
        tables = draw(tables_st)
        fmap = draw(feature_table_maps(len(tables))) if shared_tables else ()
        T = len(fmap) or len(tables)  # features: each has a bag per sample
        batch_size = draw(batch_st)
        sizes = draw(batch_sizes(T, max_batch)) if vbe else None
        if sizes is not None:
            batch_size = max(sizes)
        readers = sizes or (batch_size,) * T
        profile = draw(profile_st)
        per_bag = max_lookups // max(1, 2 * T * max(1, batch_size))
        max_length = draw(st.integers(0, max(0, min(64, per_bag))))
        hot: list[HotRow] = []
        if batch_size > 0 and hot_row_counts is not None:
            budget = max_lookups - T * batch_size * (0 if profile == "empty" else max_length)
            # a hot row keeps an exact count only if its table has another row for ordinary ids
            # (and a reader with a bag to put it in)
            fed = {t for f, t in enumerate(fmap or range(T)) if readers[f] > 0}
            roomy = [t for t, (rows, _) in enumerate(tables) if rows >= 2 and t in fed]
            for _ in range(draw(hot_n_st) if roomy else 0):
                t = draw(st.sampled_from(roomy))
                count = min(draw(hot_row_counts), budget)
                if count < 1 or any(h.table == t for h in hot):
                    continue
                budget -= count
                hot.append(HotRow(t, draw(st.integers(0, tables[t][0] - 1)), count))
        return CaseSpec(
            tables=tables,
            batch_size=batch_size,
            pooling=draw(pooling_st),
            weights_dtype=draw(weights_st),
            output_dtype=draw(output_st),
            index_dtype=draw(index_st),
            weighted=draw(weighted_st) if weighted is None else weighted,
            optimizer=draw(optimizer_st),
            length_profile=profile,
            max_length=max_length,
            hot_rows=tuple(hot),
            id_skew=draw(skew_st),
            steps=steps,
            seed=draw(seed_st),
            values=draw(values_st),
            feature_table_map=fmap,
            batch_size_per_feature=sizes,
        )

    return one()


@st.composite
def batch_sizes(draw: st.DrawFn, num_features: int, max_batch: int) -> Optional[tuple[int, ...]]:
    """VBE batch sizes, one per feature, or None (a fixed batch) for about half the draws; of the rest about a
    third put a feature of batch 0 beside one of ``max_batch`` (the adversarial extremes), the others draw
    each B_f in [0, max_batch]."""
    if not draw(st.booleans()):
        return None
    sizes = draw(st.lists(st.integers(0, max_batch), min_size=num_features, max_size=num_features))
    if num_features >= 2 and draw(st.integers(0, 2)) == 0:
        zero, large = draw(st.permutations(range(num_features)))[:2]
        sizes[zero], sizes[large] = 0, max_batch
    return tuple(sizes)


MAX_EXTRA_FEATURES = 6  # features beyond one per table that a shared map adds


@st.composite
def feature_table_maps(draw: st.DrawFn, num_tables: int) -> tuple[int, ...]:
    """A ``feature_table_map`` over ``num_tables`` tables: about half the draws the identity (empty), else
    every table read once and some more features on random tables or all on one (many features on one
    table, whose hot rows then span them), in an order that interleaves the tables."""
    if not draw(st.booleans()):
        return ()
    extra = draw(st.integers(1, MAX_EXTRA_FEATURES))
    if draw(st.booleans()):
        one = draw(st.integers(0, num_tables - 1))
        more = [one] * extra
    else:
        more = draw(st.lists(st.integers(0, num_tables - 1), min_size=extra, max_size=extra))
    return tuple(draw(st.permutations(list(range(num_tables)) + more)))
