"""Seeded CPU draws of many values on several threads, with values that do not depend on the thread count.

torch's CPU generator is serial: one core draws about 10^8 doubles a second, so the weights of a
500k x 128 table, or the ids of a batch of millions of lookups, take seconds on a host with many idle
cores. A draw of more than ``CHUNK`` values is split into fixed chunks of ``CHUNK``; chunk k comes from a
generator of its own, seeded from one value the caller's generator yields and k, and the chunks are
drawn on a thread pool as large as torch's intra-op pool (torch releases the GIL inside an op). A draw
of at most ``CHUNK`` values is the plain draw from the caller's generator, unchanged. Written here
rather than taken from a library: the split only needs torch's own generators, and what it must keep
(the values fixed by the seed alone) is this project's rule.
"""

from __future__ import annotations

import concurrent.futures as cf
from typing import Callable

import torch

CHUNK = 1 << 20
_MASK = (1 << 63) - 1


def chunk_seed(base: int, k: int) -> int:
    """Chunk ``k``'s seed: a 63-bit mix of (``base``, ``k``) (splitmix64's finalizer), so neighbouring chunks and
    neighbouring bases get unrelated streams."""
    x = (base * 0x9E3779B97F4A7C15 + (k + 1) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & ((1 << 64) - 1)
    return (x ^ (x >> 31)) & _MASK


def threads() -> int:
    """Threads for the chunks: torch's own intra-op count, which the process's share of the machine sets
    (``OMP_NUM_THREADS``: ``fuzz.execution.gpu_pin`` for campaign workers)."""
    return max(1, torch.get_num_threads())


def chunks(n: int) -> list[tuple[int, int]]:
    """(start, end) of each chunk of a draw of ``n`` values."""
    return [(a, min(n, a + CHUNK)) for a in range(0, n, CHUNK)]


def fill(out: torch.Tensor, g: torch.Generator,
         draw: Callable[[torch.Tensor, torch.Generator], object]) -> torch.Tensor:
    """``draw(part, generator)`` writes ``part`` of the 1-D tensor ``out`` in place: into all of ``out`` from ``g``
    where it holds at most ``CHUNK`` values, else chunk by chunk on a thread pool (one value from ``g`` seeds
    them). Returns ``out``."""
    n = out.numel()
    if n <= CHUNK:
        draw(out, g)
        return out
    base = int(torch.randint(0, 1 << 62, (1,), generator=g))
    parts = chunks(n)

    def one(k: int) -> None:
        a, b = parts[k]
        draw(out[a:b], torch.Generator().manual_seed(chunk_seed(base, k)))

    with cf.ThreadPoolExecutor(min(len(parts), threads())) as pool:
        list(pool.map(one, range(len(parts))))
    return out


def drawn(n: int, g: torch.Generator, draw: Callable[[int, torch.Generator], torch.Tensor],
          dtype: torch.dtype) -> torch.Tensor:
    """``draw(m, generator)`` returns ``m`` values of ``dtype``: all ``n`` from ``g`` where ``n <= CHUNK``, else
    chunk by chunk (``fill``)."""
    if n <= CHUNK:
        return draw(n, g)
    return fill(torch.empty(n, dtype=dtype), g, lambda part, gen: part.copy_(draw(part.numel(), gen)))


def uniform(n: int, g: torch.Generator, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``torch.rand(n, generator=g, dtype=dtype)``, chunked."""
    return drawn(n, g, lambda m, gen: torch.rand(m, generator=gen, dtype=dtype), dtype)


def integers(low: int, high: int, n: int, g: torch.Generator) -> torch.Tensor:
    """``torch.randint(low, high, (n,), generator=g)`` (int64), chunked."""
    return drawn(n, g, lambda m, gen: torch.randint(low, high, (m,), generator=gen), torch.int64)
