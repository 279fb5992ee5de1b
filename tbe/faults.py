"""Planted faults: named, known bugs that a KernelConfig can switch on.

They exist so the fuzz suite can prove it catches real bug classes. They are refused
unless the process opted in (``TBE_FUZZ_ALLOW_FAULTS=1``, set by the test suite and the
fuzz driver's self-test), so a production config can never carry one by accident.

A kernel receives the faults it can plant as one constexpr bitmask, ``FAULTS``: each fault has a bit
(``BITS``), a kernel module names the bits it reads as ``FAULT_*`` constexprs, and ``kernel_faults`` gives a
launch the bits of those that are on (so a fault a kernel cannot plant never changes its specialization).
"""

from __future__ import annotations

import contextlib
from typing import Iterable, Iterator

import triton.language as tl

from tbe.env import ALLOW_FAULTS

# name -> the bug it plants
KNOWN: dict[str, str] = {}
# faults whose symptom is a kernel that never returns: only a supervised run (one that can time the
# kernels out) may switch them on, so a warm-up or an in-process check must leave them out
HANGS: set[str] = set()
# name -> its bit in a kernel's FAULTS mask
BITS: dict[str, int] = {}


def register(name: str, description: str, hangs: bool = False) -> tl.constexpr:
    """Record a fault; returns its bit, the constexpr a kernel tests as ``if FAULT_... & FAULTS:``."""
    KNOWN[name] = description
    BITS[name] = 1 << len(BITS)
    if hangs:
        HANGS.add(name)
    return tl.constexpr(BITS[name])


def kernel_faults(faults: Iterable[str], *bits) -> int:
    """A launch's ``FAULTS``: the bits among ``bits`` (ints or constexprs) whose fault is in ``faults``."""
    if not faults:
        return 0
    readable = 0
    for b in bits:
        readable |= int(getattr(b, "value", b))
    on = 0
    for name in faults:
        on |= BITS[name]
    return on & readable


FAULT_FWD_SKIP_LAST = register(
    "fwd_skip_last_id", "forward gather drops the last id of every bag with more than one id")
FAULT_MEAN_RAW_LEN = register(
    "fwd_mean_wrong_length", "MEAN divides by the bag length before bounds-check repair dropped ids")
register("unstable_weighted_pairing", "transpose pairs per-sample weights through an unstable sort")
register("int32_linearize_past_limit", "linearization forced to int32 even when rows exceed 2^31-1")
FAULT_THRESHOLD_OFF_BY_ONE = register(
    "long_threshold_off_by_one", "a run of exactly long_run_threshold lookups takes neither tier")
FAULT_SKIP_LAST_CHUNK = register(
    "skip_last_chunk_update", "the optimizer update is skipped for the last chunk of a split run")
FAULT_ACC_W = register(
    "accumulate_in_weight_dtype", "gradients accumulate in the weights' dtype instead of fp32")
register("no_fence", "the fused long tier counts down without a device-scope fence")
FAULT_NO_BARRIER = register(
    "no_barrier", "the fused long tier counts down from one lane without a CTA barrier before the release")
FAULT_DROP_CHUNK = register(
    "drop_chunk_past_4096", "a run split into more than 4,096 chunks loses the partial sum of chunk 4,096")
FAULT_ZERO_LONG = register(
    "zero_update_past_2p20", "runs longer than 4,096 x chunk_size lookups (2^20 at the default chunk size 256) "
                             "get a zero gradient, so their row is not updated")
FAULT_ID_OFF_BY_ONE = register(
    "bounds_check_off_by_one", "the id check lets an id equal to its table's row count through")
# bug classes of FBGEMM's own fixes (pytorch/FBGEMM #5569, #2509, #3623)
FAULT_DROP_WIDE = register(
    "fwd_drop_cols_past_1024", "the generic forward writes zeros to a row's output columns past 1,024")
FAULT_HANG_NARROW = register(
    "hang_narrow_long_run", "the long tier's chunk loop never advances for rows narrower than 32 columns", hangs=True)
FAULT_LANE_MASK = register(
    "lane_mask_narrow", "for D < 32 the side-by-side short kernel's lane mask spans the whole column block "
                        "instead of D columns: it reads the next columns' gradient and writes into the next row")
FAULT_MOMENTUM_BF16 = register(
    "momentum_low_precision", "row-wise Adagrad in the side-by-side short kernel reads its momentum back rounded "
                              "to bf16 every step: exact on a row's first update (it starts at 0), drifting "
                              "over later steps")

FAULT_RUNS_PER_FEATURE = register(
    "runs_per_feature", "the transpose starts a new run where the feature changes, so a row read by several "
                        "features of one table gets one read-modify-write per feature instead of one merged "
                        "update (Adagrad's momentum counts the features apart; concurrent runs overwrite)")

FAULT_VBE_LAST_OFFSET = register(
    "vbe_last_feature_offset", "under VBE the forward writes the last feature's output block as if it started one "
                               "row late: its sample b lands in row b + 1 and its last sample wraps to the block's "
                               "first row (no write leaves the block); the backward reads each gradient at the "
                               "right row, so only the forward is off")

FAULT_BIASED_SR = register(
    "biased_stochastic_rounding", "stochastic rounding of the updated weights rounds away from zero with "
                                  "probability p + 0.1 (clamped to 1) instead of the fractional distance p: every "
                                  "store is still one of the two neighbours, only its mean is off")

# one bug of each loop class coverage counts (``tbe.loops``): a second grid-stride pass, a remainder tile, a reused
# workspace
FAULT_SHORT_ONE_PASS = register(
    "short_rows_one_pass", "the side-by-side short kernel's grid-stride loop stops after its first pass: runs past "
                           "the first programs x runs_per_program are never updated")
FAULT_APPLY_WHOLE_PARTS = register(
    "apply_drops_partial_group", "the apply kernel sums a run's chunk partials bwd_apply_parts rows at a time and "
                                 "drops the last group when the run's chunk count is not a multiple of that")
register("fused_workspace_uninitialized", "the fused long tier does not zero its workspace before a step: right on "
                                          "its first use (fresh memory is zeroed), wrong when a later step reuses "
                                          "it and adds onto the last step's partial sums")


def allowed() -> bool:
    return ALLOW_FAULTS.flag()


def check_allowed(faults: tuple[str, ...]) -> None:
    for name in faults:
        if name not in KNOWN:
            raise ValueError(f"KernelConfig.faults: unknown fault {name!r} (known: {sorted(KNOWN)})")
    if faults and not allowed():
        raise ValueError(
            f"KernelConfig.faults={list(faults)} plants bugs and is refused outside tests and "
            f"the fuzz driver (set {ALLOW_FAULTS.name}=1 to opt in)"
        )


@contextlib.contextmanager
def allow() -> Iterator[None]:
    """Temporarily allow planted faults in this process."""
    with ALLOW_FAULTS.scoped("1"):
        yield
