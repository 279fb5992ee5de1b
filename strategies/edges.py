"""Targeted cases at the edges a config change moves, for the gate.

Each group of KernelConfig fields moves one kind of edge: routing/chunking fields move
segment-length edges (a hot row read exactly threshold-1, threshold, threshold+1 times),
gather widths and dimension buckets move D and bag-length edges, small-table fields move
the eligibility edges, bounds-check fields change how bad ids are repaired. Cases are
built for the old and the new value of every changed field, so both sides are probed.
"""

from __future__ import annotations

from typing import Iterable

from cases import ID_KINDS, OFFSET_KINDS, AnyCase, BadBatchSpec, BadId, BadIdCase, CaseSpec, HotRow
from strategies.field_groups import ALL_GROUPS, BOUNDS_FIELDS, DIM_FIELDS, SEGMENT_FIELDS, SMALL_TABLE_FIELDS
from tbe import KernelConfig
from tbe.routing import routing_edges, step_edge


def _around(values: Iterable[int]) -> list[int]:
    return sorted({x + d for x in values for d in (-1, 0, 1) if x + d >= 1})


def segment_cases(configs: list[KernelConfig], cap: int, notes: list[str]) -> list[tuple[str, AnyCase]]:
    """A hot row read SL times, SL at every config's threshold and chunk edges (+-1, two chunks + 1)."""
    edges = sorted(set().union(*(routing_edges(c) for c in configs)))
    out = []
    for i, sl in enumerate(edges):
        if sl > cap:
            notes.append(f"segment length {sl} skipped: above this backend's example budget ({cap} lookups)")
            continue
        for weighted, opt in ((False, "exact_sgd"), (True, "exact_rowwise_adagrad")):
            spec = CaseSpec(tables=((97, 24), (13, 5)), batch_size=4, max_length=4, weighted=weighted,
                            optimizer=opt, hot_rows=(HotRow(0, 11, sl),), seed=1000 + i)
            out.append((f"hot row SL={sl} {'weighted ' if weighted else ''}{opt}", spec))
    return out


def dim_cases(configs: list[KernelConfig]) -> list[tuple[str, AnyCase]]:
    """D at every dimension-bucket edge; bag lengths at every gather width edge."""
    out: list[tuple[str, AnyCase]] = []
    buckets = sorted({b for c in configs for b in c.dim_buckets})
    for i, d in enumerate(_around(buckets + [2 * max(buckets)])):
        weighted = i % 2 == 1
        spec = CaseSpec(tables=((50, d),), batch_size=3, max_length=6, weighted=weighted,
                        hot_rows=(HotRow(0, 7, 9),), seed=2000 + i)
        out.append((f"D={d}{' weighted' if weighted else ''}", spec))
    widths = {w for c in configs for w in (c.fwd_gather_unweighted, c.fwd_gather_weighted,
                                           c.bwd_short_gather_unweighted, c.bwd_short_gather_weighted,
                                           c.bwd_long_gather, c.fwd_bags_per_program)}
    widths |= {w for c in configs for _, gather, bags, _ in c.fwd_bucket_tiles for w in (gather, bags)}
    widths |= {c.short_runs(b) for c in configs for b in c.dim_buckets}
    widths |= {c.fwd_one_bag_pooling for c in configs if c.fwd_one_bag_pooling}
    for i, length in enumerate(_around(widths)):
        for weighted in (False, True):
            spec = CaseSpec(tables=((40, 17), (9, 3)), batch_size=5, length_profile="fixed", max_length=length,
                            weighted=weighted, seed=3000 + i)
            out.append((f"bag length {length}{' weighted' if weighted else ''}", spec))
    return out


