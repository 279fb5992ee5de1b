"""Segment-length profiles: how many times each hot row is read, i.e. the SL of its run.

Bug class: the backward routes every run by its SL (short below ``long_run_threshold``,
long at or above it, split into ``chunk_size`` chunks, the fused tier counting chunks
down), so routing off by one, a dropped or double-applied last/partial chunk, a wrong
chunk count, or accumulation error that grows with SL show only at particular SLs or in
very long runs. Edges derive from the KernelConfig, so a moved threshold moves the probes.
"""

from __future__ import annotations

from hypothesis import strategies as st

from tbe import KernelConfig
from tbe.routing import segment_edges

PROFILES = ("edges", "log_uniform", "zipf", "hot", "none")
_DRAWN = ("edges", "edges", "log_uniform", "zipf", "hot", "none")  # edges twice: the likeliest bugs


def _log_uniform(draw: st.DrawFn, lo: int, hi: int) -> int:
    """An int in [lo, hi], log-uniform, shrinking toward ``lo``."""
    if hi <= lo:
        return max(lo, hi)
    u = draw(st.integers(0, 256)) / 256
    return max(lo, min(hi, int(round(lo * (hi / lo) ** u))))


@st.composite
def segment_lengths(
    draw: st.DrawFn, config: KernelConfig, budget: int, profile: str | None = None,
) -> tuple[int, ...]:
    """SLs of distinct hot rows, summing to at most ``budget`` lookups.

    - ``edges``: 1-4 exact edges of ``config`` (off-by-one routing, chunk boundaries);
    - ``log_uniform``: up to 6 SLs spread over every order of magnitude;
    - ``zipf``: a head row and a power-law tail (many tiers in one batch, skewed work);
    - ``hot``: one run from the threshold up to the whole budget (millions on a GPU);
    - ``none``: no hot rows (background ids only).
    """
    kind = draw(st.sampled_from(_DRAWN)) if profile is None else profile
    if kind not in PROFILES:
        raise ValueError(f"unknown segment profile {kind!r} (known: {PROFILES})")
    out: list[int] = []
    left = budget
    if budget < 1 or kind == "none":
        return ()
    if kind == "edges":
        # the routing edges of this config first (shrinking ends on the threshold), then the rest
        th, ch = config.long_run_threshold, config.chunk_size
        first = [th, th - 1, th + 1, ch + 1, 2 * ch, 2 * ch + 1]
        ordered = list(dict.fromkeys([e for e in first if e >= 1] + list(segment_edges(config))))
        for _ in range(draw(st.integers(1, 4))):
            fit = [e for e in ordered if e <= left]
            if not fit:
                break
            out.append(draw(st.sampled_from(fit)))
            left -= out[-1]
    elif kind == "log_uniform":
        for _ in range(draw(st.integers(1, 6))):
            if left < 1:
                break
            out.append(_log_uniform(draw, 1, left))
            left -= out[-1]
    elif kind == "zipf":
        top = _log_uniform(draw, 2, max(2, budget // 2))
        s = draw(st.sampled_from([1.0, 0.7, 1.5, 2.0]))
        for r in range(1, draw(st.integers(2, 12)) + 1):
            sl = max(1, int(top / r ** s))
            if sl > left:
                break
            out.append(sl)
            left -= sl
    else:  # hot
        lo = min(config.long_run_threshold, budget)
        out.append(_log_uniform(draw, lo, budget))
    return tuple(out)
