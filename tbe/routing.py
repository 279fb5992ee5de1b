"""The kernel paths of this TBE, the backward's routing rule (which tier a run goes to), and its edges.

One source for all three. ``Path`` names every path (its value is how a checked case lists it among its tiers;
``label`` is how the coverage matrix shows it). ``tbe.backward`` asks ``fused_long`` which long tier to launch
(the device-side split by ``long_run_threshold`` lives in ``tbe.classify``'s kernel, which
reads the same field); strategies and checks call ``route`` and ``backward_paths`` to name the tiers a batch
takes without running a kernel, and after a counting forward ``counts_backward`` says the step counts too.
``segment_edges`` lists the segment lengths where a kernel's handling of a run changes (strategies draw them,
coverage witnesses them), ``long_edges`` names the ones a batch's long runs meet,
and ``step_edge`` the bag length where the small-table forward's counting steps turn over.
"""

from __future__ import annotations

import dataclasses
import enum
import math

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
    BWD_SMALL_TABLE = "bwd:small_table"  # one small table whose forward counted: counts^T @ d_out, no transpose
    PSW_GRAD = "bwd:psw_grad"          # the per-sample-weight gradient

    @property
    def label(self) -> str:
        """How the coverage matrix names it."""
        return _LABELS[self]


_LABELS = {
    Path.FWD_GENERIC: "forward, generic", Path.FWD_SMALL_TABLE: "forward, small-table",
    Path.BOUNDS_FUSED: "bounds check, fused", Path.BOUNDS_STANDALONE: "bounds check, standalone",
    Path.BWD_SHORT: "backward, short tier", Path.BWD_LONG: "backward, long tier (two kernels)",
    Path.BWD_FUSED: "backward, long tier (fused)", Path.BWD_SMALL_TABLE: "backward, small-table",
    Path.PSW_GRAD: "per-sample-weight gradient",
}
MULTI_CHUNK = "bwd:multi_chunk"  # not a path: the tier name of a batch with a long run over several chunks


def bounds_path(config: KernelConfig) -> Path:
    """The bounds check a batch with bad input takes under ``config``."""
    return Path.BOUNDS_FUSED if config.fused_bounds_check else Path.BOUNDS_STANDALONE


def fused_long(num_lookups: int, config: KernelConfig) -> bool:
    """Long runs take the fused tier (the last chunk applies the update) rather than grad-accum + apply."""
    return config.fused_long_tier and num_lookups >= config.fused_long_min_lookups


def counts_backward(forward: Path, config: KernelConfig) -> bool:
    """The backward of a step whose forward took ``forward`` is the small-table one (no transpose, no tiers)."""
    return forward is Path.FWD_SMALL_TABLE and config.small_table_backward


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
    small_table: bool = False  # the small-table backward runs instead of the tiers (``counts_backward``)


def backward_paths(routing: Routing) -> set[Path]:
    """The backward paths ``routing`` launches."""
    if routing.small_table:
        return {Path.BWD_SMALL_TABLE}
    return ({Path.BWD_SHORT} if routing.short else set()) | (
        {Path.BWD_FUSED if routing.fused else Path.BWD_LONG} if routing.long else set())


def route(segment_lengths: torch.Tensor, num_lookups: int, config: KernelConfig,
          forward: Path = Path.FWD_GENERIC) -> Routing:
    """The routing of one batch whose runs have lengths ``segment_lengths`` ([runs], any integer dtype),
    which has ``num_lookups`` lookups in all and whose forward took ``forward``."""
    if counts_backward(forward, config):
        return Routing(short=False, long=False, fused=False, multi_chunk=False, small_table=True)
    sl = segment_lengths.to(torch.int64).reshape(-1)
    is_long = long_runs(sl, config)
    has_long = bool(is_long.any())
    return Routing(
        short=bool((~is_long).any()),
        long=has_long,
        fused=has_long and fused_long(num_lookups, config),
        multi_chunk=bool((sl[is_long] > config.chunk_size).any()),
    )


# ----------------------------------------------------------------------------- edges
COUNTER_CHUNKS = 4096  # chunks a 12-bit counter holds: a run past it (2^20 lookups at chunk size 256) is an edge
FIXED_SEGMENT_EDGES = (1, 3, 4, 31, 32, 33)  # no config field names them: one lookup, a 4-wide gather, a 32-lane warp


