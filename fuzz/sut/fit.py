"""Keep drawn cases within a SUT's capabilities: map each case onto the nearest one the SUT can run.

Mapping (rather than filtering) keeps every draw useful and keeps shrinking intact: D is
rounded up to the SUT's multiple (63 -> 64, 65 -> 68: the power-of-two edges survive),
an unsupported dtype becomes the supported one nearest in width (bf16 -> fp16), an
unsupported pooling, optimizer or index dtype the SUT's first supported one, per-sample
weights are dropped where unsupported, an empty batch gets one bag; a case whose features share
tables is left out for a SUT that cannot take a feature_table_map, a VBE case (a batch size per feature) for one
without the vbe capability. A bad-id case needs
a mode that repairs or rejects (WARNING, IGNORE or FATAL); a SUT with none of them gets
no bad-id cases, and kinds of invalid input a SUT cannot be fed safely are left out. For a SUT that can run everything nothing changes."""

from __future__ import annotations

import dataclasses
from typing import Optional

from hypothesis import strategies as st

from cases import AnyCase, BadIdCase, CaseKind, CaseSpec, Drawn, PackCase
from fuzz.sut.protocol import Capabilities

BAD_ID_MODES = ("warning", "ignore", "fatal")  # preference order for bad-id cases


NEAREST = {"bf16": ("fp16", "fp32"), "fp16": ("bf16", "fp32"), "fp32": ("fp16", "bf16")}  # same width first


def _pick(value: str, allowed: tuple[str, ...]) -> str:
    if value in allowed:
        return value
    return next((v for v in NEAREST.get(value, ()) if v in allowed), allowed[0])


