"""Race stress for the fused long tier: many long runs, each split into many chunks.

Every value is a small integer, so every partial and full sum is exact in fp32 whatever
order the atomics land in: a row that differs from the exact result by any amount lost
a partial to a race (a missing fence or a missing CTA barrier), never to rounding.
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass
class RaceBatch:
    rows: int
    dim: int
    batch_size: int
    indices: torch.Tensor       # [rows * run_length] int32, every row read run_length times
    offsets: torch.Tensor       # [batch_size + 1] int32
    grad_output: torch.Tensor   # [batch_size, dim] fp32, integers in [-2, 2]
    weights: torch.Tensor       # [rows * dim] fp32, integers in [-4, 4]
    expected: torch.Tensor      # [rows, dim] fp32: exact SGD result with lr = 1

    @property
    def num_lookups(self) -> int:
        return self.indices.numel()


def race_batch(
    rows: int, chunks_per_run: int, chunk_size: int, dim: int, batch_size: int, seed: int, device: torch.device
) -> RaceBatch:
    """One table whose every row is one run of ``chunks_per_run * chunk_size`` lookups.

    The expected update is computed exactly as counts^T @ grad in float64 (integers well
    below 2^53, and the result below 2^24, so it is also exact in fp32).
    """
    g = torch.Generator(device="cpu").manual_seed(seed)
    run_length = chunks_per_run * chunk_size
    n = rows * run_length
    if n % batch_size:
        raise ValueError(f"rows * run_length = {n} must be a multiple of batch_size = {batch_size}")
    ids = torch.arange(rows, dtype=torch.int32).repeat_interleave(run_length)
    ids = ids[torch.randperm(n, generator=g)]
    offsets = torch.arange(0, n + 1, n // batch_size, dtype=torch.int32)
    grad = torch.randint(-2, 3, (batch_size, dim), generator=g).to(torch.float32)
    weights = torch.randint(-4, 5, (rows * dim,), generator=g).to(torch.float32)
    ids_d, grad_d = ids.to(device), grad.to(device)
    bags = torch.arange(batch_size, device=device).repeat_interleave(n // batch_size)
    counts = torch.zeros((rows, batch_size), dtype=torch.float64, device=device)
    counts.index_put_((ids_d.long(), bags), torch.ones(n, dtype=torch.float64, device=device), accumulate=True)
    row_grad = counts @ grad_d.double()
    expected = (weights.to(device).double().view(rows, dim) - row_grad).float()
    return RaceBatch(rows, dim, batch_size, ids_d, offsets.to(device), grad_d, weights.to(device), expected)
