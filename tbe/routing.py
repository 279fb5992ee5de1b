"""The kernel paths of this TBE, and the backward's routing rule: which tier a run goes to.

One source for both. ``Path`` names every path (its value is how a checked case lists it among its tiers;
``label`` is how the coverage matrix shows it). ``tbe.backward`` asks ``fused_long`` which long tier to launch
(the device-side split by ``long_run_threshold`` lives in ``tbe.classify``'s kernel, which
reads the same field); strategies and checks call ``route`` and ``backward_paths`` to name the tiers a batch
takes without running a kernel.
"""

from __future__ import annotations

import dataclasses
import enum

import torch

from tbe.config import KernelConfig


class Path(enum.Enum):
    """A kernel path of this TBE; the value is its tier name (``CaseResult.tiers``)."""

    __hash__ = object.__hash__  # members are singletons; Enum's own hash is slow in the coverage matrix's loops
    FWD_GENERIC = "fwd:generic"
    FWD_SMALL_TABLE = "fwd:small_table"
    BOUNDS_FUSED = "bounds:fused"
    BOUNDS_STANDALONE = "bounds:standalone"
    BWD_SHORT = "bwd:short"
    BWD_LONG = "bwd:long"              # long runs: partial sums in a workspace, then an apply kernel
    BWD_FUSED = "bwd:long_fused"       # long runs: the last chunk applies the update
    PSW_GRAD = "bwd:psw_grad"          # the per-sample-weight gradient

    @property
    def label(self) -> str:
        """How the coverage matrix names it."""
        return _LABELS[self]


_LABELS = {
    Path.FWD_GENERIC: "forward, generic", Path.FWD_SMALL_TABLE: "forward, small-table",
    Path.BOUNDS_FUSED: "bounds check, fused", Path.BOUNDS_STANDALONE: "bounds check, standalone",
    Path.BWD_SHORT: "backward, short tier", Path.BWD_LONG: "backward, long tier (two kernels)",
    Path.BWD_FUSED: "backward, long tier (fused)", Path.PSW_GRAD: "per-sample-weight gradient",
}
MULTI_CHUNK = "bwd:multi_chunk"  # not a path: the tier name of a batch with a long run over several chunks


def bounds_path(config: KernelConfig) -> Path:
    """The bounds check a batch with bad input takes under ``config``."""
    return Path.BOUNDS_FUSED if config.fused_bounds_check else Path.BOUNDS_STANDALONE


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


def backward_paths(routing: Routing) -> set[Path]:
    """The backward tiers ``routing`` launches."""
    return ({Path.BWD_SHORT} if routing.short else set()) | (
        {Path.BWD_FUSED if routing.fused else Path.BWD_LONG} if routing.long else set())


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
