"""Seeded draws (``tbe.draws``): small draws are torch's own; large ones are counter-based, so their values
depend on the seed alone, never on the block size, the thread count or the device."""

from __future__ import annotations

import math

import pytest
import torch

from tbe import draws
from tbe.draws import SMALL


def _gen(seed: int = 11) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_a_draw_of_at_most_one_chunk_is_torchs_own_and_leaves_the_generator_where_torch_would():
    g, h = _gen(), _gen()
    assert torch.equal(draws.uniform(SMALL, g), torch.rand(SMALL, generator=h))
    assert torch.equal(draws.integers(3, 90, 1000, g), torch.randint(3, 90, (1000,), generator=h))
    assert torch.equal(draws.normal(500, g), torch.randn(500, generator=h))
    w = torch.arange(1, 50, dtype=torch.float64).pow(-1.1)
    assert torch.equal(draws.categorical(w, 700, g), torch.multinomial(w, 700, replacement=True, generator=h))
    assert torch.equal(draws.permutation(300, g), torch.randperm(300, generator=h))
    assert torch.equal(torch.rand(5, generator=g), torch.rand(5, generator=h))


def _splitmix(base: int, i: int) -> int:
    """The hash of (base, i) in Python's unbounded integers, written from splitmix64's definition."""
    m = (1 << 64) - 1
    x = ((i + 1) * 0x9E3779B97F4A7C15 + base * 0x94D049BB133111EB) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def test_the_hash_in_wrapping_int64_is_splitmix64_computed_exactly():
    """The int64 arithmetic wraps exactly as 64-bit unsigned arithmetic would: what keeps devices equal."""
    for base in (0, 1, 12345, (1 << 62) - 1):
        got = draws.bits(base, 2000)
        for i in (0, 1, 2, 999, 1999):
            assert int(got[i]) & ((1 << 64) - 1) == _splitmix(base, i)


def test_a_large_draw_takes_one_value_from_the_generator_and_its_values_do_not_depend_on_the_block(monkeypatch):
    n = 3 * SMALL + 17
    g, h = _gen(), _gen()
    big = draws.uniform(n, g, torch.float64)
    draws.base_of(h)
    assert torch.equal(torch.rand(5, generator=g), torch.rand(5, generator=h))
    monkeypatch.setattr(draws, "_CPU_BLOCK", 1 << 16)
    assert torch.equal(draws.uniform(n, _gen(), torch.float64), big)
    assert not torch.equal(draws.uniform(n, _gen(12), torch.float64), big)


def test_large_draws_are_uniform_and_in_range():
    n = 4 * SMALL
    u = draws.uniform(n, _gen(), torch.float64)
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0
    assert abs(float(u.mean()) - 0.5) < 5 * math.sqrt(1 / 12 / n)  # five standard errors of the mean
    u32 = draws.uniform(n, _gen(), torch.float32)
    scaled = u32 * 2 ** 24
    assert u32.dtype == torch.float32 and float(u32.max()) < 1.0 and bool((scaled == scaled.floor()).all())
    ids = draws.integers(0, 7, n, _gen())
    counts = torch.bincount(ids, minlength=7)
    assert counts.numel() == 7 and bool((counts - n / 7).abs().max() < 5 * math.sqrt(n / 7))
    assert int(draws.integers(-3, 2, n, _gen()).min()) == -3


def test_a_large_normal_draw_has_mean_zero_variance_one_and_is_symmetric_and_bounded():
    n = 2 * SMALL + 5
    x = draws.normal(n, _gen()).to(torch.float64)
    assert x.dtype == torch.float64 and abs(float(x.mean())) < 5 / math.sqrt(n)
    assert abs(float(x.var()) - 1.0) < 0.01
    assert float(x.abs().max()) <= 2 * math.sqrt(3)
    assert abs(float((x > 0).double().mean()) - 0.5) < 5 * 0.5 / math.sqrt(n)
    # beyond one sigma as often as the Irwin-Hall sum of four uniforms is (its CDF from the closed form)
    a = 2 - 1 / math.sqrt(3)
    tail = 2 * sum((-1) ** k * math.comb(4, k) * (a - k) ** 4 for k in range(int(a) + 1)) / 24
    assert abs(float((x.abs() > 1).double().mean()) - tail) < 5 * math.sqrt(tail * (1 - tail) / n)


