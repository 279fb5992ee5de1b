"""Scratch buffers a module keeps from one step to the next: a backward takes the one it needs by name, and only a
larger need allocates again (zeroed), so a step's workspace is the memory the previous step's kernels used."""

from __future__ import annotations

import math

import torch


class Workspaces:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._buffers: dict[str, torch.Tensor] = {}

    def take(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A ``shape`` view of buffer ``name`` (its contents are whatever the last user left)."""
        n = math.prod(shape)
        buf = self._buffers.get(name)
        if buf is None or buf.numel() < n or buf.dtype != dtype:
            buf = self._buffers[name] = torch.zeros(n, dtype=dtype, device=self.device)
        return buf[:n].view(shape)
