"""Duplicates under per-sample weights: one id read many times, within a bag and across bags,
every occurrence with its own weight.

Bug class: the backward sorts lookups by row and must carry each lookup's weight and bag
through the same stable permutation. An unstable or separately computed sort pairs weights
with the wrong lookups; that changes a row's gradient only when the run spans bags with
different d_out and its weights differ, which these cases guarantee (tiny tables, bags
longer than the table, hot rows at the config's SL edges, distinct sign-mixed weights).
Bad ids/offsets on top come from ``strategies.bad_inputs`` (``bad_duplicate_specs``).
"""

from __future__ import annotations

import dataclasses

import torch
from hypothesis import strategies as st

from cases import BadBatchSpec, Case, CaseSpec, HotRow, materialize
from strategies.bad_inputs import bad_batch_specs
from strategies.specs import dims
from tbe import KernelConfig
from tbe.modes import FloatDtype
from tbe.routing import segment_edges


def duplicate_specs(config: KernelConfig, max_lookups: int, steps: int = 1) -> st.SearchStrategy[CaseSpec]:
    """A weighted CaseSpec in which most rows are read several times from several bags, and at
    least one row from two bags with two different weights (``pairing_sensitive``)."""
    return _duplicate_specs(config, max_lookups, steps).filter(lambda s: pairing_sensitive(materialize(s)))


@st.composite
def _duplicate_specs(draw: st.DrawFn, config: KernelConfig, max_lookups: int, steps: int = 1) -> CaseSpec:
    T = draw(st.integers(1, 3))
    B = draw(st.integers(2, 8))
    tables = tuple((draw(st.integers(2, 5)), draw(dims(40))) for _ in range(T))
    per_bag = max(2, min(16, max_lookups // (2 * T * B)))
    max_length = draw(st.integers(2, per_bag))
    hot = []
    if draw(st.booleans()):  # one run at an SL edge, so the pairing also crosses chunk boundaries
        t = draw(st.integers(0, T - 1))
        fit = [e for e in segment_edges(config, max_lookups // 2) if e >= 2]
        if fit:
            hot.append(HotRow(t, draw(st.integers(0, tables[t][0] - 1)), draw(st.sampled_from(fit))))
    return CaseSpec(
        tables=tables, batch_size=B, weighted=True,
        pooling=draw(st.sampled_from(["sum", "mean"])),
        weights_dtype=draw(st.sampled_from(FloatDtype)),
        output_dtype=draw(st.sampled_from(["fp32", "fp16"])),
        index_dtype=draw(st.sampled_from(["int64", "int32"])),
        optimizer=draw(st.sampled_from(["exact_sgd", "exact_rowwise_adagrad"])),
        learning_rate=draw(st.sampled_from([0.5, 0.05, 2.0])),
        length_profile=draw(st.sampled_from(["fixed", "uniform"])), max_length=max_length,
        hot_rows=tuple(hot), id_skew=draw(st.sampled_from([0.0, 2.0])), steps=steps,
        seed=draw(st.integers(0, 2**31 - 1)),
    )


def pairing_sensitive(case: Case) -> bool:
    """Whether some run reads one row from two bags with two different weights (so a mis-pairing
    of weights to lookups changes that row's gradient for almost every d_out)."""
    if case.per_sample_weights is None or case.num_lookups < 2:
        return False
    spec = case.spec
    B = spec.batch_size
    off = case.offsets.to(torch.int64)
    bag = torch.repeat_interleave(torch.arange(spec.num_tables * B), off[1:] - off[:-1])
    lin = torch.tensor(spec.layout.hash_size_cumsum[:-1])[bag // B] + case.indices.to(torch.int64)
    for row in torch.unique(lin):
        sel = lin == row
        if torch.unique(bag[sel]).numel() >= 2 and torch.unique(case.per_sample_weights[sel]).numel() >= 2:
            return True
    return False


def bad_duplicate_specs(**kwargs) -> st.SearchStrategy[BadBatchSpec]:
    """``strategies.bad_inputs`` batches with duplicates and per-sample weights always on, so a
    repaired id (set to row 0) joins a run of weighted duplicates and a clamped offset moves
    weighted lookups between bags."""
    return bad_batch_specs(allow_empty_batch=False, **kwargs).map(
        lambda s: dataclasses.replace(s, duplicates=True, weighted=True))