def _dim(d: int, caps: Capabilities) -> int:
    m = caps.dim_multiple
    d = -(-d // m) * m
    if caps.max_dim is not None and d > caps.max_dim:
        d = caps.max_dim // m * m
    return d


def _tables(tables: tuple[tuple[int, int], ...], caps: Capabilities) -> tuple[tuple[int, int], ...]:
    return tuple((e, _dim(d, caps)) for e, d in tables)


def _index_dtypes(vbe: bool, caps: Capabilities) -> tuple[str, ...]:
    """The index dtypes ``caps`` is fed: with VBE, those of them it also takes there (never none)."""
    both = tuple(d for d in caps.index_dtypes if d in caps.vbe_index_dtypes) if vbe else ()
    return both or caps.index_dtypes


def fit_spec(spec: CaseSpec, caps: Capabilities, bad_ids: bool = False) -> Optional[CaseSpec]:
    """``spec`` moved within ``caps`` (None when no such case exists)."""
    if spec.feature_table_map and not caps.feature_table_map or spec.vbe and not caps.vbe:
        return None
    if bad_ids:
        modes = [m for m in BAD_ID_MODES if m in caps.bounds_modes]
        if not modes:
            return None
        mode = spec.bounds_check if spec.bounds_check in modes else modes[0]
    else:
        mode = _pick(spec.bounds_check, caps.bounds_modes)
    sizes = spec.batch_size_per_feature
    if sizes is not None and not caps.empty_batch:
        sizes = tuple(max(1, b) for b in sizes)
    return dataclasses.replace(
        spec,
        tables=_tables(spec.tables, caps),
        batch_size=max(sizes) if sizes else spec.batch_size if spec.batch_size > 0 or caps.empty_batch else 1,
        batch_size_per_feature=sizes,
        pooling=_pick(spec.pooling, caps.poolings),
        weights_dtype=_pick(spec.weights_dtype, caps.weights_dtypes),
        output_dtype=_pick(spec.output_dtype, caps.output_dtypes),
        index_dtype=_pick(spec.index_dtype, _index_dtypes(sizes is not None, caps)),
        weighted=spec.weighted and caps.per_sample_weights,
        optimizer=_pick(spec.optimizer, caps.optimizers),
        bounds_check=mode,
    )


def fit_case(case: AnyCase, caps: Capabilities) -> Optional[AnyCase]:
    """``case`` moved within ``caps``; None when the SUT cannot run anything like it. A drawn case
    with config overrides (``cases.Drawn``) keeps its overrides."""
    if caps.everything:
        return case
    if isinstance(case, Drawn):
        fitted = fit_case(case.case, caps)
        return None if fitted is None else dataclasses.replace(case, case=fitted)
    if case.bad is not None:
        spec = fit_spec(case.spec, caps, bad_ids=True)
        if spec is None:
            return None
        bad = dataclasses.replace(case.bad, tables=spec.tables, batch_size=spec.batch_size,
                                  feature_table_map=spec.feature_table_map,
                                  batch_size_per_feature=spec.batch_size_per_feature,
                                  weighted=spec.weighted, index_dtype=spec.index_dtype,
                                  bad_ids=tuple(b for b in case.bad.bad_ids if b.kind in caps.bad_ids),
                                  bad_offsets=tuple(k for k in case.bad.bad_offsets if k in caps.bad_offsets))
        return BadIdCase(spec, bad)
    if case.kind is CaseKind.PACK:  # each sub-case fitted; the same modes fit the same way
        subs = [f for f in (fit_spec(s, caps) for s in case.subs) if f is not None]
        if len(subs) <= 1:
            return subs[0] if subs else None
        try:
            return PackCase(tuple(subs))
        except ValueError:  # fitted to a mode that runs alone
            return subs[0]
    return fit_spec(case, caps)


def fit_strategy(strategy: st.SearchStrategy, caps: Capabilities) -> st.SearchStrategy:
    """Draws of ``strategy`` mapped within ``caps`` (the strategy itself when nothing needs fitting)."""
    if caps.everything:
        return strategy
    return strategy.map(lambda c: fit_case(c, caps)).filter(lambda c: c is not None)


def refusal(case: AnyCase, caps: Capabilities) -> Optional[str]:
    """Why ``caps`` cannot run ``case`` (naming the field and value), or None."""
    spec = case.spec
    for field, allowed in (("weights_dtype", caps.weights_dtypes), ("output_dtype", caps.output_dtypes),
                           ("index_dtype", caps.index_dtypes), ("pooling", caps.poolings),
                           ("optimizer", caps.optimizers), ("bounds_check", caps.bounds_modes)):
        if getattr(spec, field) not in allowed:
            return f"{field}={getattr(spec, field)!r} (supported: {', '.join(allowed)})"
    for t, (_, d) in enumerate(spec.tables):
        if d % caps.dim_multiple or (caps.max_dim is not None and d > caps.max_dim):
            return f"table {t} has D={d} (needs {caps.dims_text()})"
    if spec.weighted and not caps.per_sample_weights:
        return "weighted=True (no per-sample weights)"
    if spec.feature_table_map and not caps.feature_table_map:
        return f"feature_table_map={list(spec.feature_table_map)} (no features sharing tables)"
    if spec.vbe and not caps.vbe:
        return f"batch_size_per_feature={list(spec.batch_size_per_feature)} (no VBE)"
    if spec.vbe and spec.index_dtype not in caps.vbe_index_dtypes:
        return f"index_dtype={spec.index_dtype!r} with VBE (supported: {', '.join(caps.vbe_index_dtypes)})"
    if spec.batch_size == 0 and not caps.empty_batch:
        return "batch_size=0 (no empty batches)"
    if case.bad is not None:
        if spec.bounds_check not in BAD_ID_MODES:
            return f"bad ids under bounds_check={spec.bounds_check!r}"
        kinds = [b.kind for b in case.bad.bad_ids if b.kind not in caps.bad_ids]
        kinds += [k for k in case.bad.bad_offsets if k not in caps.bad_offsets]
        if kinds:
            return f"bad input of kind {kinds[0]!r} (the SUT may be fed: {caps.bad_ids + caps.bad_offsets})"
    return None
