"""Triaged disagreements of other TBEs (FBGEMM's, TorchRec's Triton TBE) with the FP64 reference, each pinned by
a test that fails once it goes away.

An entry here is a documented semantic difference or a bug of that TBE, never a bug of this
project's kernels: they are always still checked against the FP64 reference for these
inputs. ``fuzz/judge/known.py`` matches them on failing cases when that TBE is the system under test;
TorchRec's are written up as upstream bug reports in ``docs/findings/torchrec-triton.md``.
"""

from __future__ import annotations

from typing import Optional

import torch

from tbe.modes import Optimizer, Pooling

FBGEMM_WEIGHTED_MEAN_FP16_FORWARD = (
    "fbgemm-gpu-cpu forward with MEAN pooling, per-sample weights and fp16 output returns the "
    "weighted SUM (no division by L); with fp32 output it divides. Oracle bug, seen in 1.8.0."
)
FBGEMM_FP16_SGD_UPDATE = (
    "fbgemm-gpu-cpu EXACT_SGD with fp16 weights rounds the step lr * g to fp16 before subtracting it "
    "(bit-exact with fp16(w - fp16(lr * g)) computed in fp32), so it lands outside the one-rounding "
    "bound of the exact update (by up to ~50x, even on rows read once); its row-wise Adagrad and "
    "fp32 steps agree. Seen in 1.8.0."
)
FBGEMM_WEIGHTED_MEAN_BACKWARD = (
    "fbgemm-gpu-cpu backward with MEAN pooling and per-sample weights does not divide the row "
    "gradient (nor the per-sample-weight gradient) by L: its step is SUM pooling's, so its update "
    "and momentum disagree with the FP64 reference. Semantic difference."
)
FBGEMM_ADAGRAD_UNSORTED_FEATURE_MAP = (
    "fbgemm-gpu-cpu EXACT_ROWWISE_ADAGRAD backward raises 'num of rows processed by adagrad: 0 does not match "
    "c_block size' when its feature_table_map is not non-decreasing (a later feature reads an earlier table: "
    "[1, 0], [0, 1, 0]); non-decreasing maps ([0, 0, 1]) and EXACT_SGD train. Seen in 1.8.0."
)
FBGEMM_ADAGRAD_UNSORTED_FEATURE_MAP_VBE = (
    "Under VBE the same row-wise Adagrad backward on a feature_table_map that is not non-decreasing need not raise: "
    "with a feature of batch 0 between two features of one table (map [0, 1, 0], batch sizes [8, 0, 7]) it updates "
    "that table's rows and momentum wrongly and returns (64 of 768 weights, ratio 1.5e6), where batch sizes [8, 3, "
    "7] or a fixed batch raise 'does not match c_block size'; a non-decreasing map and EXACT_SGD train. Seen in 1.8.0."
)
FBGEMM_FP16_OUTPUT_UNSORTED_FEATURE_MAP = (
    "fbgemm-gpu-cpu's forward with fp16 output raises 'Index i is out of bounds: 0, range 0 to -n' (a negative "
    "table size) when its feature_table_map is not non-decreasing ([1, 0], [0, 1, 0]), whatever the weights and "
    "optimizer; with fp32 output it runs. Seen in 1.8.0."
)
FBGEMM_CPU_VBE_INT32_HEAP = (
    "fbgemm-gpu-cpu's VBE path (batch_size_per_feature_per_rank) with int32 indices corrupts the process heap: glibc "
    "aborts ('corrupted size vs. prev_size', 'malloc_consolidate(): invalid chunk size', SIGABRT) in the step, "
    "deterministically for one table of 1 x 4 with B 75 and for 2 tables with B (4, 4), under SGD and row-wise "
    "Adagrad, fp16 and fp32 output, with and without its bounds check; the same batch with int64 indices, or as a "
    "fixed batch, runs clean. Seen in 1.8.0. Campaigns feed fbgemm-cpu VBE batches with int64 indices only."
)
FBGEMM_SGD_SPLIT_FEATURE_RUNS = (
    "fbgemm-gpu-cpu EXACT_SGD updates a table once per run of adjacent features reading it, so when a table's "
    "features are not adjacent in feature_table_map ([0, 1, 0]) a row read by both runs is stepped twice, "
    "w - lr * g1 - lr * g2 with one fused multiply-add per run (bit-exact with that), one rounding more than the one-rounding "
    "bound of the merged update allows; adjacent features ([1, 0, 0]) are merged. Seen in 1.8.0."
)
FBGEMM_MINUS_ONE_CPU = (
    "FBGEMM's bounds check passes id -1 as a pruned row (ours repairs and counts it); fbgemm-gpu-cpu's "
    "lookup then raises 'Index ... is out of bounds: -1' under every mode. Semantic difference."
)
FBGEMM_FIRST_OFFSET_KEPT = (
    "FBGEMM keeps offsets[0] > 0 (ids before it belong to no bag); ours repairs it to 0, so bag 0 and "
    "the rows it updates differ. Semantic difference (oracles/reference_bounds.py). TorchRec's Triton TBE "
    "runs FBGEMM's check (or, fused, repairs the same way), and its per-sample-weight gradient of the ids in "
    "no bag is never written (torch.empty_like)."
)
FBGEMM_CUDA_WEIGHTED_MEAN_PSW_GRAD = (
    "FBGEMM's CUDA backward computes the per-sample-weight gradient from d_out without dividing by L "
    "under MEAN pooling (its grad_indice_weights op takes no pooling mode). Read in FBGEMM's source."
)

