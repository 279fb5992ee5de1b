"""The weak-memory interpreter mode (fuzz.memcheck.weak_memory): its rules on small kernels of their own,
and its power on the fused long tier (no_fence caught on CPU, the clean tier never flagged)."""

import contextlib
import time

import pytest
import torch
import triton
import triton.language as tl
from hypothesis import HealthCheck, Phase, given, settings

from fuzz.memcheck.weak_memory import WEAK_MEMORY, WEAK_MEMORY_SEED
from fuzz.memcheck import weak_memory as wm
from fuzz.profiles import examples
from fuzz.selftest.race_detectors import lost_sums
from strategies.adversarial import fuzz_cases
from tbe.backend import INTERPRETED
from tests.fuzz_properties import check_fuzz_case
from tests.strategies.test_strategies import DEFAULT_CASES

pytestmark = pytest.mark.skipif(not INTERPRETED, reason="the weak-memory mode runs in Triton's interpreter only")

FUSED_CONFIGS = ("small_fused", "one_chunk", "hoisted")


@contextlib.contextmanager
def mode(seed: int = 0):
    """The mode for one block (the session's own when TBE_WEAK_MEMORY=1 already switched it on)."""
    if wm.active() is not None:
        yield wm.active()
    else:
        with wm.weak_memory(seed=seed) as mem:
            yield mem


@triton.jit
def _handoff_kernel(data_ptr, count_ptr, out_ptr, RELEASE: tl.constexpr):
    tl.atomic_add(data_ptr, 1.0, sem="relaxed")
    if RELEASE:
        left = tl.atomic_add(count_ptr, -1, sem="acq_rel")
    else:
        left = tl.atomic_add(count_ptr, -1, sem="relaxed")
    if left == 1:
        tl.store(out_ptr, tl.load(data_ptr))


@triton.jit
def _ticket_kernel(counter_ptr, out_ptr):
    t = tl.atomic_add(counter_ptr, 1, sem="relaxed")
    tl.store(out_ptr + tl.program_id(0), t)


@triton.jit
def _store_then_read_kernel(buf_ptr, seen_ptr):
    p = tl.program_id(0)
    tl.store(buf_ptr + p, p + 100)
    own = tl.load(buf_ptr + p)                         # a program sees its own write
    prev = tl.load(buf_ptr + tl.maximum(p - 1, 0))     # another program's write: maybe not yet
    tl.store(seen_ptr + 2 * p, own)
    tl.store(seen_ptr + 2 * p + 1, prev)


def handoff(release: bool, n: int = 16) -> float:
    data, count, out = torch.zeros(1), torch.full((1,), n, dtype=torch.int32), torch.zeros(1)
    _handoff_kernel[(n,)](data, count, out, RELEASE=release)
    assert data.item() == n  # the end of the kernel publishes everything
    return out.item()


def test_release_publishes_and_relaxed_does_not():
    assert handoff(True) == 16 and handoff(False) == 16  # plain interpreter: programs in order, nothing lost
    with mode() as mem:
        assert handoff(True) == 16
        assert handoff(False) < 16
        assert mem.stats.buffered > 0 and mem.stats.released > 0


def test_an_atomic_whose_result_is_used_takes_effect_at_once():
    with mode():
        counter, out = torch.zeros(1, dtype=torch.int32), torch.full((32,), -1, dtype=torch.int32)
        _ticket_kernel[(32,)](counter, out)
    assert sorted(out.tolist()) == list(range(32)) and counter.item() == 32


def test_plain_stores_are_delayed_but_a_program_sees_its_own():
    with mode() as mem:
        buf, seen = torch.zeros(8, dtype=torch.int32), torch.zeros(16, dtype=torch.int32)
        _store_then_read_kernel[(8,)](buf, seen)
    own, prev = seen[0::2].tolist(), seen[1::2].tolist()
    assert own == [p + 100 for p in range(8)] and mem.stats.own_reads > 0
    assert all(v == 0 for v in prev[1:])  # every delay is at least one program: the previous write is not seen
    assert buf.tolist() == [p + 100 for p in range(8)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_fence_loses_sums_in_the_fused_tier_on_every_seed(seed):
    lost, runs, seconds = lost_sums("no_fence", trials=1, seed=seed)
    print(f"\nweak memory, no_fence, seed {seed}: {lost} of {runs} runs lost a partial sum ({seconds:.1f}s)")
    assert lost > 0


def test_clean_fused_tier_loses_nothing_in_the_mode():
    with mode(seed=3) as mem:
        lost, runs, _ = lost_sums(None, trials=2, seed=3)
        assert mem.stats.delayed_flushes > 0 and mem.stats.released > 0  # the mode did delay and release
    assert lost == 0 and runs > 0


def test_switched_on_from_the_environment(monkeypatch):
    if wm.active() is not None:
        pytest.skip("the session already runs in the mode")
    monkeypatch.setenv(WEAK_MEMORY.name, "1")
    monkeypatch.setenv(WEAK_MEMORY_SEED.name, "5")
    try:
        mem = wm.enable_from_env()
        assert mem is wm.active() and mem.max_delay == 4
    finally:
        wm.disable()
    monkeypatch.setenv(WEAK_MEMORY.name, "yes")
    with pytest.raises(ValueError, match="TBE_WEAK_MEMORY must be 0 or 1"):
        wm.enable_from_env()


# ----------------------------------------------------------------------------- fuzz properties
WEAK_SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck))


@pytest.mark.fuzz
@settings(max_examples=examples(8), **WEAK_SETTINGS)
@given(fuzz_cases(**DEFAULT_CASES, configs=FUSED_CONFIGS))
def test_fused_tiers_pass_the_differential_check_in_the_mode(fc):
    with mode(seed=7):
        check_fuzz_case(fc)


@pytest.mark.fuzz
def test_fused_tier_campaign_in_the_mode_catches_no_fence():
    tried, failing = 0, []

    @settings(max_examples=60, phases=[Phase.generate], database=None, derandomize=True, **WEAK_SETTINGS)
    @given(fuzz_cases(**DEFAULT_CASES, configs=FUSED_CONFIGS))
    def search(fc):
        nonlocal tried
        tried += 1
        try:
            check_fuzz_case(fc, ("no_fence",))
        except AssertionError:
            failing.append(fc)
            raise

    t0 = time.perf_counter()
    with mode(seed=11), pytest.raises(AssertionError, match="weights after update|momentum"):
        search()
    print(f"\nweak memory campaign: no_fence caught after {tried} examples, {time.perf_counter() - t0:.1f}s")
    with mode(seed=11):
        check_fuzz_case(failing[-1])  # the same case passes with the fence