def small_table_cases(configs: list[KernelConfig]) -> list[tuple[str, AnyCase]]:
    """Single fp16 tables on both sides of every small-table eligibility edge."""
    out: list[tuple[str, AnyCase]] = []
    rows = _around([c.small_table_max_rows for c in configs])
    dims = _around([c.small_table_min_dim for c in configs] + [c.small_table_max_dim for c in configs])
    lengths = _around([c.small_table_min_pooling for c in configs] + [step_edge(c) for c in configs])
    i = 0
    for e in rows:
        for d in dims:
            length = lengths[i % len(lengths)]
            spec = CaseSpec(tables=((e, d),), batch_size=2, length_profile="fixed", max_length=length,
                            weights_dtype="fp16", output_dtype="fp32", pooling="mean" if i % 2 else "sum",
                            seed=4000 + i)
            out.append((f"small table E={e} D={d} L={length}", spec))
            i += 1
    return out


def bad_id_cases(configs: list[KernelConfig]) -> list[tuple[str, AnyCase]]:
    """Each bad-id kind and each broken-offset kind alone, under WARNING and IGNORE, MEAN and SUM."""
    out: list[tuple[str, AnyCase]] = []
    lengths = sorted({4} | {b + d for c in configs for b in (c.bounds_check_block,) for d in (-1, 0, 1)
                            if 1 <= b + d <= 64})
    kinds = [("id " + k, (BadId(k, "last", "last", "last"),), ()) for k in ID_KINDS]
    kinds += [("offsets " + k, (), (k,)) for k in OFFSET_KINDS]
    kinds.append(("ids and offsets", (BadId("rows", "first", "first", "first"), BadId("negative")),
                  ("decreasing", "last_long")))
    for i, (label, ids, offs) in enumerate(kinds):
        length = lengths[i % len(lengths)]
        weighted = i % 2 == 0
        tables = ((6, 5), (9, 3))
        bad = BadBatchSpec(tables, 3, max_length=length, weighted=weighted, duplicates=i % 3 == 0,
                           bad_ids=ids, bad_offsets=offs, seed=5000 + i)
        for j, (mode, pooling) in enumerate((("warning", "mean"), ("ignore", "sum"))):
            spec = CaseSpec(tables=tables, batch_size=3, pooling=pooling, bounds_check=mode, weighted=weighted,
                            max_length=length, optimizer="exact_rowwise_adagrad" if j else "exact_sgd",
                            seed=5000 + i)
            out.append((f"bad {label} ({mode}, {pooling}, L<={length})", BadIdCase(spec, bad)))
    return out


def edge_cases(baseline: KernelConfig, candidate: KernelConfig, cap: int) -> tuple[list[tuple[str, AnyCase]], list[str]]:
    """(labelled targeted cases, notes) for the fields that differ between the two configs."""
    changed = set(baseline.diff(candidate))
    configs = [baseline, candidate]
    notes: list[str] = []
    if "faults" in changed:  # a planted bug can sit anywhere: probe every edge
        changed |= ALL_GROUPS
    groups: list[list[tuple[str, AnyCase]]] = []
    if changed & SEGMENT_FIELDS:
        groups.append(segment_cases(configs, cap, notes))
    if changed & DIM_FIELDS:
        groups.append(dim_cases(configs))
    if changed & SMALL_TABLE_FIELDS:
        groups.append(small_table_cases(configs))
    if changed & BOUNDS_FIELDS:
        groups.append(bad_id_cases(configs))
    # interleaved, so a budget that stops early still probes every group
    out = [g[i] for i in range(max((len(g) for g in groups), default=0)) for g in groups if i < len(g)]
    if "index_dtype" in changed:
        notes.append("index_dtype: the int32 linearization limit (sum of rows >= 2^31) needs tables the "
                     "module cannot allocate here; tests/tbe/test_transpose.py probes that limit at the transpose")
    other = sorted(changed - ALL_GROUPS - {"faults"})
    if other:
        notes.append(f"no targeted edges for {other}; covered by the shared campaign only")
    return out, notes


def reseed(labelled: list[tuple[str, AnyCase]], seed: int) -> list[tuple[str, AnyCase]]:
    """The same edge cases with their batches drawn afresh for ``seed`` (0 keeps them as built)."""
    if seed == 0:
        return labelled
    shift = 7919 * seed

    return [(label, case.reseeded(shift)) for label, case in labelled]
