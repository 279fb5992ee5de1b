"""Faults that live only in runs of more than 4,096 chunks: caught in both long tiers.

On CPU the config is scaled down to chunk_size 1 (4,097 lookups make 4,097 chunks) and
the data are exact-value, so a lost chunk of one lookup is a mismatch; on a GPU the
shipped config runs a run of 1,048,577 lookups. Each fault is caught in each tier, and
the same case passes without it.
"""

from __future__ import annotations

import time

import pytest

from fuzz.selftest import large_runs
from fuzz.selftest import Context, detectors_for
from fuzz.budgets import Budget
from tbe import KernelConfig, faults
from tbe.backward_long import FAULT_CHUNK_LIMIT

CHUNK = large_runs.chunk_size()


def test_the_faults_are_defined_by_the_chunk_limit():
    assert FAULT_CHUNK_LIMIT == 4096 and KernelConfig().chunk_size * FAULT_CHUNK_LIMIT == 2 ** 20
    assert "4,096 x chunk_size" in faults.KNOWN["zero_update_past_2p20"]
    assert "4,096 chunks" in faults.KNOWN["drop_chunk_past_4096"]
    for fault in large_runs.FAULTS:
        assert "large_run" in [d.name for d in detectors_for(fault)]
    spec = large_runs.large_run_spec(CHUNK)
    assert max(h.count for h in spec.hot_rows) == FAULT_CHUNK_LIMIT * CHUNK + 1 and spec.values == "dyadic"


@pytest.mark.fuzz
@pytest.mark.parametrize("tier", ["two-kernel", "fused"])
def test_large_run_faults_are_caught_in_each_tier(tier):
    clean = large_runs.check_tier(None, tier, CHUNK)
    assert clean == [], clean
    for fault in large_runs.FAULTS:
        t0 = time.perf_counter()
        bad = large_runs.check_tier(fault, tier, CHUNK)
        assert bad and "weights after update" in bad[0], (fault, bad)
        print(f"\n{fault} in the {tier} tier: caught in {time.perf_counter() - t0:.1f}s")


@pytest.mark.gpu
def test_gpu_selftest_detector_at_a_million():
    """The self-test's detector at the shipped chunk size: a run of 1,048,577 lookups."""
    assert CHUNK == KernelConfig().chunk_size
    ctx = Context(Budget("gpu", 10.0, 10.0, 10, 2_000_000))
    with faults.allow():
        for fault in large_runs.FAULTS:
            d = next(x for x in detectors_for(fault) if x.name == "large_run").run(fault, ctx)
            print(f"\n{fault}: {d.status} in {d.seconds:.1f}s ({d.detail})")
            assert d.status == "caught" and "two-kernel tier: caught" in d.detail and "fused tier: caught" in d.detail


def test_a_gpu_sized_campaign_reaches_past_4096_chunks():
    """The quick GPU budget (1.2M lookups) can draw a run of 4,097 chunks of the shipped size with
    exact-value data; drawing specs only, no kernels."""
    from hypothesis import HealthCheck, Phase, given, settings

    from cases import split_draw
    from strategies.space import campaign_cases
    from cases import CaseKind

    limit = FAULT_CHUNK_LIMIT * KernelConfig().chunk_size
    found, drawn = [], [0]

    @settings(max_examples=5000, phases=[Phase.generate], database=None, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(campaign_cases(KernelConfig(), 1_200_000))
    def draw(d):
        drawn[0] += 1
        case, cfg, _ = split_draw(d, KernelConfig())  # the shipped chunk size, not a drawn smaller one
        if cfg.chunk_size == KernelConfig().chunk_size and case.kind is CaseKind.SPEC and case.values == "dyadic" \
                and any(h.count > limit for h in case.hot_rows):
            assert case.expected_lookups() <= 1_200_000
            found.append(case)
            raise StopIteration

    with pytest.raises(StopIteration):
        draw()
    assert max(h.count for h in found[0].hot_rows) == limit + 1
    print(f"\na run of {limit + 1:,} lookups with exact-value data after {drawn[0]} drawn cases")
