"""Which behaviours of the kernels' own loops one check ran (``tbe.loops``), read from its launches.

``observing()`` watches the launches while a check runs (its own thread's and autograd's, which runs a CUDA
backward on a thread of its own): for each loop its kernel declares, the
launch's arguments and grid give the loop's classes (one pass or more, whole tiles or a remainder). A workspace
is on its first use unless its memory overlaps what the same workspace held in an earlier launch of the check
(kept by the module, or handed back by the allocator): then the kernel meets its own leftovers.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Iterator

import torch

from cases import AnyCase, tensors
from fuzz.compile import bound_arguments, launch_hook
from fuzz.sut import DEFAULT as DEFAULT_SUT
from fuzz.sut import batch_kwargs
from fuzz.sut import get as get_sut
from fuzz.sut import params_for
from tbe import KernelConfig
from tbe.loops import LOOPS, Loop, LoopClass, LoopKind
from tbe.routing import Path


@dataclasses.dataclass
class LoopUse:
    """(path, loop label, class) triples one check's launches ran."""

    seen: set[tuple[Path, str, LoopClass]] = dataclasses.field(default_factory=set)
    _held: dict[Loop, list[tuple[int, int]]] = dataclasses.field(default_factory=dict)  # workspace memory so far

    def _workspace(self, loop: Loop, t: torch.Tensor) -> LoopClass:
        lo = t.data_ptr()
        hi = lo + max(1, t.numel() * t.element_size())
        held = self._held.setdefault(loop, [])
        reused = any(a < hi and lo < b for a, b in held)
        held.append((lo, hi))
        return LoopClass.REUSE if reused else LoopClass.FIRST_USE

    def launch(self, fn, args: tuple, kwargs: dict, grid) -> bool:
        loops = LOOPS.get(fn.__name__, ())
        if not loops:
            return True
        _, a = bound_arguments(fn, args, kwargs)
        g = tuple(grid(a) if callable(grid) else grid)
        for loop in loops:
            if not loop.when(a):
                continue
            if loop.kind == LoopKind.WORKSPACE:
                classes = {self._workspace(loop, a[loop.extents(a, g)])}
            else:
                classes = loop.classes(a, g)
            self.seen |= {(loop.path, loop.label, c) for c in classes}
        return True


@contextlib.contextmanager
def observing() -> Iterator[LoopUse]:
    """The loop classes of every launch made inside the block (a check runs one at a time in its process)."""
    use = LoopUse()
    with launch_hook(use.launch, runs_only=True):
        yield use


def run_observed(case: AnyCase, config: KernelConfig) -> LoopUse:
    """The loop classes ``case``'s steps run under ``config`` on this project's TBE alone: no oracle, nothing
    judged (how the fill phase tells whether a candidate reaches a loop cell). A step that raises ends the probe
    with what ran before it; the case's real check reports the error."""
    spec = case.spec
    t = tensors(case, weights=False)
    vbe = batch_kwargs(spec)
    with observing() as use:
        try:
            instance = get_sut(DEFAULT_SUT).build(params_for(spec, config, None))
            for grad in t.grad_outputs or [None]:
                with torch.set_grad_enabled(grad is not None):
                    instance.forward(t.indices, t.offsets, t.per_sample_weights, **vbe)
                if grad is not None:
                    instance.backward(grad)
        except Exception:  # noqa: BLE001  (see the docstring)
            pass
    return use
