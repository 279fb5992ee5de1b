"""Chunked seeded draws (``tbe.draws``): small draws are torch's own, large ones run on several threads and their
values depend on the seed alone, never on the thread count."""

from __future__ import annotations

import math
import threading

import pytest
import torch

from tbe import draws
from tbe.draws import CHUNK


def _gen(seed: int = 11) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_a_draw_of_at_most_one_chunk_is_torchs_own_and_leaves_the_generator_where_torch_would():
    g, h = _gen(), _gen()
    assert torch.equal(draws.uniform(CHUNK, g), torch.rand(CHUNK, generator=h))
    assert torch.equal(draws.integers(3, 90, 1000, g), torch.randint(3, 90, (1000,), generator=h))
    assert torch.equal(torch.rand(5, generator=g), torch.rand(5, generator=h))


def test_a_large_draw_uses_several_threads_and_the_same_values_on_one_thread(monkeypatch):
    n = 3 * CHUNK + 17
    seen = set()

    def rand(part, gen):
        seen.add(threading.get_ident())
        torch.rand(part.numel(), generator=gen, dtype=torch.float64, out=part)

    monkeypatch.setattr(draws, "threads", lambda: 4)
    many = draws.fill(torch.empty(n, dtype=torch.float64), _gen(), rand)
    assert len(seen) > 1
    monkeypatch.setattr(draws, "threads", lambda: 1)
    one = draws.fill(torch.empty(n, dtype=torch.float64), _gen(), rand)
    assert torch.equal(many, one)
    assert not torch.equal(many, draws.fill(torch.empty(n, dtype=torch.float64), _gen(12), rand))


def test_a_large_draws_chunks_are_unrelated_streams_and_their_values_uniform():
    n = 4 * CHUNK
    u = draws.uniform(n, _gen(), torch.float64)
    parts = u.view(4, CHUNK)
    for i in range(4):
        for j in range(i + 1, 4):
            assert not torch.isin(parts[i][:1000], parts[j]).any()  # no chunk repeats another's stream
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0
    assert abs(float(u.mean()) - 0.5) < 5 * math.sqrt(1 / 12 / n)  # five standard errors of the mean
    ids = draws.integers(0, 7, n, _gen())
    counts = torch.bincount(ids, minlength=7)
    assert counts.numel() == 7 and bool((counts - n / 7).abs().max() < 5 * math.sqrt(n / 7))


def test_chunk_seeds_are_distinct_63_bit_values():
    seeds = {draws.chunk_seed(b, k) for b in range(64) for k in range(64)}
    assert len(seeds) == 64 * 64 and all(0 <= s < 2 ** 63 for s in seeds)


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
    monkeypatch.setattr(draws, "threads", lambda: 1)
    assert torch.equal(seeded_weights(layout, dtype, seed=3).to(torch.float64), w)


def test_a_large_tables_hot_rows_still_land_in_random_bags():
    """Past one chunk of lookups a table's plain ids are not shuffled (they are i.i.d. already), but a table with
    hot rows still is: its hot occurrences, appended after the plain ids, spread over the whole batch."""
    from strategies.case import CaseSpec, HotRow, materialize

    B, L, hot = 2 ** 14, 65, 512  # B * L > CHUNK lookups
    case = materialize(CaseSpec(tables=((1000, 4),), batch_size=B, max_length=L, length_profile="fixed",
                                hot_rows=(HotRow(0, 7, hot),), seed=5))
    assert case.indices.numel() > CHUNK
    bags = torch.searchsorted(case.offsets[1:], torch.nonzero(case.indices == 7).flatten(), right=True)
    assert int((bags < B // 2).sum()) > hot // 4  # not all in the last bags, where they were appended
