"""Backend selection: compiled Triton on CUDA, the Triton interpreter otherwise.

Triton decides at decoration time whether a kernel is interpreted, so this module
must run before any kernel module is imported; ``tbe/__init__`` imports it first.
"""

from __future__ import annotations

import os

import torch

HAS_CUDA = torch.cuda.is_available()

if not HAS_CUDA and os.environ.get("TRITON_INTERPRET") is None:
    os.environ["TRITON_INTERPRET"] = "1"

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

if INTERPRETED:
    from tbe.interpreter import skip_nested_patching

    skip_nested_patching()


def default_device() -> torch.device:
    """The device kernels run on: the current CUDA device, or the CPU under the interpreter."""
    return torch.device("cuda") if HAS_CUDA and not INTERPRETED else torch.device("cpu")


def check_device(name: str, tensor: torch.Tensor, device: torch.device) -> None:
    """Raise ValueError when ``tensor`` is not on ``device`` (kernels never copy across devices)."""
    if tensor.device.type != device.type or (
        device.index is not None and tensor.device.index not in (None, device.index)
    ):
        raise ValueError(f"{name} is on {tensor.device}, expected {device}")
