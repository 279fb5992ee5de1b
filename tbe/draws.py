"""Seeded draws whose large ones run where the values are needed, with the same values on every device.

A draw of at most ``SMALL`` values is torch's own on the CPU generator the caller passes, unchanged (and moved
to ``device``). A larger draw takes one value from that generator as a base and computes value ``i`` from a
64-bit hash of (base, i) (splitmix64's finalizer, in int64 arithmetic that wraps): a counter-based stream, so
it runs on the device that needs the values (no serial host generator, no copy), in any order and on any
thread count, and the CPU and a GPU give the same bits. Every float is built from the hash's integer bits by
exact integer operations and correctly rounded IEEE multiplications and casts (no transcendental function), so
those values match too. Written here rather than taken from a library: torch's generators are per device and
give different streams on each, and the rule this keeps (the values fixed by the spec's seed alone, wherever
it is materialized) is this project's.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch

SMALL = 1 << 20  # draws of at most this many values are torch's own; larger ones are counter-based
_GOLDEN, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_CPU_BLOCK = 1 << 22  # the CPU hashes in blocks of this many values, so its scratch stays small


def _signed(c: int) -> int:
    """The int64 holding the 64-bit pattern of ``c``."""
    c &= (1 << 64) - 1
    return c - (1 << 64) if c >= 1 << 63 else c


def device_or_cpu(device: Optional[torch.device | str]) -> torch.device:
    """``device`` as a torch.device, the CPU where it is None."""
    return torch.device(device if device is not None else "cpu")


def base_of(g: torch.Generator) -> int:
    """The one value a large draw takes from the caller's generator."""
    return int(torch.randint(0, 1 << 62, (1,), generator=g))


def _shift_xor(x: torch.Tensor, scratch: torch.Tensor, k: int) -> None:
    """x ^= x >>> k (a logical shift: the arithmetic one, then the sign's copies masked off)."""
    torch.bitwise_right_shift(x, k, out=scratch)
    scratch.bitwise_and_((1 << (64 - k)) - 1)
    x.bitwise_xor_(scratch)


def _hash_into(x: torch.Tensor, base: int, start: int) -> None:
    """x[i] = the hash of (base, start + i), for a contiguous int64 ``x``."""
    torch.arange(start + 1, start + 1 + x.numel(), dtype=torch.int64, device=x.device, out=x)
    x.mul_(_signed(_GOLDEN)).add_(_signed(base * _MIX2))
    scratch = torch.empty_like(x)
    _shift_xor(x, scratch, 30)
    x.mul_(_signed(_MIX1))
    _shift_xor(x, scratch, 27)
    x.mul_(_signed(_MIX2))
    _shift_xor(x, scratch, 31)


