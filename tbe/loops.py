"""The loops inside each kernel, declared beside the kernel, so coverage can count which of their behaviours ran.

A kernel module registers its loops with ``register_loops``: which kernel, the path it serves, what the loop
walks and how its extent follows from one launch's arguments (by parameter name) and grid. Three kinds:

- a grid-stride loop (``GRID_STRIDE``) over device-counted work runs one pass or more than one;
- a tiled or vectorized loop (``TILE``) over an extent is whole (a multiple of its tile) or has a remainder;
- a workspace (``WORKSPACE``, a tensor parameter) is on its first use or reuses memory an earlier launch held.

Nothing here runs during a launch: a harness reads a launch's arguments and asks ``Loop.classes``.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Callable, Mapping, Optional

import torch

from tbe.config import KernelConfig
from tbe.routing import Path


class LoopKind(enum.Enum):
    GRID_STRIDE = "grid-stride"
    TILE = "tile"
    WORKSPACE = "workspace"


class LoopClass(enum.Enum):
    """What one launch did in one loop."""

    ONE_PASS = "one pass"
    MORE_PASSES = "more than one pass"
    WHOLE = "whole tiles"
    REMAINDER = "a remainder tile"
    FIRST_USE = "first use"
    REUSE = "reuse"


CLASSES = {
    LoopKind.GRID_STRIDE: (LoopClass.ONE_PASS, LoopClass.MORE_PASSES),
    LoopKind.TILE: (LoopClass.WHOLE, LoopClass.REMAINDER),
    LoopKind.WORKSPACE: (LoopClass.FIRST_USE, LoopClass.REUSE),
}

Args = Mapping[str, Any]  # a launch's arguments by parameter name, constexprs included
Grid = tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Loop:
    """One loop of one kernel.

    ``extents(args, grid)``: for GRID_STRIDE and TILE, the (extent, step) pairs the launch walks (one per
    instance of the loop: a bag, a run, the whole grid); for WORKSPACE, the name of the tensor parameter.
    ``when(args)``: whether this launch serves ``path`` (a kernel that serves two paths declares its loop twice).
    ``programs(config, sms)``: for GRID_STRIDE, the most programs a launch takes (more work than that makes
    a second pass); ``launched(config)``: whether the kernel can launch under ``config`` at all."""

    kernel: str
    path: Path
    walks: str
    kind: LoopKind
    extents: Callable[[Args, Grid], Any]
    when: Callable[[Args], bool] = lambda args: True
    programs: Optional[Callable[[KernelConfig, int], int]] = None
    launched: Callable[[KernelConfig], bool] = lambda config: True

    @property
    def label(self) -> str:
        return f"{self.kernel.strip('_')}, {self.walks}"

    def classes(self, args: Args, grid: Grid) -> set[LoopClass]:
        """The classes of GRID_STRIDE or TILE loop instances in one launch (a workspace is classed by its memory).
        An extent may be an int or a tensor of them (one per instance, on the launch's device); empty ones count
        nothing."""
        out = set()
        for extent, step in self.extents(args, grid):
            ext = torch.as_tensor(extent).reshape(-1).to(torch.int64)
            ext = ext[ext > 0]
            if self.kind == LoopKind.GRID_STRIDE:
                first, second, hit = LoopClass.ONE_PASS, LoopClass.MORE_PASSES, ext > step
            else:
                first, second, hit = LoopClass.WHOLE, LoopClass.REMAINDER, ext % step != 0
            some, all_ = (bool(x) for x in torch.stack([hit.any(), hit.all()]).tolist()) if ext.numel() else (False, True)
            if not all_:
                out.add(first)
            if some:
                out.add(second)
        return out


LOOPS: dict[str, list[Loop]] = {}  # kernel name -> its loops


def register_loops(*loops: Loop) -> None:
    for loop in loops:
        LOOPS.setdefault(loop.kernel, []).append(loop)
