"""Hypothesis strategies for bad input (``cases.BadBatchSpec``): out-of-range ids and broken offsets.

``fbgemm_comparable=True`` leaves out the two inputs on which our semantics and FBGEMM's
differ by design (id -1 and a positive first offset; see oracles/reference_bounds.py). ``shared_tables`` and
``vbe`` lay some batches out with several features on one table and a batch size per feature (for a SUT that
declares them).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from hypothesis import strategies as st

from cases import (BAG_POSITIONS, DIVERGENT_ID_KINDS, DIVERGENT_OFFSET_KINDS, ID_KINDS, OFFSET_KINDS, BadBatch,
                   BadBatchSpec, BadId, materialize_bad)
from strategies.specs import batch_sizes, feature_table_maps
from tbe.modes import IndexDtype

def bad_ids(fbgemm_comparable: bool = False, max_size: int = 3) -> st.SearchStrategy[tuple[BadId, ...]]:
    kinds = [k for k in ID_KINDS if not (fbgemm_comparable and k in DIVERGENT_ID_KINDS)]
    one = st.builds(
        BadId, st.sampled_from(kinds), st.sampled_from(("first", "last")),
        st.sampled_from(BAG_POSITIONS), st.sampled_from(("first", "last")),
    )
    return st.lists(one, max_size=max_size).map(tuple)


def spread_bad_ids(fbgemm_comparable: bool = False) -> st.SearchStrategy[tuple[BadId, ...]]:
    """Every bad-id kind once, in a drawn order, at places that cycle through the bag positions and the
    first and last element: one batch holds each kind, and the kinds share the places evenly (lists of
    independent draws repeat some kinds and places far more than others)."""
    kinds = [k for k in ID_KINDS if not (fbgemm_comparable and k in DIVERGENT_ID_KINDS)]
    places = [(bag, element) for element in ("first", "last") for bag in BAG_POSITIONS]

    @st.composite
    def draw(d: st.DrawFn) -> tuple[BadId, ...]:
        order = d(st.permutations(kinds))
        shift = d(st.integers(0, len(places) - 1))
        tables = d(st.lists(st.sampled_from(("first", "last")), min_size=len(order), max_size=len(order)))
        return tuple(BadId(k, table, *places[(i + shift) % len(places)])
                     for i, (k, table) in enumerate(zip(order, tables)))

    return draw()


def bad_offsets(fbgemm_comparable: bool = False) -> st.SearchStrategy[tuple[str, ...]]:
    """No broken offsets, each kind alone, or several together."""
    kinds = [k for k in OFFSET_KINDS if not (fbgemm_comparable and k in DIVERGENT_OFFSET_KINDS)]
    return st.one_of(
        st.just(()),
        st.sampled_from(kinds).map(lambda k: (k,)),
        st.lists(st.sampled_from(kinds), min_size=2, max_size=len(kinds), unique=True).map(tuple),
    )


def bad_batch_specs(
    max_tables: int = 3,
    max_batch: int = 4,
    max_length: int = 4,
    max_rows: int = 12,
    max_dim: int = 20,
    fbgemm_comparable: bool = False,
    index_dtypes: tuple[str, ...] = tuple(IndexDtype),
    allow_empty_batch: bool = True,
    max_bad_ids: int = 3,
    shared_tables: bool = False,
    vbe: bool = False,
) -> st.SearchStrategy[BadBatchSpec]:
    """Specs of small batches carrying bad ids (up to ``max_bad_ids``) and/or broken offsets; ``shared_tables``:
    some with features sharing tables, ``vbe``: some with a batch size per feature (``per_feature_layouts``).
    Without either the draws are those of a batch laid out one feature per table."""
    table = st.tuples(st.integers(1, max_rows), st.integers(1, max_dim))
    base = st.builds(
        _placeable,
        tables=st.lists(table, min_size=1, max_size=max_tables).map(tuple),
        batch_size=st.integers(0 if allow_empty_batch else 1, max_batch),
        max_length=st.integers(0, max_length),
        index_dtype=st.sampled_from(index_dtypes),
        weighted=st.booleans(),
        duplicates=st.booleans(),
        bad_ids=bad_ids(fbgemm_comparable, max_bad_ids),
        bad_offsets=bad_offsets(fbgemm_comparable),
        seed=st.integers(0, 2**31 - 1),
    ).filter(lambda s: s is not None)
    if not (shared_tables or vbe):
        return base
    return base.flatmap(lambda s: per_feature_layouts(s, shared_tables, vbe, max_batch, allow_empty_batch))


def _placeable(**fields: Any) -> Optional[BadBatchSpec]:
    """The spec of ``fields``, or None where its bad ids have no bag to go in (a batch of size 0)."""
    return BadBatchSpec(**fields) if fields["batch_size"] > 0 or not fields["bad_ids"] else None


@st.composite
def per_feature_layouts(draw: st.DrawFn, spec: BadBatchSpec, shared_tables: bool, vbe: bool, max_batch: int,
                        allow_empty_batch: bool = True) -> BadBatchSpec:
    """``spec`` with a drawn ``feature_table_map`` (``shared_tables``) and batch size per feature (``vbe``; batch
    0 beside a full one at times). A feature a bad id goes to keeps a bag at least, as does feature 0 when every
    feature drew 0 and an empty batch is not allowed."""
    fmap = draw(feature_table_maps(len(spec.tables))) if shared_tables else ()
    spec = dataclasses.replace(spec, feature_table_map=fmap)
    sizes = draw(batch_sizes(spec.num_features, max(1, max_batch))) if vbe else None
    if sizes is None:
        return spec
    needs_bag = {spec.feature_of(b) for b in spec.bad_ids}
    if not allow_empty_batch and not any(sizes):
        needs_bag.add(0)
    sizes = tuple(max(1, b) if f in needs_bag else b for f, b in enumerate(sizes))
    return dataclasses.replace(spec, batch_size=max(sizes), batch_size_per_feature=sizes)


def bad_batches(**kwargs: Any) -> st.SearchStrategy[BadBatch]:
    """Materialized bad batches (arguments as ``bad_batch_specs``)."""
    return bad_batch_specs(**kwargs).map(materialize_bad)
