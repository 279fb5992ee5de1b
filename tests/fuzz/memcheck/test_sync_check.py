"""The static sync check on the real kernels, compiled for sm_90 without a GPU (fuzz.memcheck.sync_check).

The fused long tier must pass with the PTX lines it relied on; ``no_fence`` (and a config
with ``fence=False``) must fail in every specialization; ``no_barrier`` must fail, or be
masked by a barrier the compiler emits with the countdown itself (measured: triton 3.6
leaves none for BLOCK_D >= 128 at 4 warps, triton 3.9 puts one before every release
atomic). The list of kernels that hand data between programs is re-derived from the PTX of
every kernel a probe launches. Compiles are cached on disk (fuzz.compile.cuda_target).
"""

import re
import time
from pathlib import Path

import pytest
import triton

from fuzz.compile import compile_launches
from fuzz.compile.launches import Probe, int_class, run_probe
from fuzz.memcheck.sync_analysis import analyse
from fuzz.memcheck.sync_check import SYNC_KERNELS, check_config, discover, hands_off
from tbe import KernelConfig
from tbe.backend import INTERPRETED
from tests.paths import REPO

pytestmark = pytest.mark.fuzz

FUSED = KernelConfig(fused_long_tier=True)
VERSION = tuple(int(x) for x in triton.__version__.split(".")[:2])


@pytest.fixture(scope="module")
def reports():
    out, seconds = {}, {}
    for name, cfg in [("clean", FUSED), ("no_fence", FUSED.replace(faults=("no_fence",))),
                      ("no_barrier", FUSED.replace(faults=("no_barrier",)))]:
        t0 = time.perf_counter()
        out[name] = check_config(cfg)
        seconds[name] = time.perf_counter() - t0
    print(f"\nsync check seconds (compile + analysis, cache as found): {seconds}")
    return out


def test_launch_records_keep_what_triton_specializes_on():
    assert [int_class(v) for v in (1, 0, 32, 7, -16, 2**31, 2**40 + 1)] == [1, 16, 16, 17, 16, 2**33 + 16, 2**33 + 17]
    launches = run_probe(Probe(tables=((4, 8), (4, 300))), FUSED.replace(bwd_long_gather=2, bwd_long_num_warps=2))
    fused = [lc for lc in launches if hands_off(lc)]
    assert {(dict(lc.constexprs)["BLOCK_D"], dict(lc.constexprs)["WIDE"]) for lc in fused} == {("8", "false"),
                                                                                             ("256", "true")}
    assert all(dict(lc.constexprs)["GATHER"] == "2" and lc.num_warps == 2 for lc in fused)


def test_clean_fused_tier_is_synchronised(reports):
    r = reports["clean"]
    assert r.ran and r.ok, r.text()
    assert len(r.checked) >= len(FUSED.dim_buckets) + 1  # every bucket, and the widest also WIDE
    text = r.text()
    assert "barrier   PTX line" in text and "countdown is .acq_rel at gpu scope" in text
    # the kernel's own tl.debug_barrier is one of the barriers relied on
    src = "backward_long.py"
    assert any(src in b and b not in r.compiler_barriers() for b in r.evidence()), r.text()


def test_no_fence_is_caught_in_every_specialization(reports):
    r = reports["no_fence"]
    assert r.ran and not r.ok
    bad = {lc.key() for lc, _ in r.problems}
    assert len(bad) == len(r.checked)
    assert all(".relaxed" in p and "PTX line" in p for _, p in r.problems)


def test_fence_off_in_the_config_is_caught():
    r = check_config(FUSED.replace(fence=False))
    assert r.ran and not r.ok and all(".relaxed" in p for _, p in r.problems)


def test_no_barrier_is_caught_or_masked_by_the_compiler(reports):
    r = reports["no_barrier"]
    assert r.ran
    missing = {lc.key() for lc, p in r.problems if "no CTA barrier" in p}
    masked = [c for c in r.checked if c.compiled.launch.key() not in missing]
    for c in masked:  # every specialization without the problem has a barrier the compiler put at the countdown
        src = c.sync.pairs[0].countdown.rsplit(" (", 1)[-1]
        assert all(any(b.endswith(" (" + src) for b in pair.barriers) for pair in c.sync.pairs), r.text()
    if VERSION == (3, 6):
        assert missing, "triton 3.6 left no barrier for BLOCK_D >= 128 when this was measured"
    if VERSION == (3, 9):
        assert not missing, "triton 3.9 emitted a bar.sync before every release atomic when this was measured"


def test_nothing_to_check_without_the_fused_tier():
    r = check_config(KernelConfig())
    assert r.checked == [] and r.ok and "nothing to check" in r.text()


def launched_kernels() -> set[str]:
    """Every ``name_kernel[grid](...)`` launch site in tbe/, read from the source."""
    root = REPO / "tbe"
    return {f"tbe.{p.stem}.{name}" for p in root.glob("*.py") for name in re.findall(r"(\w+_kernel)\[", p.read_text())}


def test_every_kernel_that_hands_off_through_atomics_is_checked():
    found = discover(FUSED)
    assert set(found) == launched_kernels()
    assert {k for k, h in found.items() if h} == set(SYNC_KERNELS)


def test_two_kernel_specializations_of_the_chunk_kernel_hand_nothing_off():
    """The long tiers share one chunk kernel; the check skips its FUSED=false form, so that form's
    PTX must really have no partial -> countdown hand-off."""
    launches = run_probe(Probe(tables=((4, 8),)), FUSED.replace(fused_long_tier=False))
    two_kernel = [lc for lc in launches if lc.kernel in SYNC_KERNELS]
    assert two_kernel and not any(hands_off(lc) for lc in two_kernel)
    for comp in compile_launches(two_kernel[:1]):
        assert comp.ok, comp.error
        assert not analyse(comp.ptx).hands_off


def test_second_check_is_served_from_the_cache(reports):
    launches = [c.compiled.launch for c in reports["clean"].checked]
    again = compile_launches(launches)
    assert all(c.cached for c in again)
    assert [c.ptx for c in again] == [c.compiled.ptx for c in reports["clean"].checked]


def test_selftest_catches_no_fence_on_cpu_and_no_barrier_caught_or_masked(reports, capsys):
    from fuzz.cli import main

    assert main(["selftest", "--fault", "no_fence", "--every-detector"]) == 0  # both CPU detectors, not the first
    out = capsys.readouterr().out
    assert re.search(r"no_fence\s+CAUGHT", out) and re.search(r"static sync check\s+caught.*PTX line \d+", out)
    if INTERPRETED:
        assert re.search(r"weak-memory stress\s+caught", out), out
    assert main(["selftest", "--fault", "no_barrier"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"static sync check\s+(caught|masked).*PTX line \d+", out), out
    assert not re.search(r"no_barrier\s+(MISSED|SKIPPED)", out)
