"""The backward's routing rule (tbe.routing) and the tier labels built on it agree with what the kernels launch."""

from __future__ import annotations

import json

import torch

from fuzz.compile.launches import recording
from fuzz.judge.check import tiers_of
from cases import CaseSpec, HotRow, tensors
from strategies.tiers import tier_report
from tbe import KernelConfig, TritonTBE
from tbe.routing import Path, route

# one hot row read 12 times (plus a few other lookups): a long run of 3 chunks under this config
SPEC = CaseSpec(tables=((30, 4),), batch_size=2, max_length=2, hot_rows=(HotRow(0, 3, 12),), seed=1)
LONG = dict(long_run_threshold=8, chunk_size=4, fused_long_tier=True)


def _fused_launched(config: KernelConfig) -> bool:
    """Whether one training step of SPEC under ``config`` launches the long tier's fused chunk kernel."""
    t = tensors(SPEC)
    m = TritonTBE(list(SPEC.tables), config=config)
    with recording(execute=False) as launches:
        out = m(t.indices, t.offsets, None)
        out.backward(torch.ones(SPEC.batch_size, sum(d for _, d in SPEC.tables)))
    fused = {json.loads(dict(x.constexprs)["FUSED"]) for x in launches if x.name == "_chunk_kernel"}
    assert fused, [x.name for x in launches]
    return True in fused


def test_fused_long_min_lookups_gates_the_fused_label():
    """Below fused_long_min_lookups the long runs take grad-accum + apply, and the label says so."""
    n = tensors(SPEC).indices.numel()
    assert n >= 12
    for min_lookups, fused in ((0, True), (n, True), (n + 1, False), (10**6, False)):
        cfg = KernelConfig(**LONG, fused_long_min_lookups=min_lookups)
        tiers = tiers_of(SPEC, tensors(SPEC), cfg)[0]
        assert ("bwd:long_fused" in tiers) == fused, (min_lookups, tiers)
        assert ("bwd:long" in tiers) == (not fused), (min_lookups, tiers)
        assert "bwd:multi_chunk" in tiers
        assert _fused_launched(cfg) == fused, min_lookups


def test_route_splits_at_the_threshold_and_counts_chunks_of_long_runs_only():
    cfg = KernelConfig(long_run_threshold=8, chunk_size=4)
    r = route(torch.tensor([1, 6, 7]), 14, cfg)  # 6 and 7 exceed a chunk but are short runs
    assert (r.short, r.long, r.fused, r.multi_chunk) == (True, False, False, False)
    r = route(torch.tensor([8, 9], dtype=torch.int32), 17, cfg.replace(chunk_size=8, fused_long_tier=True))
    assert (r.short, r.long, r.fused, r.multi_chunk) == (False, True, True, True)
    r = route(torch.zeros(0, dtype=torch.int64), 0, cfg.replace(fused_long_tier=True))
    assert (r.short, r.long, r.fused, r.multi_chunk) == (False, False, False, False)


def test_strategies_tier_report_uses_the_same_gate():
    gated = KernelConfig(**LONG, fused_long_min_lookups=13)
    assert tier_report(torch.tensor([12]), 12, gated).tiers == {Path.BWD_LONG}
    assert tier_report(torch.tensor([12]), 13, gated).tiers == {Path.BWD_FUSED}
