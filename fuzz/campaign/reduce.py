"""Spec-level reduction of a failing case, after Hypothesis's shrink: fewer tables, bags, lookups.

Hypothesis shrinks the choices behind a drawn spec, and stops where no smaller choice sequence
draws a failing case; dropping one table of a spec re-draws every value from the seed, so it
stalls at cases of a few tables and tens of bags. This reducer edits the spec itself: it drops a
table (half of them, then all but one, first, with the features that read it), drops a feature that
shares its table with another, cuts the batch size (under VBE each feature's own, and a VBE batch tried as
the fixed one), the bag length and each hot
row's count (by a half, a quarter, an eighth ... down to one), drops a hot row (a pack,
``cases.PackCase``: each sub-case alone first, the named one before the others, then the
pack without one sub-case), and keeps an edit whenever the smaller case still fails the same way
(same failure kind and same first failing check). Greedy first improvement, restarted after each
kept edit; written here because the reductions are specific to CaseSpec and BadIdCase.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Callable, Iterator, Optional

from cases import AnyCase, BadIdCase, CaseKind, CaseSpec, HotRow, PackCase
from fuzz.judge import CaseResult


def failing_check(result: CaseResult) -> Optional[str]:
    """The first failing check's name ('forward vs fp64', 'weights after update', ...); None for a crash,
    hang or raise (no check failed, the kind says it all)."""
    bad = [r.key for r in result.reports if not r.ok]
    return bad[0] if bad and result.error is None else None


def signature(result: CaseResult) -> tuple[str, Optional[str]]:
    """How a case failed: (kind, first failing check); a reduction must keep it."""
    return result.kind, failing_check(result)


def size_text(result: CaseResult) -> str:
    tables, bags, _ = result.case.size()
    subs = f" in {len(result.case.subs)} sub-cases" if result.case.kind is CaseKind.PACK else ""
    return f"{tables} table(s), {bags} bag(s), {result.lookups} lookups{subs}"


def _cuts(n: int, low: int) -> list[int]:
    """Smaller values of ``n`` to try, the largest cut first: n // 2, then cuts of a quarter, an eighth ... down
    to n - 1 (each >= low). Kept greedily, the ladder finds where a failure starts (a batch past 2^15 lookups,
    say) in about log2(n)^2 checks, where halving and then stepping by one took up to n / 2."""
    out, cut = [], n - n // 2
    while cut >= 1:
        out.append(max(low, n - cut))
        cut //= 2
    return sorted({v for v in out if low <= v < n})


def _table_cuts(n: int) -> list[tuple[int, ...]]:
    """Tables to keep, biggest cut first: each half (of 4 or more), each one alone, then all but one."""
    halves = [tuple(range(n // 2)), tuple(range(n // 2, n))] if n >= 4 else []
    singles = [(t,) for t in range(n)] if n >= 3 else []
    return halves + singles + [tuple(i for i in range(n) if i != t) for t in range(n)] if n > 1 else []


def _with_sizes(spec: CaseSpec, sizes: Optional[tuple[int, ...]], **fields) -> CaseSpec:
    """``spec`` with the per-feature batch sizes ``sizes`` (None: its fixed batch) and ``fields``, its batch size
    their maximum."""
    batch = spec.batch_size if sizes is None else max(sizes, default=0)
    return dataclasses.replace(spec, batch_size=batch, batch_size_per_feature=sizes, **fields)


def _keep_tables(spec: CaseSpec, keep: tuple[int, ...]) -> CaseSpec:
    """``spec`` with only the tables ``keep``, and only the features that read them (renumbered, their batch
    sizes kept)."""
    new = {t: i for i, t in enumerate(keep)}
    hot = tuple(HotRow(new[h.table], h.row, h.count) for h in spec.hot_rows if h.table in new)
    fmap = tuple(new[t] for t in spec.feature_table_map if t in new)
    sizes = None if not spec.vbe else tuple(b for b, t in zip(spec.batch_sizes, spec.feature_tables) if t in new)
    return _with_sizes(spec, sizes, tables=tuple(spec.tables[t] for t in keep), hot_rows=hot, feature_table_map=fmap)


def _drop_features(spec: CaseSpec) -> Iterator[CaseSpec]:
    """``spec`` without one feature, for each feature whose table another feature also reads."""
    ft = spec.feature_table_map
    for f, t in enumerate(ft):
        if ft.count(t) > 1:
            sizes = None if not spec.vbe else spec.batch_sizes[:f] + spec.batch_sizes[f + 1:]
            yield _with_sizes(spec, sizes, feature_table_map=ft[:f] + ft[f + 1:])


def _batch_cuts(spec: CaseSpec) -> Iterator[CaseSpec]:
    """Smaller batches: the fixed batch's size; under VBE the fixed batch of max B_f, then each feature's B_f."""
    if not spec.vbe:
        for b in _cuts(spec.batch_size, 1):
            yield dataclasses.replace(spec, batch_size=b)
        return
    yield _with_sizes(spec, None)
    sizes = spec.batch_sizes
    for f, b in enumerate(sizes):
        for c in _cuts(b, 0):
            yield _with_sizes(spec, sizes[:f] + (c,) + sizes[f + 1:])


def _spec_candidates(spec: CaseSpec) -> Iterator[CaseSpec]:
    for keep in _table_cuts(spec.num_tables):
        yield _keep_tables(spec, keep)
    yield from _drop_features(spec)
    yield from _batch_cuts(spec)
    for m in _cuts(spec.max_length, 0):
        yield dataclasses.replace(spec, max_length=m)
    for i, h in enumerate(spec.hot_rows):
        yield dataclasses.replace(spec, hot_rows=spec.hot_rows[:i] + spec.hot_rows[i + 1:])
        for c in _cuts(h.count, 1):
            yield dataclasses.replace(spec, hot_rows=spec.hot_rows[:i] + (HotRow(h.table, h.row, c),)
                                      + spec.hot_rows[i + 1:])
    if spec.steps > 1:
        yield dataclasses.replace(spec, steps=1)


def _bad_candidates(case: BadIdCase) -> Iterator[BadIdCase]:
    """Fewer tables, features and bags (the spec's cuts, the bad batch laid out alike), then shorter bags. A cut
    that leaves a bad id without a bag (its feature at batch 0) is not a candidate."""
    spec, bad = case.spec, case.bad
    shapes = [_keep_tables(spec, keep) for keep in _table_cuts(spec.num_tables)]
    for smaller in itertools.chain(shapes, _drop_features(spec), _batch_cuts(spec)):
        try:
            yield BadIdCase(smaller, dataclasses.replace(
                bad, tables=smaller.tables, batch_size=smaller.batch_size, feature_table_map=smaller.feature_table_map,
                batch_size_per_feature=smaller.batch_size_per_feature))
        except ValueError:
            continue
    for m in _cuts(bad.max_length, 0):
        yield BadIdCase(spec, dataclasses.replace(bad, max_length=m))
    if spec.steps > 1:
        yield BadIdCase(dataclasses.replace(spec, steps=1), bad)


def _pack_candidates(case: PackCase, named: Optional[int]) -> Iterator[AnyCase]:
    order = ([named] if named is not None else []) + [i for i in range(len(case.subs)) if i != named]
    for i in order:
        yield case.subs[i]
    if len(case.subs) > 2:
        for i in order:
            yield PackCase(case.subs[:i] + case.subs[i + 1:])


def candidates(case: AnyCase, named: Optional[int] = None) -> Iterator[AnyCase]:
    """Smaller variants of ``case``, the biggest cuts first (each may be invalid: the check says); ``named``
    is the sub-case of a pack that the failure names, tried alone first."""
    if case.kind is CaseKind.PACK:
        return _pack_candidates(case, named)
    return _bad_candidates(case) if case.bad is not None else _spec_candidates(case)


@dataclasses.dataclass
class Reduction:
    result: CaseResult   # the smallest failing case found (the input one if nothing smaller failed)
    tried: int = 0       # candidates checked
    kept: int = 0        # of them, smaller cases that failed the same way
    finished: bool = False  # no candidate of the final case fails the same way (else: stopped early)


def reduce_failure(result: CaseResult, check: Callable[[AnyCase], Optional[CaseResult]],
                   stop: Callable[[], bool], progress: Optional[Callable[[str], None]] = None,
                   first_step: int = 0) -> Reduction:
    """Reduce ``result``'s case while ``check(case)`` (a CaseResult, or None when it could not run)
    fails with the same ``signature``; ``stop()`` is asked before every candidate (time, Ctrl-C);
    ``progress`` gets a line per kept step, numbered on from ``first_step`` (the shrink steps before)."""
    want = signature(result)
    out = Reduction(result)
    while True:
        for cand in candidates(out.result.case, out.result.sub_case):
            if stop():
                return out
            try:
                got = check(cand)
            except ValueError:  # the edit broke the spec (e.g. a hot row no longer fits)
                continue
            out.tried += 1
            if got is not None and not got.ok and signature(got) == want:
                out.result, out.kept = got, out.kept + 1
                if progress is not None:
                    progress(f"  shrinking (spec): step {first_step + out.tried}, now {size_text(got)}")
                break
        else:
            out.finished = True
            return out