def _blocks(n: int, device: Optional[torch.device | str], dtype: torch.dtype, g: torch.Generator,
            convert: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """``n`` values of ``dtype``: ``convert`` of the hashed bits (base from ``g``), in blocks on the CPU so its
    temporaries stay small, in one piece on a device."""
    dev, base = device_or_cpu(device), base_of(g)
    out = torch.empty(n, dtype=dtype, device=dev)
    step = max(1, n if dev.type != "cpu" else _CPU_BLOCK)
    x = torch.empty(min(n, step), dtype=torch.int64, device=dev)
    for a in range(0, n, step):
        part = x[:min(step, n - a)]
        _hash_into(part, base, a)
        out[a:a + part.numel()] = convert(part)
    return out


def bits(base: int, n: int, device: Optional[torch.device | str] = None) -> torch.Tensor:
    """``n`` int64 values of 64 hashed bits each, value i from (``base``, i); equal on every device."""
    out = torch.empty(n, dtype=torch.int64, device=device_or_cpu(device))
    _hash_into(out, base, 0)
    return out


def _top(x: torch.Tensor, k: int) -> torch.Tensor:
    """The top ``k`` bits of each value, as a non-negative int64 (in place)."""
    return x.bitwise_right_shift_(64 - k).bitwise_and_((1 << k) - 1)


def uniform(n: int, g: torch.Generator, dtype: torch.dtype = torch.float32,
            device: Optional[torch.device | str] = None) -> torch.Tensor:
    """``n`` values in [0, 1): ``torch.rand(n, generator=g, dtype=dtype)`` up to ``SMALL``; past it the
    top 24 (float32 and narrower) or 53 (float64) hashed bits over 2^24 or 2^53, exactly."""
    if n <= SMALL:
        return torch.rand(n, generator=g, dtype=dtype).to(device_or_cpu(device))
    k = 53 if dtype == torch.float64 else 24
    work = torch.float64 if dtype == torch.float64 else torch.float32
    return _blocks(n, device, dtype, g, lambda x: _top(x, k).to(work).mul_(2.0 ** -k))


def integers(low: int, high: int, n: int, g: torch.Generator,
             device: Optional[torch.device | str] = None) -> torch.Tensor:
    """``n`` int64 values in [low, high): ``torch.randint`` up to ``SMALL``; past it 63 hashed bits modulo the
    span (a bias below span / 2^63)."""
    if n <= SMALL:
        return torch.randint(low, high, (n,), generator=g).to(device_or_cpu(device))
    return _blocks(n, device, torch.int64, g, lambda x: _top(x, 63).remainder_(high - low).add_(low))


def _centred_sum(x: torch.Tensor) -> torch.Tensor:
    """sqrt(3) times (the sum of the four 16-bit fields of x, each as (2k + 1) / 2^17, minus 2)."""
    total = torch.bitwise_and(x, 0xFFFF)
    for j in (1, 2, 3):
        total.add_(torch.bitwise_right_shift(x, 16 * j).bitwise_and_(0xFFFF))
    return total.mul_(2).add_(4 - (1 << 18)).to(torch.float64).mul_(math.sqrt(3.0) / (1 << 17))


def normal(n: int, g: torch.Generator, device: Optional[torch.device | str] = None) -> torch.Tensor:
    """``n`` float32 values of mean 0 and variance 1: ``torch.randn`` up to ``SMALL``; past it the sum of four
    uniforms (the hash's four 16-bit fields) centred and scaled by sqrt(3): symmetric, within +-2 sqrt(3),
    an exact integer times a float64 constant, then cast to float32, so every device gives the same values."""
    if n <= SMALL:
        return torch.randn(n, generator=g).to(device_or_cpu(device))
    return _blocks(n, device, torch.float32, g, _centred_sum)


def categorical(weights: torch.Tensor, n: int, g: torch.Generator,
                device: Optional[torch.device | str] = None) -> torch.Tensor:
    """``n`` indices into the float64 CPU ``weights``, each i with probability weights[i] / sum:
    ``torch.multinomial(..., replacement=True)`` up to ``SMALL``; past it the inverse of the cumulative sum
    (summed on the CPU, then searched by exact comparisons) at 53-bit uniforms."""
    if n <= SMALL:
        return torch.multinomial(weights, n, replacement=True, generator=g).to(device_or_cpu(device))
    dev = device_or_cpu(device)
    cdf = torch.cumsum(weights, 0).to(dev)
    u = uniform(n, g, torch.float64, dev).mul_(float(cdf[-1]))
    return torch.searchsorted(cdf, u, right=True).clamp_(max=weights.numel() - 1)


def permutation(n: int, g: torch.Generator, device: Optional[torch.device | str] = None) -> torch.Tensor:
    """A random permutation of range(n): ``torch.randperm`` up to ``SMALL``; past it the order of ``n`` hashed
    keys (a stable sort, so equal keys keep their order on every device)."""
    if n <= SMALL:
        return torch.randperm(n, generator=g).to(device_or_cpu(device))
    return torch.sort(bits(base_of(g), n, device), stable=True).indices
