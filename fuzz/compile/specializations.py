"""Which kernel specializations a piece of code launches, worked out on the host without a GPU.

A compiled Triton kernel is built once per *specialization*: its constexpr values, the dtype
(and 16-byte alignment) of every pointer, and for each integer argument not listed in
``do_not_specialize`` whether it equals 1 or is a multiple of 16. ``record`` wraps the
kernels' launch method and writes down that key for every launch; with ``dry_run`` the
launch itself is skipped, so a batch's whole launch sequence costs milliseconds on the CPU
(the launch sequence depends only on host-known sizes: nothing in the forward or the
backward reads device data back, see ``tbe/backward.py``). The warm-up's coverage test and
the specialization counts in the README come from here. It models Triton's rule; the GPU's
own count is ``fuzz.compile.watch``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any, Iterator

import torch

Key = tuple  # (kernel name, ((parameter, specialization), ...))


@functools.lru_cache(maxsize=None)
def _signature(fn: Any) -> tuple[tuple[str, ...], frozenset[str]]:
    """(parameter names, constexpr names) of a kernel's function; read once (inspect is slow)."""
    params = inspect.signature(fn).parameters.values()
    return tuple(p.name for p in params), frozenset(p.name for p in params if "constexpr" in str(p.annotation))


def _arg_key(value: Any, constexpr: bool, specialize: bool) -> Any:
    if constexpr:
        return ("constexpr", str(value))
    if isinstance(value, torch.Tensor):
        return ("ptr", str(value.dtype), value.data_ptr() % 16 == 0)
    if isinstance(value, bool):
        return ("i1", value if specialize else None)
    if isinstance(value, int):
        kind = "i32" if -(2**31) <= value < 2**31 else "i64"
        if not specialize:
            return (kind,)
        return (kind, "one" if value == 1 else ("div16" if value % 16 == 0 else ""))
    if isinstance(value, float):
        return ("fp32",)
    if value is None:
        return ("none",)
    return (type(value).__name__, str(value))


def launch_key(kernel: Any, args: tuple, kwargs: dict) -> Key:
    """The specialization key of one launch of ``kernel`` (a JITFunction or InterpretedFunction)."""
    fn = kernel.fn
    names, const = _signature(fn)
    dns = set()
    opts = getattr(kernel, "kwargs", None) or {}
    for entry in (opts.get("do_not_specialize") or getattr(kernel, "do_not_specialize", None) or ()):
        dns.add(names[entry] if isinstance(entry, int) else entry)
    bound = dict(zip(names, args))
    bound.update({k: v for k, v in kwargs.items() if k in names})
    options = tuple(sorted((k, str(v)) for k, v in kwargs.items() if k not in names))  # num_warps, ...
    parts = tuple((n, _arg_key(bound[n], n in const, n not in dns)) for n in names if n in bound)
    return (fn.__name__, parts + options)


@contextlib.contextmanager
def record(dry_run: bool = False) -> Iterator[set]:
    """Collect the launch keys of every kernel launched in the block (interpreter or compiled)."""
    import triton.runtime.interpreter as interp
    from triton.runtime.jit import JITFunction

    keys: set = set()
    saved = []
    for cls in (interp.InterpretedFunction, JITFunction):
        original = cls.run

        def run(self, *args, grid, warmup, _original=original, **kwargs):
            if not warmup:
                keys.add(launch_key(self, args, kwargs))
                if dry_run:
                    return None
            return _original(self, *args, grid=grid, warmup=warmup, **kwargs)

        saved.append((cls, original))
        cls.run = run
    try:
        yield keys
    finally:
        for cls, original in saved:
            cls.run = original


def by_kernel(keys: set) -> dict[str, int]:
    """Number of distinct specializations per kernel."""
    out: dict[str, int] = {}
    for name, _ in keys:
        out[name] = out.get(name, 0) + 1
    return dict(sorted(out.items()))