def test_a_large_categorical_draw_follows_its_weights_and_a_large_permutation_is_one():
    w = torch.arange(1, 1001, dtype=torch.float64).pow(-1.1)
    n = 2 * SMALL
    c = draws.categorical(w, n, _gen())
    p = w / w.sum()
    freq = torch.bincount(c, minlength=1000).to(torch.float64) / n
    assert int(c.min()) >= 0 and int(c.max()) < 1000
    assert bool(((freq - p).abs() <= 5 * torch.sqrt(p * (1 - p) / n) + 1e-9).all())
    perm = draws.permutation(n, _gen())
    assert torch.equal(torch.sort(perm).values, torch.arange(n))
    assert not torch.equal(perm, draws.permutation(n, _gen(12)))
    assert float((perm[:1000] == torch.arange(1000)).double().mean()) < 0.01


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_large_seeded_weights_stay_within_each_tables_bound_and_depend_on_the_seed_alone(monkeypatch, dtype):
    from tbe.layout import TableLayout, _seeded, parse_specs, seeded_weights

    shapes = [(40_000, 32), (100, 8)]  # 1.28M values: past one chunk
    layout = TableLayout(parse_specs(shapes))
    w = seeded_weights(layout, dtype, seed=3).to(torch.float64)
    first, second = w[:40_000 * 32], w[40_000 * 32:]
    assert float(first.abs().max()) <= 1 / math.sqrt(40_000) * (1 + 2 ** -10)
    assert float(second.abs().max()) <= 1 / math.sqrt(100) * (1 + 2 ** -10)
    assert float(second.abs().max()) > 1 / math.sqrt(40_000)  # the small table is scaled by its own bound
    _seeded.cache_clear()
    monkeypatch.setattr(draws, "_CPU_BLOCK", 1 << 15)
    assert torch.equal(seeded_weights(layout, dtype, seed=3).to(torch.float64), w)


def test_a_large_tables_hot_rows_still_land_in_random_bags():
    """Past one chunk of lookups a table's plain ids are not shuffled (they are i.i.d. already), but a table with
    hot rows still is: its hot occurrences, appended after the plain ids, spread over the whole batch."""
    from cases import CaseSpec, HotRow, materialize

    B, L, hot = 2 ** 14, 65, 512  # B * L > SMALL lookups
    case = materialize(CaseSpec(tables=((1000, 4),), batch_size=B, max_length=L, length_profile="fixed",
                                hot_rows=(HotRow(0, 7, hot),), seed=5))
    assert case.indices.numel() > SMALL
    bags = torch.searchsorted(case.offsets[1:], torch.nonzero(case.indices == 7).flatten(), right=True)
    assert int((bags < B // 2).sum()) > hot // 4  # not all in the last bags, where they were appended


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="compares the CPU's draws with a CUDA device's")
def test_a_large_case_materialized_on_the_gpu_is_bit_for_bit_the_cpus():
    """Every kind of large draw (Zipf and uniform ids, hot rows and their shuffle, per-sample weights, random and
    exact-value gradients, initial weights) gives the same bits on the GPU as on the CPU."""
    from cases import CaseSpec, HotRow, tensors

    specs = [
        CaseSpec(tables=((50_000, 64), (3000, 8)), batch_size=40_000, max_length=60, weighted=True, id_skew=1.1,
                 hot_rows=(HotRow(1, 5, 300_000),), seed=7),
        CaseSpec(tables=((200_000, 16),), batch_size=2 ** 16, max_length=40, length_profile="fixed",
                 weighted=True, pooling="mean", values="dyadic", steps=2, weights_dtype="fp16", seed=8),
    ]
    for spec in specs:
        cpu, gpu = tensors(spec), tensors(spec, device="cuda")
        assert cpu.indices.numel() > SMALL and gpu.indices.device.type == "cuda"
        for name in ("indices", "offsets", "per_sample_weights", "initial_weights"):
            assert torch.equal(getattr(cpu, name), getattr(gpu, name).cpu()), (spec.seed, name)
        assert all(torch.equal(a, b.cpu()) for a, b in zip(cpu.grad_outputs, gpu.grad_outputs))
