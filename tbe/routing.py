"""The backward's routing rule: which tier a run goes to, from segment lengths and a KernelConfig.

One source for the rule. ``tbe.backward`` asks ``fused_long`` which long tier to launch
(the device-side split by ``long_run_threshold`` lives in ``tbe.classify``'s kernel, which
reads the same field); strategies and checks call ``route`` to name the tiers a batch takes
without running a kernel.
"""

from __future__ import annotations

import dataclasses

import torch

from tbe.config import KernelConfig


def fused_long(num_lookups: int, config: KernelConfig) -> bool:
    """Long runs take the fused tier (the last chunk applies the update) rather than grad-accum + apply."""
    return config.fused_long_tier and num_lookups >= config.fused_long_min_lookups


def long_runs(segment_lengths: torch.Tensor, config: KernelConfig) -> torch.Tensor:
    """Which runs go to a long tier (the mask ``tbe.classify``'s kernel computes on the device)."""
    return segment_lengths.to(torch.int64).reshape(-1) >= config.long_run_threshold


@dataclasses.dataclass(frozen=True)
class Routing:
    """The tiers one backward step takes and the long-run edges it meets."""

    short: bool        # some run has SL < long_run_threshold
    long: bool         # some run has SL >= long_run_threshold
    fused: bool        # the long runs (if any) go to the fused tier
    multi_chunk: bool  # some long run spans more than one chunk


def route(segment_lengths: torch.Tensor, num_lookups: int, config: KernelConfig) -> Routing:
    """The routing of one batch whose runs have lengths ``segment_lengths`` ([runs], any integer dtype)
    and which has ``num_lookups`` lookups in all."""
    sl = segment_lengths.to(torch.int64).reshape(-1)
    is_long = long_runs(sl, config)
    has_long = bool(is_long.any())
    return Routing(
        short=bool((~is_long).any()),
        long=has_long,
        fused=has_long and fused_long(num_lookups, config),
        multi_chunk=bool((sl[is_long] > config.chunk_size).any()),
    )
