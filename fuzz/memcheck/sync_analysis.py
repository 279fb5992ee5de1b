"""Is a kernel's hand-off between programs synchronised? Read from its PTX, path by path.

A kernel hands data between programs when a program adds data atomically (``red``, or an
``atom`` whose result is never read: the partial sums) and then takes a ``sync`` atomic whose
result decides a branch (the countdown: the last program applies the update). For every
partial P that can reach a countdown C in the control-flow graph:

- barrier: every path from P to C passes an unpredicated CTA barrier (``bar.sync`` /
  ``barrier.sync`` / ``bar.red``), so every warp's partials are done before one thread counts;
- release: after that barrier, C itself is ``.release``/``.acq_rel`` at gpu or sys scope, or
  every path from the barrier to C passes ``fence.acq_rel``/``fence.sc`` (gpu or sys) or
  ``membar.gl``/``membar.sys``.

Paths follow branches and loop back edges (``fuzz.memcheck.ptx``). Assumed, not checked: branches
around barriers are uniform across the CTA (Triton emits scalar control flow), and the
countdown's result reaches the branch through registers, ``shfl``/``redux`` and shared
memory (a flow-insensitive taint: any ``ld.shared`` after a tainted ``st.shared`` is tainted).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional

from fuzz.memcheck.ptx import Instr, Kernel, parse

_BARRIER = re.compile(r"^(bar|barrier)(\.cta)?\.(sync|red)\b")
_FENCE = re.compile(r"^(fence\.(acq_rel|sc)\.(gpu|sys)|membar\.(gl|sys))\b")
_MEM_SEM = ("relaxed", "acquire", "release", "acq_rel")
_SCOPES = ("cta", "cluster", "gpu", "sys")


def is_barrier(ins: Instr) -> bool:
    return ins.pred is None and bool(_BARRIER.match(ins.opcode))


def is_fence(ins: Instr) -> bool:
    return bool(_FENCE.match(ins.opcode))


@dataclasses.dataclass(frozen=True)
class Atomic:
    kind: str   # "atom" or "red"
    space: str  # "global", "shared" or "generic"
    sem: str    # relaxed when the instruction names none
    scope: str  # gpu when the instruction names none
    op: str
    type: str


def atomic(ins: Instr) -> Optional[Atomic]:
    parts = ins.opcode.split(".")
    if parts[0] not in ("atom", "red"):
        return None
    space = next((p for p in parts if p in ("global", "shared")), "generic")
    sem = next((p for p in parts if p in _MEM_SEM), "relaxed")
    scope = next((p for p in parts if p in _SCOPES), "gpu")
    rest = [p for p in parts[1:] if p not in (space, sem, scope)]
    return Atomic(parts[0], space, sem, scope, rest[0] if rest else "", parts[-1])


def _reads(ins: Instr) -> set[str]:
    """Registers an instruction reads as values (its predicate excluded)."""
    ops = ins.operands[1:] if ins.dest else ins.operands
    return set(re.findall(r"%[A-Za-z_]\w*", " ".join(ops)))


def decides_branch(k: Kernel, ins: Instr) -> bool:
    """Whether the register ``ins`` writes flows into the predicate of a branch."""
    tainted = {ins.dest}
    smem = False
    changed = True
    while changed:
        changed = False
        for other in k.instrs:
            if other.opcode.startswith("st.shared") and _reads(other) & tainted and not smem:
                smem = changed = True
            hit = smem if other.opcode.startswith("ld.shared") else bool(_reads(other) & tainted)
            if hit and other.dest and other.dest not in tainted:
                tainted.add(other.dest)
                changed = True
    return any(i.opcode.startswith("bra") and i.pred and i.pred.lstrip("!") in tainted for i in k.instrs)


def _read_anywhere(k: Kernel) -> set[str]:
    out: set[str] = set()
    for ins in k.instrs:
        out |= _reads(ins)
        if ins.pred:
            out.add(ins.pred.lstrip("!"))
    return out


@dataclasses.dataclass
class PairCheck:
    partial: str                 # where the partial atomic is
    countdown: str               # where the countdown is
    barriers: list[str]          # barriers every path from the partial meets first
    release: list[str]           # the countdown's own release, or the fences after the barriers
    problems: list[str]          # empty when synchronised


@dataclasses.dataclass
class KernelSync:
    """What the PTX of one kernel says about its hand-off."""

    kernel: str
    partials: list[str]
    countdowns: list[str]
    pairs: list[PairCheck]

    @property
    def hands_off(self) -> bool:
        return bool(self.pairs)

    @property
    def problems(self) -> list[str]:
        return [p for pair in self.pairs for p in pair.problems]


def analyse(ptx: str) -> KernelSync:
    k = parse(ptx)
    read = _read_anywhere(k)
    atoms = [(ins, atomic(ins)) for ins in k.instrs]
    atoms = [(ins, a) for ins, a in atoms if a is not None and a.space != "shared"]
    partials = [ins for ins, a in atoms if a.kind == "red" or (ins.dest is not None and ins.dest not in read)]
    syncs = [(ins, a) for ins, a in atoms if a.kind == "atom" and ins.dest in read and decides_branch(k, ins)]
    pairs = []
    for c, ca in syncs:
        for p in partials:
            if c.index in k.reachable([p.index], lambda i: False):
                pairs.append(_check_pair(k, p, c, ca))
    return KernelSync(k.name, [p.where() for p in partials], [c.where() for c, _ in syncs], pairs)


def _check_pair(k: Kernel, p: Instr, c: Instr, ca: Atomic) -> PairCheck:
    problems: list[str] = []
    before = k.reachable([p.index], is_barrier)
    barriers = sorted(i for i in before if is_barrier(k.instrs[i]))
    if c.index in before:
        path = k.path(p.index, c.index, is_barrier)
        problems.append(f"no CTA barrier between the partial ({p.where()}) and the countdown ({c.where()}); "
                        f"a path without one: PTX lines {[k.instrs[i].line for i in [p.index] + path]}")
    release: list[str] = []
    if ca.scope in ("cta", "cluster"):
        problems.append(f"the countdown is scoped to the {ca.scope}, not the GPU: {c.where()}")
    elif ca.sem in ("release", "acq_rel"):
        release = [f"countdown is .{ca.sem} at {ca.scope} scope: {c.where()}"]
    else:
        after = k.reachable(barriers, is_fence)
        fences = sorted(i for i in after if is_fence(k.instrs[i]))
        release = [k.instrs[i].where() for i in fences]
        if c.index in after or not barriers:
            problems.append(f"the countdown is .{ca.sem} and no gpu-scope fence follows the barrier on every "
                            f"path before it: {c.where()}")
    return PairCheck(p.where(), c.where(), [k.instrs[i].where() for i in barriers], release, problems)
