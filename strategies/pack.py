"""Packs drawn: several sub-case draws assembled into one ``cases.PackCase`` (``cases.pack.assemble``)."""

from __future__ import annotations

from hypothesis import strategies as st

from cases import assemble

def packs(sub: st.SearchStrategy[CaseSpec], max_subs: int, max_lookups: int) -> st.SearchStrategy:
    """One to ``max_subs`` draws of ``sub`` as one pack (``assemble``); shrinking deletes sub-cases first,
    down to a plain CaseSpec. The size is drawn first, since a list's own length averages a handful and packs
    pay off when full: about half the draws take ``max_subs``, the rest a size from one to ``max_subs``
    (shrinking goes to that branch, then to one). Full packs check more sub-cases a second for the
    per-example costs (a step, a round trip, a pass of the references) that every pack pays once."""
    if max_subs <= 1:
        return sub
    of_size = [st.lists(sub, min_size=n, max_size=n) for n in range(max_subs + 1)]  # built once, not per draw
    size = st.one_of(st.integers(1, max_subs), st.just(max_subs))
    return size.flatmap(of_size.__getitem__).map(lambda subs: assemble(subs, max_lookups))
