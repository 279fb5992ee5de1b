"""The campaign's opening tour: one small case per kernel path and edge, run before the random search.

A short campaign draws too few examples to reach every tier by chance, so it starts with
these (as Hypothesis explicit examples, never shrunk): ids at both ends of every table's
range, segment lengths at the long-run threshold and past two chunks (two-kernel and fused
tier), rows wider than the largest dimension bucket and past 1,024 columns, weighted MEAN
with the per-sample-weight gradient, every bad-id kind with broken offsets repaired across
several blocks (standalone and fused check, WARNING, IGNORE, FATAL), the small-table path
with bags past one counting step, short runs side by side, the hoisted transpose, looping persistent grids,
per-bucket forward tiles, empty bags, and (where the budget affords it: a GPU's) one run past 4,096 chunks
in exact values, where a counter or length limit gone wrong loses one chunk in a million lookups. Each uses the config under test where its edge is
affordable in ``max_lookups`` and config overrides (``strategies.config_space``) where it is not;
``fixed`` fields are never overridden (a case that would need one is left out). ``size_edges`` adds, for a SUT
that takes no KernelConfig (its tour is these cases without their overrides), a batch and a segment just past 2^16
positions where the budget affords them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence, TypeVar

from cases import ID_KINDS, BadBatchSpec, BadId, BadIdCase, CaseSpec, Drawn, HotRow
from strategies.tiers import past_counter_fits
from tbe.routing import COUNTER_CHUNKS, counting_step, past_counter_length, step_edge
from tbe import KernelConfig

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class TourShare:
    """Which of the tour's cases one campaign runs: every ``of``-th from ``index`` (0-based), so ``of``
    campaigns side by side (``tbe-fuzz run --workers N``) run each case once between them."""

    index: int = 0
    of: int = 1

    def __post_init__(self) -> None:
        if self.of < 1 or not 0 <= self.index < self.of:
            raise ValueError(f"tour share: index must be in 0..of-1 and of >= 1, got {self.index}/{self.of}")

    @classmethod
    def parse(cls, text: str) -> "TourShare":
        """``"I/N"``: share I (0-based) of N."""
        index, sep, of = text.partition("/")
        try:
            if not sep:
                raise ValueError
            return cls(int(index), int(of))
        except ValueError as e:
            raise ValueError(f"tour share must be I/N with 0 <= I < N, got {text!r}") from e

    def pick(self, cases: Sequence[T]) -> list[T]:
        return list(cases[self.index::self.of])

    def __str__(self) -> str:
        return f"{self.index}/{self.of}"


ALL = TourShare()

_PLACES = [("first", "first", "first"), ("last", "last", "last"), ("first", "last", "first"),
           ("last", "first", "last"), ("first", "first", "last"), ("last", "last", "first")]
EVERY_ID = tuple(BadId(k, *p) for k, p in zip(ID_KINDS, _PLACES))


def _drawn(case, config: KernelConfig, overrides: dict[str, Any], fixed: frozenset[str]):
    ov = {k: v for k, v in overrides.items() if getattr(config, k) != v}
    if set(ov) & fixed:
        return None
    try:
        config.replace(**ov)
    except ValueError:
        return None
    return Drawn(case, tuple(sorted(ov.items())))


def _long(config: KernelConfig, max_lookups: int) -> dict[str, Any]:
    """The config's own threshold and chunk when a run past two chunks fits the budget, else small ones."""
    th, ch = config.long_run_threshold, config.chunk_size
    if max(th, 2 * ch + 1) + th <= max_lookups // 2:
        return {}
    return {"long_run_threshold": 8, "chunk_size": 3}


def _bad(tables, mode, pooling, ids, offsets, weighted, seed, length=5, **kw) -> BadIdCase:
    bad = BadBatchSpec(tables, 3, max_length=length, weighted=weighted, bad_ids=tuple(ids), bad_offsets=tuple(offsets),
                       duplicates=True, seed=seed)
    spec = CaseSpec(tables=tables, batch_size=3, pooling=pooling, bounds_check=mode, weighted=weighted,
                    max_length=length, seed=seed, **kw)
    return BadIdCase(spec, bad)


POSITIONS_EDGE = 2**16  # a batch or a segment one past this: a 16-bit position, length or counter wraps


