"""tbe.interpreter: under Triton's interpreter a helper call inside a launch does not patch the language again,
the launch still patches and restores it, and the results are the same."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from tbe.backend import INTERPRETED  # imports tbe, which installs the shortcut

pytestmark = pytest.mark.skipif(not INTERPRETED, reason="the shortcut exists for Triton's interpreter only")


@triton.jit
def _double(x):
    return x * 2


@triton.jit
def _doubling_kernel(x_ptr, out_ptr, N, TIMES: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < N
    v = tl.load(x_ptr + offs, mask=m, other=0.0)
    for _ in tl.static_range(TIMES):
        v = _double(v)
    tl.store(out_ptr + offs, v, mask=m)


def test_helpers_inside_a_launch_do_not_patch_the_language_again(monkeypatch):
    from triton.runtime import interpreter as itp

    assert getattr(itp.InterpretedFunction.__call__, "tbe_shortcut", False)  # installed by importing tbe
    calls = []
    original = itp._patch_lang
    monkeypatch.setattr(itp, "_patch_lang", lambda fn: calls.append(fn.__name__) or original(fn))
    load_before = tl.load
    x = torch.arange(5, dtype=torch.float32)
    out = torch.empty_like(x)
    _doubling_kernel[(1,)](x, out, 5, TIMES=4, BLOCK=8)
    assert torch.equal(out, x * 16)
    assert calls == ["_doubling_kernel"]  # the launch's own patch only, not one per helper call
    assert tl.load is load_before  # restored after the launch


@triton.jit
def _row_sums_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)  # tl.zeros and tl.sum are Triton's own @jit helpers (``core`` globals)
    acc += tl.load(x_ptr + offs, mask=offs < N, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) + tl.max(acc, axis=0))


def test_tritons_own_helpers_do_not_patch_the_language_again(monkeypatch):
    from triton.runtime import interpreter as itp

    calls = []
    original = itp._patch_lang
    monkeypatch.setattr(itp, "_patch_lang", lambda fn: calls.append(fn) or original(fn))
    load_before, core_full_before = tl.load, tl.core.full
    x = torch.tensor([1.0, -2.0, 5.0])
    out = torch.empty(1)
    for _ in range(3):
        _row_sums_kernel[(1,)](x, out, 3, BLOCK=4)
    assert out.item() == 4.0 + 5.0
    assert len(calls) == 3  # one patch per launch: none for tl.zeros, tl.sum, tl.max
    assert tl.load is load_before and tl.core.full is core_full_before  # both modules restored after each launch