class LongEdge(enum.StrEnum):
    """An edge within the long tiers that a batch's long runs meet; the value is its coverage name."""

    EXACT_THRESHOLD = "exact_threshold"          # a run of exactly long_run_threshold lookups
    SINGLE_CHUNK = "single_chunk"                # a long run within one chunk
    MULTI_CHUNK = "multi_chunk"                  # a long run over several chunks
    PARTIAL_LAST_CHUNK = "partial_last_chunk"    # a long run whose last chunk is not full
    PAST_COUNTER = "past_4096_chunks"            # a long run past COUNTER_CHUNKS chunks


def past_counter_length(config: KernelConfig) -> int:
    """The shortest run past ``COUNTER_CHUNKS`` chunks of ``config``'s size: 2^20 + 1 lookups by default."""
    return COUNTER_CHUNKS * config.chunk_size + 1


def long_edges(segment_lengths: torch.Tensor, config: KernelConfig) -> frozenset[LongEdge]:
    """The long-tier edges runs of lengths ``segment_lengths`` meet under ``config``."""
    sl = segment_lengths.to(torch.int64).reshape(-1)
    lsl, ch = sl[long_runs(sl, config)], config.chunk_size
    hits = {
        LongEdge.EXACT_THRESHOLD: (lsl == config.long_run_threshold).any(),
        LongEdge.SINGLE_CHUNK: (lsl <= ch).any(),
        LongEdge.MULTI_CHUNK: (lsl > ch).any(),
        LongEdge.PARTIAL_LAST_CHUNK: (lsl % ch != 0).any(),
        LongEdge.PAST_COUNTER: (lsl >= past_counter_length(config)).any(),
    }
    return frozenset(e for e, hit in hits.items() if bool(hit))


def chunk_count_edges(config: KernelConfig, limit: int | None = None) -> tuple[int, ...]:
    """Runs of a power-of-two number of chunks, exactly full and one lookup into the next chunk (1, 2, 4, ...,
    ``COUNTER_CHUNKS`` chunks, then one past it: a counter or limit in chunks breaks at such a count)."""
    ch = config.chunk_size
    values = {2 ** j * ch + d for j in range(COUNTER_CHUNKS.bit_length()) for d in (0, 1)}
    return tuple(sorted(v for v in values if v >= 1 and (limit is None or v <= limit)))


def routing_edges(config: KernelConfig) -> tuple[int, ...]:
    """The segment lengths that a moved ``long_run_threshold`` or ``chunk_size`` moves: each of them +-1, and one
    lookup past two chunks."""
    th, ch = config.long_run_threshold, config.chunk_size
    return tuple(sorted(v for v in {th - 1, th, th + 1, ch - 1, ch, ch + 1, 2 * ch + 1} if v >= 1))


def segment_edges(config: KernelConfig, limit: int | None = None) -> tuple[int, ...]:
    """The segment lengths where ``config``'s kernels change how they handle a run, at most ``limit``: the fixed
    ones, the routing edges, each gather width +-1, the first chunk multiples +-1 (and those of the
    shortest long run), and the power-of-two chunk counts."""
    th, ch = config.long_run_threshold, config.chunk_size
    values = set(FIXED_SEGMENT_EDGES) | set(chunk_count_edges(config)) | set(routing_edges(config))
    for x in (config.bwd_short_gather_unweighted, config.bwd_short_gather_weighted, config.bwd_long_gather):
        values |= {x - 1, x, x + 1}
    first_long_chunks = max(1, math.ceil(th / ch))  # chunk count of the shortest long run
    for k in {1, 2, 3, first_long_chunks, first_long_chunks + 1}:
        values |= {k * ch - 1, k * ch, k * ch + 1}
    return tuple(sorted(v for v in values if v >= 1 and (limit is None or v <= limit)))


# the small-table forward counts each bag's ids a step at a time and hands its counts to tl.dot every FLUSH ids:
# a count up to 2,048 is exact in fp16 (a multiple of every step, since steps are powers of two)
FLUSH = 2048


def counting_step(config: KernelConfig) -> int:
    """Ids of each bag one step of the small-table forward counts (a divisor of ``FLUSH``)."""
    return min(config.small_table_histogram_ids, FLUSH)


def step_edge(config: KernelConfig) -> int:
    """The shortest bag length on the small-table path (``small_table_min_pooling``, at least 1) rounded up to
    whole counting steps: one more id takes a step with a single live lane, the edge a campaign aims at."""
    step = counting_step(config)
    return -(-max(1, config.small_table_min_pooling) // step) * step
