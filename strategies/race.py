"""Race stress batches for the fused long tier: many rows, each one long run of many tiny chunks.

Every value is a small integer, so every partial and full sum is exact in fp32 whatever
order the atomics land in: a row that differs from the exact result by any amount lost a
partial sum to a race (a missing fence or CTA barrier), never to rounding. A missing fence
shows when each chunk does little work and a run has many chunks (chunks of 1-4 lookups,
64-256 chunks per run), so the chunk programs of a run finish close together.
"""

from __future__ import annotations

import dataclasses

import torch

# a row's update is a sum of run_length values in [-2, 2] on a weight in [-4, 4]: exact in fp32
MAX_RUN_LENGTH = 1 << 20


@dataclasses.dataclass
class RaceBatch:
    rows: int
    dim: int
    batch_size: int
    run_length: int
    indices: torch.Tensor       # [rows * run_length] int32, every row read run_length times
    offsets: torch.Tensor       # [batch_size + 1] int32, equal bags
    grad_output: torch.Tensor   # [batch_size, dim] fp32, integers in [-2, 2]
    weights: torch.Tensor       # [rows * dim] fp32, integers in [-4, 4]
    expected: torch.Tensor      # [rows, dim] fp32: the exact SGD result with lr = 1

    @property
    def num_lookups(self) -> int:
        return self.indices.numel()


def exact_row_sums(ids: torch.Tensor, bags: torch.Tensor, grad: torch.Tensor, rows: int,
                   step: int = 1 << 18) -> torch.Tensor:
    """[rows, dim] int64: sum of grad[bag] over each row's lookups (integers, so exact), in slices."""
    gi = grad.to(torch.int64)
    out = torch.zeros((rows, grad.shape[1]), dtype=torch.int64, device=grad.device)
    for i in range(0, ids.numel(), step):
        out.index_add_(0, ids[i:i + step].long(), gi[bags[i:i + step]])
    return out


def race_batch(
    rows: int, chunks_per_run: int, chunk_size: int, dim: int, batch_size: int, seed: int, device: torch.device
) -> RaceBatch:
    """One table whose every row is one run of ``chunks_per_run * chunk_size`` lookups, in random
    order over ``batch_size`` equal bags; gradients and weights are small random integers."""
    for name, v in (("rows", rows), ("chunks_per_run", chunks_per_run), ("chunk_size", chunk_size), ("dim", dim),
                    ("batch_size", batch_size)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"race_batch: {name} must be a positive int, got {v!r}")
    run_length = chunks_per_run * chunk_size
    if run_length > MAX_RUN_LENGTH:
        raise ValueError(f"race_batch: run length {run_length} exceeds {MAX_RUN_LENGTH} (sums stop being exact)")
    n = rows * run_length
    if n % batch_size:
        raise ValueError(f"race_batch: rows * run_length = {n} must be a multiple of batch_size = {batch_size}")
    if n >= 2**31:
        raise ValueError(f"race_batch: {n} lookups do not fit int32 offsets")
    g = torch.Generator(device="cpu").manual_seed(seed)
    ids = torch.arange(rows, dtype=torch.int32).repeat_interleave(run_length)
    ids = ids[torch.randperm(n, generator=g)].to(device)
    per_bag = n // batch_size
    offsets = torch.arange(0, n + 1, per_bag, dtype=torch.int32, device=device)
    grad = torch.randint(-2, 3, (batch_size, dim), generator=g).to(torch.float32).to(device)
    weights = torch.randint(-4, 5, (rows * dim,), generator=g).to(torch.float32).to(device)
    bags = torch.arange(n, device=device) // per_bag
    expected = (weights.view(rows, dim).to(torch.int64) - exact_row_sums(ids, bags, grad, rows)).to(torch.float32)
    return RaceBatch(rows, dim, batch_size, run_length, ids, offsets, grad, weights, expected)
