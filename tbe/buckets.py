"""Dimension buckets: each launch uses BLOCK_D = the smallest configured bucket >= next_pow2(D)."""

from __future__ import annotations

import functools
from typing import Optional

import torch

from tbe.config import KernelConfig


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def block_for_dim(dim: int, config: KernelConfig) -> int:
    """BLOCK_D for a table of width ``dim``; rows wider than the largest bucket loop over columns."""
    return _block(dim, config.dim_buckets)


def _block(dim: int, dim_buckets: tuple[int, ...]) -> int:
    p = next_pow2(dim)
    for b in dim_buckets:
        if b >= p:
            return b
    return dim_buckets[-1]


def bucket_tables(dims: list[int], config: KernelConfig, tables: Optional[list[int]] = None) -> dict[int, list[int]]:
    """BLOCK_D -> ids of ``tables`` (default: all) in that bucket, in table order."""
    out: dict[int, list[int]] = {}
    for t in range(len(dims)) if tables is None else tables:
        out.setdefault(block_for_dim(dims[t], config), []).append(t)
    return out


def several_buckets(layout, config: KernelConfig) -> bool:
    """Whether the backward launches more than one bucket: only then do runs carry their bucket (``Transposed``'s
    ``run_bucket``) and the tiers search for their own."""
    return _several(tuple(layout.feature_dims), config.dim_buckets)


@functools.lru_cache(maxsize=256)
def _several(dims: tuple[int, ...], dim_buckets: tuple[int, ...]) -> bool:
    return len({_block(d, dim_buckets) for d in dims}) > 1


def device_layout(layout, config: KernelConfig, device: torch.device) -> dict[str, torch.Tensor]:
    """``layout.device_tensors``, ``bucket_of_table`` (the backward's dimension bucket of every feature's table)
    and ``sort_base`` (``bucket_sort_base``): what the transpose and the backward read, built once per module (a
    copy per backward would sync)."""
    bucket_of = [0] * layout.num_features
    for k, (_, tables) in enumerate(sorted(bucket_tables(layout.feature_dims, config).items())):
        for t in tables:
            bucket_of[t] = k
    i64 = dict(dtype=torch.int64, device=device)
    return {**layout.device_tensors(device), "bucket_of_table": torch.tensor(bucket_of, **i64),
            "sort_base": torch.tensor(bucket_sort_base(layout, bucket_of), **i64)}


def bucket_sort_base(layout, bucket_of: list[int]) -> list[int]:
    """Per feature, then the total rows: the base of its table's sort keys (key = base + id) when the tables are
    laid out bucket by bucket, in table order within one. Sorted by these keys, the runs of one bucket are
    contiguous, so a bucket's backward launch visits its own runs alone; with the buckets already in table order
    the bases are ``hash_size_cumsum``'s. Features of one table share its base (one run per row)."""
    ft = layout.feature_tables
    bucket_of_table = {t: bucket_of[f] for f, t in enumerate(ft)}
    base, acc = {}, 0
    for t in sorted(bucket_of_table, key=lambda t: (bucket_of_table[t], t)):
        base[t] = acc
        acc += layout.specs[t].rows
    return [base[t] for t in ft] + [acc]


_TENSORS: dict[tuple, list[tuple[int, torch.Tensor]]] = {}


def bucket_tensors(
    dims: list[int], config: KernelConfig, device: torch.device, tables: Optional[list[int]] = None
) -> list[tuple[int, torch.Tensor]]:
    """(BLOCK_D, table-id tensor on ``device``) per bucket, smallest block first.

    Built once per (dims, buckets, device, tables): a host-to-device copy on every forward
    would cost a transfer and a synchronization on the hot path. The key holds the one config field the
    bucketing reads, not the config (hashing every field costs the host more than the rest of a launch).
    """
    key = (tuple(dims), config.dim_buckets, device, None if tables is None else tuple(tables))
    if key not in _TENSORS:
        _TENSORS[key] = [
            (block, torch.tensor(ids, dtype=torch.int64, device=device))
            for block, ids in sorted(bucket_tables(dims, config, tables).items())
        ]
    return _TENSORS[key]
