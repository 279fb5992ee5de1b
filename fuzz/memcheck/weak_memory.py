"""Weak-memory mode for Triton's interpreter: writes other programs may not see yet.

A program's writes that nothing in it waits on (plain stores, relaxed atomics whose result is unused) are
buffered and stay invisible to other programs until it releases them or a seeded delay has passed, so a
missing fence or a relaxed countdown loses data as it can on a GPU. On with ``TBE_WEAK_MEMORY=1`` (``_SEED``,
``_DELAY``), the ``weak_memory`` fixture, or ``with weak_memory(seed):``. The rules, what the mode cannot
model and why it is hand-written: docs/design/weak-memory.md.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import os
import random
import sys
from typing import Iterator, Optional

import numpy as np

from fuzz.memcheck import sanitizer
from tbe.env import Kind, register

WEAK_MEMORY = register(
    "TBE_WEAK_MEMORY", Kind.FLAG, "0",
    "1 runs every interpreted kernel in the weak-memory mode (fuzz.memcheck.weak_memory), in the CLI "
    "and the test session")
WEAK_MEMORY_SEED = register(
    "TBE_WEAK_MEMORY_SEED", Kind.INT, "0", "seed of the weak-memory mode's store delays")
WEAK_MEMORY_DELAY = register(
    "TBE_WEAK_MEMORY_DELAY", Kind.INT, "4", "largest delay, in operations, of a buffered store in the weak-memory mode")


@dataclasses.dataclass
class Stats:
    kernels: int = 0
    programs: int = 0
    buffered: int = 0            # writes held back
    released: int = 0            # buffers published by a release / acq_rel atomic
    own_reads: int = 0           # loads served with the program's own buffered writes applied
    own_atomics: int = 0         # buffers published because an atomic touched the program's own write
    delayed_flushes: int = 0     # buffers published when their delay ran out


@dataclasses.dataclass
class _Write:
    apply: object        # callable applying the write to memory
    ptrs: np.ndarray     # element addresses, as the kernel gave them
    mask: np.ndarray     # lanes written
    np_dtype: object     # element type in memory

    @property
    def lo(self) -> np.ndarray:
        return self.ptrs[self.mask].astype(np.uint64)

    @property
    def size(self) -> int:
        return np.dtype(self.np_dtype).itemsize

    def snapshot(self) -> np.ndarray:
        from triton.runtime.interpreter import _interpreter

        return _interpreter.load(self.ptrs, self.mask, np.zeros(self.ptrs.shape, self.np_dtype), self.np_dtype)

    def restore(self, old: np.ndarray) -> None:
        from triton.runtime.interpreter import _interpreter

        _interpreter.store(self.ptrs, old, self.mask)


@functools.lru_cache(maxsize=None)
def _atomic_calls(filename: str) -> tuple[tuple[int, int, bool], ...]:
    """(first line, last line, result unused) of every ``*.atomic_*(...)`` call in a source file."""
    try:
        with open(filename) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError):
        return ()
    bare = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name.startswith("atomic_"):
                out.append((node.lineno, node.end_lineno or node.lineno, id(node) in bare))
    return tuple(out)


class WeakMemory:
    def __init__(self, seed: int = 0, max_delay: int = 4, stores: bool = True) -> None:
        if max_delay < 1:
            raise ValueError(f"weak memory max_delay must be >= 1, got {max_delay}")
        self.rng = random.Random(seed)
        self.max_delay = max_delay
        self.stores = stores
        self.stats = Stats()
        self.program = -1
        self.pending: list[tuple[int, list[_Write]]] = []  # (visible from program, writes), per ended program
        self.current: list[_Write] = []
        self._index: Optional[tuple[np.ndarray, int]] = None  # sorted byte addresses of ``current``, widest size
        self._saved: dict = {}

    # -------------------------------------------------------------- bookkeeping
    def _result_unused(self) -> bool:
        import triton

        skip = (os.path.dirname(triton.__file__), __file__)
        f = sys._getframe(2)
        while f is not None and f.f_code.co_filename.startswith(skip):
            f = f.f_back
        if f is None:
            return False
        calls = [c for c in _atomic_calls(f.f_code.co_filename) if c[0] <= f.f_lineno <= c[1]]
        return bool(calls) and all(unused for _, _, unused in calls)

    def _publish(self, writes: list[_Write]) -> None:
        """Apply ``writes``, issued earlier (so the sanitizer checks addresses, not the table chosen now)."""
        with sanitizer.deferred():
            for w in writes:
                w.apply()

    def _take_current(self) -> list[_Write]:
        writes, self.current, self._index = self.current, [], None
        return writes

    def _flush_current(self, counter: str) -> None:
        if self.current:
            setattr(self.stats, counter, getattr(self.stats, counter) + 1)
            self._publish(self._take_current())

    def _touches_own(self, ptrs: np.ndarray, mask: Optional[np.ndarray], size: int) -> bool:
        if not self.current:
            return False
        a = ptrs.astype(np.uint64).ravel() if mask is None else ptrs[np.broadcast_to(mask, ptrs.shape)].astype(np.uint64)
        if a.size == 0:
            return False
        if self._index is None:
            self._index = (np.sort(np.concatenate([w.lo for w in self.current])), max(w.size for w in self.current))
        lo, wsize = self._index
        if lo.size == 0 or a.max() + np.uint64(size) <= lo[0] or a.min() >= lo[-1] + np.uint64(wsize):
            return False
        i = np.searchsorted(lo, a + np.uint64(size))
        return bool(np.any((i > 0) & (lo[np.maximum(i - 1, 0)] + np.uint64(wsize) > a)))

    def _own_view(self, load):
        """``load()`` as this program sees memory: its own buffered writes applied, then withdrawn."""
        self.stats.own_reads += 1
        saved = []
        with sanitizer.deferred():
            for w in self.current:
                saved.append(w.snapshot())
                w.apply()
        try:
            return load()
        finally:
            for w, old in zip(reversed(self.current), reversed(saved)):
                w.restore(old)

    def _hold(self, apply, ptrs: np.ndarray, mask: np.ndarray, np_dtype) -> None:
        m = np.broadcast_to(mask, ptrs.shape).copy()
        self.current.append(_Write(apply, ptrs.copy(), m, np_dtype))
        self._index = None
        self.stats.buffered += 1

    def end_program(self) -> None:
        if self.current:
            self.pending.append((self.program + 1 + self.rng.randint(1, self.max_delay), self._take_current()))

    def start_program(self) -> None:
        self.end_program()
        self.program += 1
        self.stats.programs += 1
        due = [(v, w) for v, w in self.pending if v <= self.program]
        self.pending = [(v, w) for v, w in self.pending if v > self.program]
        for _, writes in due:
            self.stats.delayed_flushes += 1
            self._publish(writes)

    def end_kernel(self, publish: bool = True) -> None:
        self.end_program()
        pending, self.pending = self.pending, []
        if publish:
            for _, writes in pending:
                self._publish(writes)
        self.program = -1

    # -------------------------------------------------------------- interpreter hooks
    def install(self) -> None:
        from triton.runtime import interpreter as itp

        b = itp.interpreter_builder
        if getattr(b, "_tbe_weak_memory", None) is not None:
            raise RuntimeError("weak-memory mode is already on")
        orig = {n: getattr(b, n) for n in ("set_grid_idx", "create_atomic_rmw", "create_atomic_cas",
                                            "create_masked_load", "create_masked_store")}
        own = {n: vars(b)[n] for n in orig if n in vars(b)}  # hooks of another mode (the sanitizer) underneath
        self._saved = {"builder": (b, orig, own), "call": itp.GridExecutor.__call__}
        mem = self

        def set_grid_idx(x, y, z):
            orig["set_grid_idx"](x, y, z)
            mem.start_program()

        def create_atomic_rmw(rmwOp, ptr, val, mask, sem, scope):
            np_dtype = itp._get_np_dtype(val.dtype.scalar)
            size = np.dtype(np_dtype).itemsize
            kind = str(sem).rsplit(".", 1)[-1]
            if kind in ("RELEASE", "ACQUIRE_RELEASE"):
                mem._flush_current("released")
            elif kind == "RELAXED" and mem._result_unused():
                held = (itp.TensorHandle(ptr.data.copy(), ptr.dtype), itp.TensorHandle(val.data.copy(), val.dtype),
                        itp.TensorHandle(mask.data.copy(), mask.dtype))
                mem._hold(lambda: orig["create_atomic_rmw"](rmwOp, *held, sem, scope), ptr.data, mask.data, np_dtype)
                return itp.TensorHandle(np.zeros_like(val.data), val.dtype.scalar)
            elif mem._touches_own(ptr.data, mask.data, size):
                mem._flush_current("own_atomics")
            return orig["create_atomic_rmw"](rmwOp, ptr, val, mask, sem, scope)

        def create_atomic_cas(ptr, cmp, val, sem, scope):
            if str(sem).rsplit(".", 1)[-1] in ("RELEASE", "ACQUIRE_RELEASE"):
                mem._flush_current("released")
            elif mem._touches_own(ptr.data, None, np.dtype(itp._get_np_dtype(val.dtype.scalar)).itemsize):
                mem._flush_current("own_atomics")
            return orig["create_atomic_cas"](ptr, cmp, val, sem, scope)

        def create_masked_load(ptrs, mask, *rest):
            size = np.dtype(itp._get_np_dtype(ptrs.get_element_ty())).itemsize
            if mem._touches_own(ptrs.data, mask.data, size):
                return mem._own_view(lambda: orig["create_masked_load"](ptrs, mask, *rest))
            return orig["create_masked_load"](ptrs, mask, *rest)

        def create_masked_store(ptrs, value, mask, *rest):
            if not mem.stores or mem.program < 0:
                return orig["create_masked_store"](ptrs, value, mask, *rest)
            held = (itp.TensorHandle(ptrs.data.copy(), ptrs.dtype), itp.TensorHandle(value.data.copy(), value.dtype),
                    itp.TensorHandle(mask.data.copy(), mask.dtype))
            mem._hold(lambda: orig["create_masked_store"](*held, *rest), ptrs.data, mask.data,
                      itp._get_np_dtype(ptrs.get_element_ty()))

        call = itp.GridExecutor.__call__

        def grid_call(executor, *args, **kwargs):
            mem.stats.kernels += 1
            mem.program = -1
            ok = False
            try:
                out = call(executor, *args, **kwargs)
                ok = True
                return out
            finally:
                mem.end_kernel(publish=ok)

        for name, fn in dict(set_grid_idx=set_grid_idx, create_atomic_rmw=create_atomic_rmw,
                             create_atomic_cas=create_atomic_cas, create_masked_load=create_masked_load,
                             create_masked_store=create_masked_store).items():
            setattr(b, name, fn)
        b._tbe_weak_memory = self
        itp.GridExecutor.__call__ = grid_call

    def uninstall(self) -> None:
        from triton.runtime import interpreter as itp

        if not self._saved:
            return
        b, orig, own = self._saved["builder"]
        for name in orig:
            if name in own:
                setattr(b, name, own[name])  # the hook that was there before
            else:
                delattr(b, name)  # back to the class's methods
        b._tbe_weak_memory = None
        itp.GridExecutor.__call__ = self._saved["call"]
        self._saved = {}


_ACTIVE: Optional[WeakMemory] = None


def enable(seed: int = 0, max_delay: int = 4, stores: bool = True) -> WeakMemory:
    """Switch the mode on for this process (kernels must run in the interpreter)."""
    global _ACTIVE
    from tbe.backend import INTERPRETED

    if not INTERPRETED:
        raise RuntimeError("weak-memory mode works in Triton's interpreter only (TRITON_INTERPRET=1)")
    if _ACTIVE is not None:
        raise RuntimeError("weak-memory mode is already on")
    _ACTIVE = WeakMemory(seed, max_delay, stores)
    _ACTIVE.install()
    return _ACTIVE


def disable() -> None:
    global _ACTIVE
    if _ACTIVE is not None:
        _ACTIVE.uninstall()
        _ACTIVE = None


def active() -> Optional[WeakMemory]:
    return _ACTIVE  # the mode's state while it is on, else None


@contextlib.contextmanager
def weak_memory(seed: int = 0, max_delay: int = 4, stores: bool = True) -> Iterator[WeakMemory]:
    mem = enable(seed, max_delay, stores)
    try:
        yield mem
    finally:
        disable()


def enable_from_env() -> Optional[WeakMemory]:
    """``TBE_WEAK_MEMORY=1`` switches the mode on (seed and delay from their variables)."""
    if not WEAK_MEMORY.flag():
        return None
    return enable(WEAK_MEMORY_SEED.integer(), WEAK_MEMORY_DELAY.integer())
