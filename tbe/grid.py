"""Launch grids, computed on the host: ceiling division and persistent grids sized to the device's SMs.

``cdiv`` is plain integer arithmetic rather than ``triton.cdiv``: that one is a constexpr function whose host call
costs microseconds, and every launch computes its grid.
"""

from __future__ import annotations

import functools

import torch


def cdiv(a: int, b: int) -> int:
    """Ceiling of a / b for non-negative a and positive b."""
    return -(-a // b)


@functools.lru_cache(maxsize=None)
def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors persistent grids are sized from (2 under the interpreter,
    where programs run one after another anyway); asked once per device, since asking costs host time on every
    launch."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 2


def persistent_grid(multiplier: int, upper: int, device: torch.device) -> int:
    """multiplier x SMs programs, never more than the host-known upper bound of work items."""
    return max(1, min(multiplier * num_sms(device), upper))