def size_edges(max_lookups: int) -> list[CaseSpec]:
    """A batch of 4,097 bags and 65,552 positions, and one row read 65,537 times beside seven others, where
    ``max_lookups`` affords each: past every 16-bit (and 12-bit bag) count a TBE might keep."""
    out = [CaseSpec(tables=((1000, 8),), batch_size=POSITIONS_EDGE // 16 + 1, length_profile="fixed", max_length=16,
                    seed=30),
           CaseSpec(tables=((64, 8),), batch_size=8, length_profile="fixed", max_length=1,
                    hot_rows=(HotRow(0, 5, POSITIONS_EDGE + 1),), seed=31)]
    return [c for c in out if c.expected_lookups() <= max_lookups]


def tour(config: KernelConfig, max_lookups: int, fixed: frozenset[str] = frozenset()) -> list[Drawn]:
    """The opening cases for a campaign under ``config`` (cheapest first)."""
    c = config
    long_ov = _long(c, max_lookups)
    th = long_ov.get("long_run_threshold", c.long_run_threshold)
    ch = long_ov.get("chunk_size", c.chunk_size)
    loop_ov = long_ov if 2 * 3 * 8 * ch <= max_lookups else {"long_run_threshold": 8, "chunk_size": 3}
    strided_rows = 1024 if 2 * 1024 <= max_lookups // 4 else 32  # past 4 x the SMs of any GPU, or of the interpreter
    loop_ch = loop_ov.get("chunk_size", c.chunk_size)
    wide = 2 * c.dim_buckets[-1] + 1 if 2 * c.dim_buckets[-1] + 1 <= 160 else None
    narrow = {} if wide else {"dim_buckets": (4, 16)}
    wide = wide or 33  # 1 past a multiple of every bucket: a column loop one block short drops a column
    # 1,025 columns in at most 16 column blocks (the interpreter's cost grows with them)
    wide_ov = {} if 1025 <= 16 * c.dim_buckets[-1] else {"dim_buckets": tuple(sorted(set(c.dim_buckets) | {128}))}
    st = {"small_table_max_rows": 16, "small_table_min_dim": 16, "small_table_max_dim": 32,
          "small_table_min_pooling": 8, "small_table_bags_per_program": 2, "small_table_histogram_ids": 16}
    def past_steps(cfg: KernelConfig) -> int:  # on the path: a whole counting step past its edge, 3 ids into the next
        return step_edge(cfg) + counting_step(cfg) + 3

    affordable = past_steps(c) <= max_lookups // (4 * (c.small_table_bags_per_program + 1))
    if affordable and c.small_table_min_dim <= c.small_table_max_dim:
        st = {}
    E = st.get("small_table_max_rows", c.small_table_max_rows)
    D = st.get("small_table_min_dim", c.small_table_min_dim)
    L = past_steps(c.replace(**st))
    bags = st.get("small_table_bags_per_program", c.small_table_bags_per_program) + 1
    items = [
        ("empty bags", CaseSpec(tables=((5, 4), (3, 2)), batch_size=3, length_profile="empty", seed=1), {}),
        ("ids at both ends of every table, weighted mean",
         CaseSpec(tables=((7, 5), (1, 3), (64, 2)), batch_size=4, max_length=3, weighted=True, pooling="mean",
                  hot_rows=(HotRow(0, 0, 2), HotRow(0, 6, 3)), id_skew=2.0, seed=2), {}),
        # early: few ids, and its narrow table's second Adagrad step reads the state the first wrote
        ("rows past 1,024 columns beside a narrow table, weighted mean adagrad, two steps",
         CaseSpec(tables=((4, 5), (3, 1025)), batch_size=2, max_length=2, length_profile="fixed", weighted=True,
                  pooling="mean", optimizer="exact_rowwise_adagrad", learning_rate=0.5, steps=2, seed=20), wide_ov),
        ("ids at both ends, int32, bf16, adagrad",
         CaseSpec(tables=((9, 3), (2, 8)), batch_size=3, max_length=4, index_dtype="int32", weights_dtype="bf16",
                  output_dtype="fp16", optimizer="exact_rowwise_adagrad", hot_rows=(HotRow(0, 8, 2), HotRow(1, 1, 3)),
                  seed=3), {}),
        # a hot row of table 0 spread over its four features: runs merge across output columns
        ("many features on one table, a hot row read by each, weighted adagrad, short runs side by side",
         CaseSpec(tables=((12, 6), (7, 4)), feature_table_map=(0, 1, 0, 0, 0), batch_size=3, max_length=3,
                  weighted=True, optimizer="exact_rowwise_adagrad", hot_rows=(HotRow(0, 2, 9),), seed=22),
         {"bwd_short_runs_per_program": 4}),
        # VBE: feature 1 of batch 0 between two that read table 0 with their own batches, a hot row across both
        ("a batch size per feature: batch 0 beside batch 6, a hot row over two features of one table, weighted sgd",
         CaseSpec(tables=((12, 6), (7, 4)), feature_table_map=(0, 1, 0), batch_size=6, batch_size_per_feature=(6, 0, 2),
                  max_length=3, weighted=True, hot_rows=(HotRow(0, 3, 7),), seed=23), {}),
        ("rows wider than the largest bucket, weighted mean adagrad (psw gradient loops columns)",
         CaseSpec(tables=((20, wide), (6, 5)), batch_size=3, max_length=4, weighted=True, pooling="mean",
                  optimizer="exact_rowwise_adagrad", hot_rows=(HotRow(0, 19, 4),), learning_rate=0.5, seed=4), narrow),
        ("long run at the threshold and past two chunks, two-kernel tier, weighted adagrad",
         CaseSpec(tables=((30, 6), (11, 3)), batch_size=3, max_length=2, weighted=True, pooling="mean",
                  optimizer="exact_rowwise_adagrad", hot_rows=(HotRow(0, 29, 2 * ch + 1), HotRow(1, 0, th)),
                  learning_rate=2.0, seed=5), {**long_ov, "fused_long_tier": False}),
        ("the same with rows wider than the largest bucket (column loops in the apply kernel)",
         CaseSpec(tables=((30, 9), (11, 3)), batch_size=3, max_length=2, weighted=True, pooling="mean",
                  optimizer="exact_rowwise_adagrad", hot_rows=(HotRow(0, 29, 2 * ch + 1), HotRow(1, 0, th)),
                  learning_rate=2.0, seed=15), {**long_ov, "fused_long_tier": False, "dim_buckets": (4,)}),
        ("long runs, fused tier, wide rows, sgd",
         CaseSpec(tables=((30, 9),), batch_size=3, max_length=2, weights_dtype="fp16",
                  hot_rows=(HotRow(0, 3, 2 * ch + 1), HotRow(0, 7, th), HotRow(0, 11, 2 * ch)), learning_rate=2.0,
                  seed=6),
         {**long_ov, "fused_long_tier": True, "fused_long_min_lookups": 0, "dim_buckets": (4,),
          "long_grid_multiplier": 1}),  # two programs on the CPU: the grid-stride loop turns
        # loop cells (tbe.loops): 24 chunks and 3 long runs on two programs, 8 whole chunks a run (the apply
        # kernel's full group of partials), and a second step on the workspace the first one left
        ("three long runs of eight whole chunks, two steps, one program per SM, two-kernel tier, adagrad",
         CaseSpec(tables=((30, 8),), batch_size=3, max_length=2, optimizer="exact_rowwise_adagrad", steps=2,
                  hot_rows=tuple(HotRow(0, r, 8 * loop_ch) for r in (1, 2, 3)), seed=24),
         {**loop_ov, "fused_long_tier": False, "long_grid_multiplier": 1}),
        # more distinct rows than one pass of the side-by-side kernel takes on one program per SM (4 x SMs: 528 on
        # an H100, 8 under the interpreter): its grid-stride loop turns
        ("runs past one pass of the side-by-side short kernel, one program per SM",
         CaseSpec(tables=((4 * strided_rows, 8),), batch_size=strided_rows, max_length=2, length_profile="fixed",
                  seed=25), {"bwd_short_runs_per_program": 4, "short_grid_multiplier": 1}),
        ("long run one short of the threshold and one of a single chunk",
         CaseSpec(tables=((12, 4),), batch_size=2, max_length=2, hot_rows=(HotRow(0, 5, th - 1),), seed=7),
         {**long_ov, "fused_long_tier": False}),
        ("small-table path, bags past one counting step",
         CaseSpec(tables=((E, D),), batch_size=bags, length_profile="fixed", max_length=L, weights_dtype="fp16",
                  pooling="mean", seed=8), {**st, "small_table_path": True}),
        ("bad ids of every kind and broken offsets, standalone check, warning, weighted mean",
         _bad(((6, 5), (9, 3)), "warning", "mean", EVERY_ID, ("decreasing", "last_long", "first_positive"), True, 9),
         {"bounds_check_block": 4, "fused_bounds_check": False}),
        ("bad ids and offsets, fused check, ignore, sum",
         _bad(((6, 5), (9, 3)), "ignore", "sum", EVERY_ID, ("past_end", "first_negative", "last_short"), False, 10,
              optimizer="exact_rowwise_adagrad"), {"bounds_check_block": 4, "fused_bounds_check": True}),
        ("bad id, fatal, fused", _bad(((6, 5), (9, 3)), "fatal", "sum", (EVERY_ID[3],), (), False, 11),
         {"fused_bounds_check": True}),
        ("broken offsets, fatal", _bad(((6, 5),), "fatal", "mean", (), ("decreasing",), False, 12), {}),
        ("valid batch under fatal: must not raise, both checks",
         CaseSpec(tables=((6, 5), (9, 3)), batch_size=3, max_length=4, bounds_check="fatal", seed=18),
         {"bounds_check_block": 4}),
        ("valid batch under fatal, fused check",
         CaseSpec(tables=((6, 5),), batch_size=3, max_length=4, bounds_check="fatal", weighted=True, seed=19),
         {"fused_bounds_check": True}),
        ("short runs side by side, weighted mean adagrad, many single-lookup runs",
         CaseSpec(tables=((200, 16), (40, 7)), batch_size=6, max_length=5, pooling="mean", weighted=True,
                  optimizer="exact_rowwise_adagrad", weights_dtype="bf16", hot_rows=(HotRow(0, 0, 2),), steps=2,
                  seed=13), {"bwd_short_runs_per_program": 4}),  # two steps: optimizer state carried over
        ("short runs side by side, sum sgd", CaseSpec(tables=((50, 8),), batch_size=5, max_length=4, seed=16),
         {"bwd_short_runs_per_program": 2}),
        ("bad ids, fused check inside the small-table path (several counting steps)",
         BadIdCase(CaseSpec(tables=((4, 8),), batch_size=3, pooling="mean", bounds_check="warning", max_length=24,
                            weights_dtype="fp16", seed=70),
                   BadBatchSpec(((4, 8),), 3, max_length=24, bad_ids=EVERY_ID[:4], seed=70)),
         # seed 70: bags of 24, 18 and 18 ids, each past one 16-id counting step
         {"small_table_path": True, "small_table_max_rows": 4, "small_table_min_dim": 1, "small_table_max_dim": 16,
          "small_table_min_pooling": 1, "small_table_bags_per_program": 1, "small_table_histogram_ids": 16,
          "fused_bounds_check": True}),
        ("hoisted transpose, looping persistent grids, per-bucket forward tiles",
         CaseSpec(tables=((25, 8), (5, 12)), batch_size=6, length_profile="zipf", max_length=9, weighted=True,
                  hot_rows=(HotRow(0, 4, th),), seed=14),
         {**long_ov, "hoist_transpose": True, "index_dtype": "int64", "classify_block": 4, "short_grid_multiplier": 1,
          "long_grid_multiplier": 1, "fwd_bucket_tiles": ((8, 2, 2, 1), (16, 1, 2, 4)), "fwd_gather_weighted": 2}),
    ]
    past = past_counter_length(c)
    if not long_ov and past_counter_fits(c, max_lookups):  # affordable on a GPU budget only
        items.append((f"one run of {past:,} lookups, past {COUNTER_CHUNKS:,} chunks of the config's own size, exact values",
                      CaseSpec(tables=((64, 32),), batch_size=512, max_length=1, length_profile="fixed",
                               hot_rows=(HotRow(0, 5, past),), learning_rate=0.5, values="dyadic", seed=21), {}))
    out = []
    for _, case, overrides in items:
        d = _drawn(case, c, overrides, fixed)
        if d is not None:
            out.append(d)
    return out
