"""The interpreter sanitizer: out-of-range loads, stores and atomics are stopped and named (kernel,
argument, program, offset, distance); masked-off lanes are exempt; a row of the wrong table inside the
packed weights or momentum is named; the kernels pass it on valid input."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from fuzz.memcheck.sanitizer import SANITIZE
from fuzz.memcheck import sanitizer
from fuzz.judge.differential import check_case, failures, summary
from cases import CaseSpec, HotRow
from strategies.configs import NAMED
from tbe import KernelConfig, TritonTBE
from tbe.backend import INTERPRETED

pytestmark = pytest.mark.skipif(not INTERPRETED, reason="the sanitizer checks the Triton interpreter's accesses")


@triton.jit
def _copy(src_ptr, dst_ptr, n, shift, MASKED: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK) + shift
    if MASKED:
        tl.store(dst_ptr + i, tl.load(src_ptr + i, mask=(i >= 0) & (i < n), other=0.0), mask=(i >= 0) & (i < n))
    else:
        tl.store(dst_ptr + i, tl.load(src_ptr + i))


@triton.jit
def _bump(counter_ptr, k, STORE: tl.constexpr):
    if STORE:
        tl.store(counter_ptr + k, 1)
    else:
        tl.atomic_add(counter_ptr + k, 1)


def _finding(launch) -> sanitizer.Finding:
    before = len(sanitizer.FINDINGS)
    with pytest.raises(Exception) as exc:
        launch()
    assert len(sanitizer.FINDINGS) == before + 1, exc.value
    assert "sanitizer" in str(exc.value)
    return sanitizer.FINDINGS[-1]


def test_masked_off_lanes_are_exempt(sanitized):
    src, dst = torch.arange(10.0), torch.zeros(10)
    _copy[(2,)](src, dst, 10, -3, MASKED=True, BLOCK=8)
    assert dst.tolist() == src.tolist()  # every in-range lane copied, none of the 6 masked-off ones checked


def test_overrun_names_kernel_argument_program_and_distance(sanitized):
    src, dst = torch.arange(10.0), torch.zeros(10)
    f = _finding(lambda: _copy[(2,)](src, dst, 10, 0, MASKED=False, BLOCK=8))
    assert (f.kernel, f.op, f.argument, f.program, f.first, f.last) == ("_copy", "load", "src_ptr", (1, 0, 0), 10, 15)
    assert "past the end of its storage by 1..6 element(s)" in str(f) and "src_ptr[0..9]" in str(f)
    assert f.lanes == 6 and f.active == 8
    assert dst[8:].tolist() == [0.0, 0.0], "the launch stopped before the bad program's store"
    f = _finding(lambda: _copy[(1,)](src, dst, 10, -2, MASKED=False, BLOCK=8))
    assert (f.first, f.last) == (-2, -1) and "before the start of its storage by 1..2" in str(f)


@pytest.mark.parametrize("store", [False, True])
def test_atomics_and_stores_are_checked(sanitized, store):
    counter = torch.zeros(4, dtype=torch.int32)
    _bump[(1,)](counter, 3, STORE=store)
    f = _finding(lambda: _bump[(1,)](counter, 4, STORE=store))
    assert (f.op, f.argument, f.first) == ("store" if store else "atomic", "counter_ptr", 4)
    assert counter.tolist() == [0, 0, 0, 1]


def _off_by_one_module(last_table: bool, fused: bool, optimizer: str = "exact_sgd", runs: int = 1):
    """Two tables of 5 and 7 rows; one id equals its table's row count, which the planted fault lets through."""
    config = KernelConfig(faults=("bounds_check_off_by_one",), fused_bounds_check=fused,
                          bwd_short_runs_per_program=runs)
    m = TritonTBE([(5, 4), (7, 4)], config=config, optimizer=optimizer)
    ids = torch.tensor([0, 1, 2, 3, 4, 0])
    ids[5 if last_table else 1] = 7 if last_table else 5
    return m, ids, torch.tensor([0, 2, 3, 4, 6])