FBGEMM_CUDA_MEAN_GRAD_ROUNDED = (
    "FBGEMM's CUDA backward under MEAN pooling first writes d_out / L into a tensor of d_out's own dtype "
    "(its grad_mean kernel fills an empty_like of grad_output), so with fp16 or bf16 output every bag's "
    "scaled gradient is rounded to that dtype before the row sums it, one rounding more than the bound "
    "allows: updated weights and row-wise Adagrad momentum miss it. Read in FBGEMM's source; met by "
    "`tbe-fuzz run --sut fbgemm-cuda` (seed 0) on the H200 with fp16 output."
)


TORCHREC_WEIGHTED_UNSTABLE_ARGSORT = (
    "TorchRec's Triton TBE backward with per-sample weights orders the weights by torch.argsort(linear_indices), "
    "an unstable sort, but reads each lookup's bag from infos_sorted, which FBGEMM's transpose orders stably: "
    "within a run of one row the weights and the bags are paired in two different orders, so a row read by "
    "several bags with different weights gets sum_i w_pi(i) * dout[b_i] instead of sum_i w_i * dout[b_i]. "
    "Every version (docs/findings/torchrec-triton.md)."
)
TORCHREC_MISSING_PSW_GRAD = (
    "TorchRec's Triton TBE before 3f2fe5f3 returns no gradient for the per-sample weights (no kernel computes "
    "it; the autograd Function returns None in its place). Fixed upstream in 3f2fe5f3 (#4602)."
)
TORCHREC_EMPTY_BATCH_BACKWARD = (
    "TorchRec's Triton TBE runs the forward of an empty batch (B = 0: offsets of one entry) and returns a "
    "[0, sum D] output, but its backward raises 'B must be positive. Got B = 0' (it calls "
    "fbgemm.get_infos_metadata with B = 0); FBGEMM's own TBE trains on such a batch. Every version "
    "(docs/findings/torchrec-triton.md)."
)
TORCHREC_BROKEN_OFFSETS_OUT_OF_BOUNDS = (
    "TorchRec's Triton TBE keeps a positive offsets[0] under WARNING (FBGEMM's check and its own fused repair "
    "both do): the ids before it are in no bag, so no bounds check looks at them, yet its backward still "
    "transposes and applies them. On an H100, where FBGEMM's transpose leaves their slots unwritten, the "
    "backward faults (illegal memory access) even with every id in range; in Triton's interpreter, where this "
    "project's transpose puts them in bag 0, an out-of-range id among them sends the short-run "
    "backward's loads past the end of weight (or dout) (the sanitizer stops them; unsanitized the heap is "
    "corrupted and the process dies). Every version (docs/findings/torchrec-triton.md)."
)
TORCHREC_STOCHASTIC_ROUNDING_FP16 = (
    "TorchRec's Triton TBE applies stochastic rounding (the module's default) whatever the weights' dtype, and "
    "its store rounds through fp16: every updated fp32 weight becomes one of its two neighbouring fp16 values "
    "(11 significant bits, inf past 65,504), and a bf16 weight below fp16's normal range (2^-14) lands on fp16's "
    "subnormal grid (steps of 2^-24) instead of bf16's finer one (and past 65,504 becomes inf). Every version "
    "(docs/findings/torchrec-triton.md)."
)


def fbgemm_forward_difference(pooling: Pooling, weighted: bool, output_dtype: torch.dtype) -> Optional[str]:
    """Why FBGEMM's CPU forward is not expected to match FP64 for these settings, or None."""
    if pooling == Pooling.MEAN and weighted and output_dtype == torch.float16:
        return FBGEMM_WEIGHTED_MEAN_FP16_FORWARD
    return None


def fbgemm_backward_difference(pooling: Pooling, weighted: bool) -> Optional[str]:
    """Why FBGEMM's CPU update is not expected to match FP64 for these settings, or None."""
    if pooling == Pooling.MEAN and weighted:
        return FBGEMM_WEIGHTED_MEAN_BACKWARD
    return None


def split_tables(feature_table_map: tuple[int, ...]) -> bool:
    """Whether some table's features are not one run of adjacent features in ``feature_table_map``."""
    runs = [t for i, t in enumerate(feature_table_map) if i == 0 or feature_table_map[i - 1] != t]
    return len(runs) != len(set(runs))


def fbgemm_update_difference(optimizer: Optimizer, weights_dtype: torch.dtype,
                             feature_table_map: tuple[int, ...] = ()) -> Optional[str]:
    """Why FBGEMM's CPU weight update is not judged against the FP64 bound at all, or None."""
    if optimizer == Optimizer.EXACT_SGD and weights_dtype == torch.float16:
        return FBGEMM_FP16_SGD_UPDATE
    if optimizer == Optimizer.EXACT_SGD and split_tables(feature_table_map):
        return FBGEMM_SGD_SPLIT_FEATURE_RUNS
    return None


def fbgemm_feature_map_differences(optimizer: Optimizer, output_dtype: torch.dtype,
                                   feature_table_map: tuple[int, ...]) -> tuple[str, ...]:
    """Why FBGEMM's CPU TBE cannot run or train with ``feature_table_map`` at all (every reason that applies)."""
    unsorted = any(b < a for a, b in zip(feature_table_map, feature_table_map[1:]))
    found = []
    if output_dtype == torch.float16 and unsorted:
        found.append(FBGEMM_FP16_OUTPUT_UNSORTED_FEATURE_MAP)
    if optimizer == Optimizer.EXACT_ROWWISE_ADAGRAD and unsorted:
        found.append(FBGEMM_ADAGRAD_UNSORTED_FEATURE_MAP)
    return tuple(found)
