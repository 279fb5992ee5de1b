"""CUDA-event timing (median of repeated runs after warm-up) and device time per kernel (torch.profiler)."""

from __future__ import annotations

import collections
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


def kernel_profile(fn: Callable[[], object], iters: int) -> dict[str, tuple[float, float]]:
    """Per kernel ``fn`` launches: (device milliseconds per call, launches per call), over ``iters`` calls after one
    untimed call."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    ms: dict[str, float] = collections.defaultdict(float)
    launches: dict[str, int] = collections.defaultdict(int)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            ms[ev.name] += ev.device_time / 1000.0 / iters
            launches[ev.name] += 1
    return {name: (ms[name], launches[name] / iters) for name in ms}


def copy_bandwidth_GBps(device: torch.device, nbytes: int = 1 << 31) -> float:
    """Device-to-device copy rate, bytes read plus bytes written per second (the roofline's memory ceiling)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), warmup=3, repeat=20)
    del src, dst
    return 2 * nbytes / ms / 1e6