@pytest.mark.parametrize("fused", [False, True])
def test_off_by_one_forward_is_named(sanitized, fused):
    m, ids, off = _off_by_one_module(False, fused)
    f = _finding(lambda: m(ids, off))
    assert (f.kernel, f.argument, f.program, f.first, f.last) == ("_forward_kernel", "weights_ptr", (0, 0, 0), 20, 23)
    assert "lies in table 1, but the program took table 0's start from weights_offsets_ptr[0]" in str(f)
    assert "row 5, and table 0 has 5 row(s)" in str(f)
    m, ids, off = _off_by_one_module(True, fused)
    f = _finding(lambda: m(ids, off))
    assert (f.argument, f.program, f.first) == ("weights_ptr", (0, 1, 0), 48) and "past the end" in str(f)


@pytest.mark.parametrize("runs,kernel", [(1, "_short_kernel"), (4, "_short_rows_kernel")])
def test_off_by_one_backward_is_named_in_weights_and_momentum(runs, kernel):
    m, ids, off = _off_by_one_module(False, False, "exact_rowwise_adagrad", runs)
    out = m(ids, off)  # unsanitized forward: reads table 1's row 0 silently
    with sanitizer.sanitized():
        f = _finding(lambda: out.sum().backward())
    assert f.kernel == kernel and f.argument in ("weights_ptr", "momentum_ptr")
    assert "took table 0 from table_ptr" in str(f) and "row 5" in str(f)


def test_only_the_address_check_with_tables_off():
    """With tables off the sanitizer still stops an access outside the storage, and lets through one that
    stays inside it while crossing into the next table (the table check's finding, shown under tables on)."""
    m, ids, off = _off_by_one_module(False, False)
    before = len(sanitizer.FINDINGS)
    with sanitizer.sanitized(tables=False):
        out = m(ids, off)  # row 5 of table 0 is table 1's row 0: inside the buffer
        assert len(sanitizer.FINDINGS) == before and out.shape == (2, 8)
        src, dst = torch.arange(10.0), torch.zeros(10)
        f = _finding(lambda: _copy[(2,)](src, dst, 10, 0, MASKED=False, BLOCK=8))
    assert (f.argument, f.first) == ("src_ptr", 10) and "past the end" in str(f)
    with sanitizer.sanitized(tables=True):
        f = _finding(lambda: m(ids, off))
    assert "lies in table 1" in str(f)


@pytest.mark.parametrize("name", ["default", "small", "small_fused", "fused_bounds", "hoisted", "narrow"])
def test_kernels_pass_on_valid_input(sanitized, name):
    spec = CaseSpec(tables=((7, 3), (11, 5), (4, 8)), batch_size=3, weighted=True, max_length=4,
                    optimizer="exact_rowwise_adagrad", hot_rows=(HotRow(1, 10, 13),), steps=2, seed=5)
    reports = check_case(spec, NAMED[name])
    assert not failures(reports), summary(reports, spec)


def test_disable_restores_the_interpreter(monkeypatch):
    from triton.runtime import interpreter as ti

    call = ti.GridExecutor.__call__
    with sanitizer.sanitized():
        assert ti.GridExecutor.__call__ is not call and "create_masked_load" in vars(ti.interpreter_builder)
    assert ti.GridExecutor.__call__ is call and "create_masked_load" not in vars(ti.interpreter_builder)
    for value, mode in (("1", "all"), ("memory", "memory"), ("0", None), ("", None)):
        monkeypatch.setenv(SANITIZE.name, value)
        assert sanitizer.requested() == mode
    monkeypatch.setenv(SANITIZE.name, "yes please")
    with pytest.raises(ValueError, match="TBE_FUZZ_SANITIZE"):
        sanitizer.requested()


@pytest.mark.parametrize("fused", [False, True])
def test_the_watch_counts_accesses_outside_the_tensors_and_lets_them_run(fused):
    """Row E_t of the last table lies past the weights' storage: counted; of the first, inside table 1: not
    (only the address check watches). Either way the kernel runs on as it would unwatched."""
    for last, outside in ((True, True), (False, False)):
        m, ids, off = _off_by_one_module(last, fused)
        with sanitizer.watched() as count:
            out = m(ids, off)
        assert (count() > 0) == outside, (last, count())
        assert out.shape == (2, 8) and not sanitizer.enabled()


def test_under_the_sanitizer_the_watch_adds_nothing(sanitized):
    with sanitizer.watched() as count:
        assert count() == 0 and sanitizer.enabled()
    assert sanitizer.enabled(), "the sanitizer the test turned on stays on"
