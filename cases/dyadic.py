"""Exact-value data: weights, per-sample weights and upstream gradients on a dyadic grid.

Every value is a nonzero integer times a fixed power of two (``D_GRID``, ``PSW_GRID``,
``W_GRID``), and the integers' range is chosen from the case so that each accumulated
entry sums fewer than 2^24 grid units: the longest run (and the longest bag) of the
case is at most ``longest_accumulation(spec)`` lookups, and ``magnitudes`` caps the
integers so that this many terms of the largest size stay below 2^24 units. Then every
partial sum, in any order, is exactly representable in fp32, the accumulation error is
zero, and a single dropped or doubled lookup moves the result by a whole grid unit; the
bounds (``oracles/exactness.py``) recognise such sums from the values themselves.

Bug class: anything that loses, repeats or mis-weights a few lookups of a very long run
(a dropped chunk, a zeroed update), which random-magnitude data hides under an error
bound that grows with the run length.

MEAN pooling divides by the bag length L, which is not dyadic unless L is a power of
two. Weighted MEAN cases get per-sample weights that are multiples of their bag's L, so
that psw / L is again a grid integer; but an implementation may as well form d_out / L or
fl(1/L) first (``oracles.elementwise.terms_exact``), so a MEAN run's gradient counts as
exact only where every bag of the run has a power-of-two length; the bounds decide per entry.
"""

from __future__ import annotations

import math

import torch

from tbe import draws

VALUE_KINDS = ("random", "dyadic")
D_GRID = 2.0 ** -3     # upstream gradients: k * 2^-3
PSW_GRID = 2.0 ** -2   # per-sample weights: k * 2^-2 (times L under MEAN)
W_GRID = 2.0 ** -7     # initial weights: k * 2^-7
MAX_INT = 64           # integer range cap: exact in bf16 (8 significant bits) and fp16
EXACT_UNITS = 2 ** 24  # an fp32 sum of multiples of 2^e is exact below 2^24 * 2^e


def longest_accumulation(spec) -> int:
    """Upper bound on the lookups of any one run or bag: a table's whole share of the batch (the bags of every
    feature that reads it)."""
    per_bag = 0 if spec.length_profile == "empty" else spec.max_length
    readers = spec.feature_tables
    longest = 1
    for t in range(spec.num_tables):
        hot = sum(h.count for h in spec.hot_rows if h.table == t)
        longest = max(longest, readers.count(t) * spec.batch_size * per_bag + hot)
    return longest


def magnitudes(spec) -> tuple[int, int, int]:
    """(largest |integer| of d_out, of per-sample weights, of weights) for ``spec``.

    With N = ``longest_accumulation``: N * Kd * Kp < 2^24 (a run's gradient) and
    N * Kp * Kw < 2^24 (a bag's pooled sum, SUM pooling), each in units of its grid.
    """
    units = (EXACT_UNITS - 1) // longest_accumulation(spec)
    if units < 1:
        raise ValueError(f"CaseSpec.values='dyadic': {longest_accumulation(spec)} lookups in one run or bag "
                         f"cannot sum exactly in fp32 (at most {EXACT_UNITS - 1})")
    kp = max(1, min(8, math.isqrt(units))) if spec.weighted else 1
    k = max(1, min(MAX_INT, units // kp))
    return k, kp, k


def _signed_ints(n: int, k: int, g: torch.Generator, device=None) -> torch.Tensor:
    """``n`` nonzero integers in [-k, k] (float64) on ``device``, so every lookup changes every column it reaches."""
    mag = draws.integers(1, k + 1, n, g, device).to(torch.float64)
    return torch.where(draws.uniform(n, g, device=device) < 0.5, -mag, mag)


def dyadic_grads(spec, g: torch.Generator, out_dtype: torch.dtype, device=None) -> list[torch.Tensor]:
    """One [B, sum D] upstream gradient per step (flat [sum B_f * D_f] under VBE), nonzero multiples of
    ``D_GRID``, on ``device``."""
    kd = magnitudes(spec)[0]
    total_dim = spec.total_dim
    shape = (spec.output_size,) if spec.vbe else (spec.batch_size, total_dim)
    return [(_signed_ints(math.prod(shape), kd, g, device) * D_GRID).view(shape).to(out_dtype)
            for _ in range(spec.steps)]


def dyadic_psw(spec, offsets: torch.Tensor, g: torch.Generator, mean: bool) -> torch.Tensor:
    """Per-sample weights k * ``PSW_GRID`` (k in 1..Kp, one in five negative), on the offsets' device; under
    MEAN also times the bag length, so that psw / L is a grid value the kernel computes exactly."""
    off = offsets.to(torch.int64)
    lengths = off[1:] - off[:-1]
    n = int(off[-1]) if off.numel() else 0
    kp = magnitudes(spec)[1]
    k = draws.integers(1, kp + 1, n, g, off.device).to(torch.float64)
    k = torch.where(draws.uniform(n, g, device=off.device) < 0.2, -k, k) * PSW_GRID
    if mean:
        k = k * torch.repeat_interleave(lengths, lengths, output_size=n).to(torch.float64)
    return k.to(torch.float32)


def dyadic_weights(spec, seed: int, device=None) -> torch.Tensor:
    """Packed initial weights, nonzero integers in [-Kw, Kw] times ``W_GRID`` (float64; every
    weights dtype holds them exactly), drawn from ``seed``."""
    g = torch.Generator().manual_seed(seed ^ 0xD7AD1C)
    return _signed_ints(sum(e * d for e, d in spec.tables), magnitudes(spec)[2], g, device) * W_GRID
