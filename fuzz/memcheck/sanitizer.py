"""A memory sanitizer for the Triton interpreter: every load, store and atomic a kernel issues is
checked before it touches memory (each lane inside a tensor the launch received; a table's rows inside
its table of a packed buffer), and a violation stops the launch with a precise finding. On with
``TBE_FUZZ_SANITIZE=1`` (``enable_from_env``); ``watched()`` counts instead of stopping. The checks,
the argument names kernels opt in with, the limits and why addresses rather than a debug flag:
docs/design/sanitizer.md.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

import numpy as np
import torch

from fuzz.errors import MemoryViolation
from tbe.env import Kind, register

SANITIZE = register(
    "TBE_FUZZ_SANITIZE", Kind.TEXT, "0",
    "interpreter sanitizer: 1 checks every load, store and atomic of the interpreted kernels, memory "
    "only the addresses, 0 off (fuzz.memcheck.sanitizer); --sanitize sets 1")
# packed buffer argument -> the argument holding each table's start in it
PACKED = {"weights_ptr": "weights_offsets_ptr", "momentum_ptr": "hcs_ptr"}
# an argument whose entries are table ids (one per work slot): loading entry k picks table ids[k]
TABLE_IDS = "table_ptr"
FINDINGS: list["Finding"] = []  # every finding of this process, oldest first


@dataclasses.dataclass
class Finding:
    kernel: str
    op: str                    # load, store, atomic
    program: tuple[int, int, int]
    argument: str              # the argument whose storage the access ran out of (or misused)
    first: int                 # the bad lanes' offsets, in elements from the argument's pointer
    last: int
    detail: str                # how far out of range, in words
    lanes: int                 # active lanes out of range
    active: int                # active lanes of the access

    def __str__(self) -> str:
        return (f"{self.kernel}, program {self.program}: {self.op} of {self.argument}[{_span(self.first, self.last)}] "
                f"{self.detail}; "
                f"{self.lanes} of {self.active} active lane(s) out of range")


def _span(lo: int, hi: int) -> str:
    return f"{lo}" if lo == hi else f"{lo}..{hi}"


@dataclasses.dataclass
class _Arg:
    name: str
    ptr: int          # what the kernel received (data_ptr)
    start: int        # its storage, in bytes
    end: int
    esize: int
    tensor: Any


class _Launch:
    def __init__(self, kernel: str, named: dict[str, Any], tables: bool) -> None:
        self.kernel, self.program = kernel, (0, 0, 0)
        self.args = {}
        for name, value in named.items():
            t = getattr(value, "base", value)  # TensorWrapper -> its tensor
            if hasattr(t, "untyped_storage"):
                st = t.untyped_storage()
                self.args[name] = _Arg(name, t.data_ptr(), st.data_ptr(), st.data_ptr() + st.nbytes(),
                                       t.element_size(), t)
        spans: dict[int, int] = {}
        for a in self.args.values():
            spans[a.start] = max(spans.get(a.start, a.start), a.end)
        self.starts = np.array(sorted(spans), dtype=np.int64)
        self.ends = np.array([spans[s] for s in sorted(spans)], dtype=np.int64)
        # (buffer, offsets, table starts in elements, table ends, dims or None) of the packed rules that apply
        self.packed = []
        for buf, off in PACKED.items() if tables else ():
            if buf in self.args and off in self.args:
                b, o = self.args[buf], self.args[off]
                starts = o.tensor.detach().cpu().to(torch.int64).tolist()
                size = (b.end - b.ptr) // b.esize
                # entries are per feature (tbe.layout.device_tensors): features of one table repeat its start, in
                # any order, so an entry's table ends where the next larger start begins
                ends = _table_ends(starts, size)
                dims = self.args["dims_ptr"].tensor.tolist() if "dims_ptr" in self.args and buf == "weights_ptr" else None
                self.packed.append((b, o, np.array(starts), np.array(ends), dims))
        self.intended: dict[str, np.ndarray] = {}

    def nearest(self, addr: int) -> _Arg:
        return min(self.args.values(), key=lambda a: 0 if a.start <= addr < a.end else min(abs(addr - a.start),
                                                                                           abs(addr - a.end)))


def _table_ends(starts: list[int], size: int) -> list[int]:
    """The end of the table at each start: the next larger start, else ``size``."""
    bounds = sorted(set(starts)) + [size]
    return [next(b for b in bounds if b > s) if s < size else size for s in starts]


_state: dict[str, Any] = {"launch": None, "orig": None, "tables": True, "deferred": False, "watch": False,
                          "outside": 0}


@contextmanager
def deferred() -> Iterator[None]:
    """Accesses inside are another program's, applied late (the weak-memory mode's delayed writes):
    the address check applies, the table its current program chose does not."""
    before, _state["deferred"] = _state["deferred"], True
    try:
        yield
    finally:
        _state["deferred"] = before


def _check(ptrs, mask, op: str) -> None:
    launch: Optional[_Launch] = _state["launch"]
    if launch is None:
        return
    addr = np.asarray(ptrs.data).astype(np.int64)
    on = np.broadcast_to(np.asarray(mask.data, dtype=bool), addr.shape) if mask is not None else \
        np.ones(addr.shape, dtype=bool)
    active = addr[on]
    if active.size == 0:
        return
    esize = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
    i = np.searchsorted(launch.starts, active, side="right") - 1
    ok = (i >= 0) & (active + esize <= launch.ends[np.maximum(i, 0)])
    if _state["watch"]:  # counted, not stopped: the access goes ahead as it would unwatched
        _state["outside"] += int((~ok).sum())
        return
    if not ok.all():
        a = launch.nearest(int(active[~ok][0]))
        bad = (active[~ok] - a.ptr) // esize
        lo, hi = int(bad.min()), int(bad.max())
        first, last = (a.start - a.ptr) // esize, (a.end - a.ptr) // esize - 1
        if lo < first:
            how = f"is before the start of its storage by {_span(first - hi, first - lo)} element(s)"
        else:
            how = f"runs past the end of its storage by {_span(lo - last, hi - last)} element(s)"
        _raise(launch, op, a, lo, hi, f"{how} (storage: {a.name}[{first}..{last}], {esize}-byte elements)",
               int((~ok).sum()), active.size)
    ids = launch.args.get(TABLE_IDS)
    picked = None
    if ids is not None and op == "load" and ids.start <= int(active[0]) < ids.end:  # tables by id
        flat = ids.tensor.detach().reshape(-1).cpu().to(torch.int64).numpy()
        pos = np.clip((addr - ids.ptr) // ids.esize, 0, max(0, flat.size - 1))
        picked = np.where(on, flat[pos] if flat.size else -1, -1)
    for b, o, starts, ends, dims in launch.packed if not _state["deferred"] else ():
        if picked is not None:
            launch.intended[b.name] = picked
            continue
        if o.start <= int(active[0]) < o.end and op == "load":  # the program picks its table(s)
            launch.intended[b.name] = np.where(on, (addr - o.ptr) // o.esize, -1)
            continue
        want = launch.intended.get(b.name)
        if want is None or not (b.start <= int(active[0]) < b.end):
            continue
        if want.size == 1:
            want = np.full(addr.shape, int(want.reshape(-1)[0]))
        elif want.shape == addr.shape[:want.ndim]:
            want = np.broadcast_to(want.reshape(want.shape + (1,) * (addr.ndim - want.ndim)), addr.shape)
        else:
            try:  # e.g. [RUNS, 1] table ids against an [RUNS, BLOCK_D] row tile
                want = np.broadcast_to(want, addr.shape)
            except ValueError:
                continue
        lanes = on & (want >= 0) & (want < len(starts))
        elem = (addr - b.ptr) // b.esize
        t = np.where(lanes, want, 0)
        wrong = lanes & ((elem < starts[t]) | (elem >= ends[t]))
        if wrong.any():
            tt = int(t[tuple(np.argwhere(wrong)[0])])
            hit = elem[wrong & (t == tt)]
            lo, hi = int(hit.min()), int(hit.max())
            other = int(np.searchsorted(starts, lo, side="right") - 1)
            unit = dims[tt] if dims else 1
            row, rows = (lo - int(starts[tt])) // unit, (int(ends[tt]) - int(starts[tt])) // unit
            where = f"table {other}" if 0 <= other < len(starts) and lo < ends[other] else "no table"
            took = f"table {tt} from {TABLE_IDS}" if ids is not None else f"table {tt}'s start from {o.name}[{tt}]"
            _raise(launch, op, b, lo, hi,
                   f"lies in {where}, but the program took {took}: as table "
                   f"{tt}'s row that is row {row}, and table {tt} has {rows} row(s) (0..{rows - 1})",
                   int(wrong.sum()), int(lanes.sum()))


def _raise(launch: _Launch, op: str, a: _Arg, lo: int, hi: int, detail: str, lanes: int, active: int) -> None:
    finding = Finding(launch.kernel, op, launch.program, a.name, lo, hi, detail, lanes, active)
    FINDINGS.append(finding)
    raise MemoryViolation(finding)


def enabled() -> bool:
    return _state["orig"] is not None


def enable(tables: bool = True) -> None:
    """Install the hooks (idempotent); ``tables`` adds the packed-buffer table check."""
    _state["tables"] = tables
    if enabled():
        return
    try:
        from triton.runtime import interpreter as ti
    except ImportError as e:  # pragma: no cover - triton without an interpreter
        raise RuntimeError(f"{SANITIZE.name}: the sanitizer needs Triton's interpreter ({e})") from e
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError(f"{SANITIZE.name}=1 needs the Triton interpreter (TRITON_INTERPRET=1): compiled kernels are not "
                           f"checked; on a GPU run the replay under compute-sanitizer instead")
    b, ge = ti.interpreter_builder, ti.GridExecutor
    orig = {name: getattr(b, name) for name in ("set_grid_idx", "create_masked_load", "create_masked_store",
                                                  "create_atomic_rmw", "create_atomic_cas")}
    orig["_init_args_hst"], orig["__call__"] = ge._init_args_hst, ge.__call__
    orig["own"] = {n: vars(b)[n] for n in orig if n in vars(b)}  # hooks of another mode underneath

    def init_args(self, args_dev, kwargs):
        args_hst, kwargs_hst = orig["_init_args_hst"](self, args_dev, kwargs)
        named = inspect.getcallargs(self.fn, *args_hst, **kwargs_hst)
        _state["launch"] = _Launch(getattr(self.fn, "__name__", str(self.fn)), named, _state["tables"])
        return args_hst, kwargs_hst

    def call(self, *args, **kwargs):
        try:
            return orig["__call__"](self, *args, **kwargs)
        finally:
            _state["launch"] = None

    def set_grid_idx(x, y, z):
        orig["set_grid_idx"](x, y, z)
        if _state["launch"] is not None:
            _state["launch"].program, _state["launch"].intended = (x, y, z), {}

    def load(ptrs, mask, other, cache_policy, is_volatile):
        _check(ptrs, mask, "load")
        return orig["create_masked_load"](ptrs, mask, other, cache_policy, is_volatile)

    def store(ptrs, value, mask, cache_policy):
        _check(ptrs, mask, "store")
        return orig["create_masked_store"](ptrs, value, mask, cache_policy)

    def rmw(op, ptr, val, mask, sem, scope):
        _check(ptr, mask, "atomic")
        return orig["create_atomic_rmw"](op, ptr, val, mask, sem, scope)

    def cas(ptr, cmp, val, sem, scope):
        _check(ptr, None, "atomic")
        return orig["create_atomic_cas"](ptr, cmp, val, sem, scope)

    for name, fn in (("set_grid_idx", set_grid_idx), ("create_masked_load", load), ("create_masked_store", store),
                     ("create_atomic_rmw", rmw), ("create_atomic_cas", cas)):
        setattr(b, name, fn)
    ge._init_args_hst, ge.__call__ = init_args, call
    _state["orig"] = orig


def disable() -> None:
    orig = _state["orig"]
    if orig is None:
        return
    from triton.runtime import interpreter as ti

    for name in ("set_grid_idx", "create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas"):
        if name in orig["own"]:
            setattr(ti.interpreter_builder, name, orig["own"][name])  # the other mode's hook again
        elif name in vars(ti.interpreter_builder):
            delattr(ti.interpreter_builder, name)  # the class's method shows through again
    ti.GridExecutor._init_args_hst, ti.GridExecutor.__call__ = orig["_init_args_hst"], orig["__call__"]
    _state["orig"] = _state["launch"] = None


def requested() -> Optional[str]:
    """The env var's mode: None (off), "memory" (address check only) or "all"."""
    value = (SANITIZE.raw() or "").strip().lower()
    if value in ("", "0", "off", "no"):
        return None
    if value in ("1", "on", "all", "yes"):
        return "all"
    if value == "memory":
        return "memory"
    raise ValueError(f"{SANITIZE.name} must be 0, 1 or memory, got {SANITIZE.raw()!r}")


def enable_from_env() -> bool:
    """Switch the sanitizer on when the env var asks for it; returns whether it is on."""
    mode = requested()
    if mode is not None:
        enable(tables=mode == "all")
    return enabled()


@contextmanager
def watched() -> Iterator[Callable[[], Optional[int]]]:
    """Count the active lanes whose access leaves the storages of its launch's tensors (check 1), without
    stopping them, so the case runs as it would unwatched; yields a function giving the count so far.

    Only the address check, since it is what says a failing case wrote nowhere else in the process, so the
    process can run the next case (``fuzz.execution.supervisor``). Under the sanitizer proper, which stops at
    the first such access, nothing is added and the count is 0."""
    if enabled():
        yield lambda: 0
        return
    _state["watch"], _state["outside"] = True, 0
    enable(tables=False)
    try:
        yield lambda: _state["outside"]
    finally:
        disable()
        _state["watch"] = False


@contextmanager
def sanitized(tables: bool = True) -> Iterator[None]:
    was = enabled()
    enable(tables)
    try:
        yield
    finally:
        if not was:
            disable()
