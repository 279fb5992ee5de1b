"""The PTX ordering analysis on hand-written kernels: barriers, fences, scopes, branches and loops.

Each case is a small PTX body with one partial-sum ``red`` and one countdown ``atom`` whose
result picks a branch; the analysis must accept exactly the orderings the sync check claims
to accept (see fuzz/memcheck/sync_analysis.py) and name the lines it relied on or the path that breaks.
"""

import pytest

from fuzz.errors import PTXError
from fuzz.memcheck.ptx import parse
from fuzz.memcheck.sync_analysis import analyse

HEAD = """
.version 8.0
.target sm_90
.address_size 64
.file 1 "/src/kernel.py"
.visible .entry k(
    .param .u64 k_param_0
)
.maxntid 128, 1, 1
{
    .reg .pred %p<5>;
    .loc 1 10 0
"""
COUNTDOWN = """
    .loc 1 20 0
    @%p1 atom.global.gpu.{sem}.add.u32 %r2, [ %rd2 + 0 ], %r3;
    setp.eq.s32 %p2, %r2, 1;
    @!%p2 bra $L__END;
    ld.volatile.global.b32 {{ %r4 }}, [ %rd1 + 0 ];
$L__END:
    ret;
}}
"""
PARTIAL = "    @%p0 red.global.gpu.relaxed.add.f32 [ %rd1 + 0 ], %r1;\n"


def kernel(between: str, sem: str = "acq_rel", before: str = "") -> str:
    return HEAD + before + PARTIAL + between + COUNTDOWN.format(sem=sem)


def problems(ptx: str) -> list[str]:
    k = analyse(ptx)
    assert k.hands_off, "the countdown pattern was not found"
    return k.problems


def test_barrier_then_acq_rel_countdown_is_synchronised():
    ptx = kernel("    bar.sync 0;\n")
    line = {text.strip().split()[0].split(".")[0]: n for n, text in enumerate(ptx.splitlines(), 1) if text.strip()}
    k = analyse(ptx)
    assert k.problems == []
    pair = k.pairs[0]
    assert pair.barriers == [f"PTX line {line['bar']}: bar.sync 0 (kernel.py:10)"]
    assert "countdown is .acq_rel" in pair.release[0] and f"PTX line {line['@%p1']}:" in pair.release[0]
    assert "(kernel.py:20)" in pair.release[0] and f"PTX line {line['@%p0']}:" in pair.partial


@pytest.mark.parametrize("between", ["", "    @%p3 bar.sync 0;\n", "    bar.arrive 0, 128;\n"])
def test_missing_or_predicated_barrier_is_a_problem(between):
    found = problems(kernel(between))
    assert len(found) == 1 and "no CTA barrier" in found[0] and "PTX line" in found[0]


def test_barrier_skipped_by_a_branch_is_a_problem():
    between = "    @%p3 bra $L__SKIP;\n    bar.sync 0;\n$L__SKIP:\n"
    found = problems(kernel(between))
    assert any("no CTA barrier" in p for p in found)


def test_relaxed_countdown_needs_a_gpu_fence_after_the_barrier():
    assert problems(kernel("    bar.sync 0;\n    fence.acq_rel.gpu;\n", sem="relaxed")) == []
    assert problems(kernel("    bar.sync 0;\n    membar.gl;\n", sem="relaxed")) == []
    assert any("relaxed" in p for p in problems(kernel("    bar.sync 0;\n", sem="relaxed")))
    # a fence before the barrier does not publish the other warps' partials
    assert any("relaxed" in p for p in problems(kernel("    fence.acq_rel.gpu;\n    bar.sync 0;\n", sem="relaxed")))
    # a CTA-scope fence is not enough
    assert any("relaxed" in p for p in problems(kernel("    bar.sync 0;\n    fence.acq_rel.cta;\n", sem="relaxed")))


def test_cta_scoped_countdown_is_a_problem():
    ptx = kernel("    bar.sync 0;\n").replace("atom.global.gpu.acq_rel", "atom.global.cta.acq_rel")
    assert any("scoped to the cta" in p for p in problems(ptx))


def test_loops_are_followed_along_back_edges():
    # barrier at the top of the loop, partial at its end: leaving the loop skips the barrier
    loop = HEAD + "$L__LOOP:\n    bar.sync 0;\n" + PARTIAL + "    @%p3 bra $L__LOOP;\n" + COUNTDOWN.format(sem="acq_rel")
    assert any("no CTA barrier" in p for p in problems(loop))
    # barrier after the loop: every exit passes it
    ok = HEAD + "$L__LOOP:\n" + PARTIAL + "    @%p3 bra $L__LOOP;\n    bar.sync 0;\n" + COUNTDOWN.format(sem="acq_rel")
    assert problems(ok) == []


def test_countdown_result_followed_through_shared_memory():
    smem = COUNTDOWN.replace(
        "    setp.eq.s32 %p2, %r2, 1;\n",
        "    st.shared.b32 [ %r9 + 0 ], %r2;\n    bar.sync 0;\n    ld.shared.b32 %r5, [global_smem];\n"
        "    setp.eq.s32 %p2, %r5, 1;\n")
    k = analyse(HEAD + PARTIAL + "    bar.sync 0;\n" + smem.format(sem="acq_rel"))
    assert k.hands_off and k.problems == []


def test_an_atomic_whose_result_only_addresses_memory_is_no_countdown():
    body = HEAD + PARTIAL + ("    atom.global.gpu.acq_rel.add.u32 %r2, [ %rd2 + 0 ], %r3;\n"
                             "    mul.wide.s32 %rd5, %r2, 4;\n    st.global.b32 [ %rd5 + 0 ], %r1;\n    ret;\n}\n")
    k = analyse(body)
    assert not k.hands_off and k.countdowns == []


def test_calls_and_unknown_labels_are_refused():
    with pytest.raises(PTXError, match="call"):
        parse(HEAD + "    call.uni f, (%r1);\n    ret;\n}\n")
    with pytest.raises(PTXError, match="unknown label"):
        parse(HEAD + "    bra $L__NOWHERE;\n}\n")
