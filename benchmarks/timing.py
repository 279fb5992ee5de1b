"""CUDA-event timing: median of repeated runs after warm-up."""

from __future__ import annotations

import statistics
from typing import Callable

import torch


def time_ms(fn: Callable[[], object], warmup: int = 3, repeat: int = 20, setup: Callable[[], object] | None = None) -> float:
    """Median milliseconds of ``fn`` (``setup`` runs untimed before each call)."""
    for _ in range(warmup):
        if setup:
            setup()
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        if setup:
            setup()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth_GBps(device: torch.device, nbytes: int = 1 << 31) -> float:
    """Device-to-device copy rate, bytes read plus bytes written per second (the roofline's memory ceiling)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), warmup=3, repeat=20)
    del src, dst
    return 2 * nbytes / ms / 1e6
