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
