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
