"""A small PTX reader: the instructions of a kernel's ``.entry`` body, their source lines and a CFG.

Enough for ordering questions about memory operations ("is every path from this atomic to
that one crossed by a barrier?"): each instruction keeps its PTX line number, its predicate
and the ``.loc`` source position before it; successors follow fall-through, ``bra`` (a
predicated branch has both edges) and stop at ``ret``/``exit``/``trap``. Indirect branches
and calls to non-inlined functions are refused (``PTXError``) rather than guessed at.
Written here because no maintained Python PTX parser exists; PTX is line-oriented and Triton's
output regular enough for this.
"""

from __future__ import annotations

import dataclasses
import re
from collections import deque
from typing import Callable, Iterable, Optional

from fuzz.errors import PTXError

_LABEL = re.compile(r"^(\$?[A-Za-z_][\w$]*):")
_LOC = re.compile(r"^\.loc\s+(\d+)\s+(\d+)\s+(\d+)")
_FILE = re.compile(r'^\.file\s+(\d+)\s+"([^"]+)"')
_PRED = re.compile(r"^@(!?)(%[\w]+)\s+")
_REG = re.compile(r"%[A-Za-z_][\w]*")


@dataclasses.dataclass
class Instr:
    index: int
    line: int            # 1-based line in the PTX text
    text: str            # the instruction without predicate or ';'
    opcode: str          # e.g. "atom.global.gpu.acq_rel.add.u32"
    pred: Optional[str]  # "%p12" or "!%p12"
    operands: list[str]
    source: Optional[tuple[str, int]]  # (file name, line) of the .loc before it

    @property
    def dest(self) -> Optional[str]:
        """The register an instruction writes (first operand), if it writes one."""
        if not self.operands or self.opcode.split(".")[0] in ("st", "red", "bar", "barrier", "bra", "fence", "membar"):
            return None
        m = _REG.fullmatch(self.operands[0].strip())
        return m.group(0) if m else None

    def sources(self) -> set[str]:
        regs = set(_REG.findall(" ".join(self.operands[1:] if self.dest else self.operands)))
        if self.pred:
            regs.add(self.pred.lstrip("!"))
        return regs

    def where(self) -> str:
        src = f" ({self.source[0]}:{self.source[1]})" if self.source else ""
        return f"PTX line {self.line}: {self.text}{src}"


@dataclasses.dataclass
class Kernel:
    name: str
    instrs: list[Instr]
    succ: list[list[int]]

    def reachable(self, start: Iterable[int], blocked: Callable[[Instr], bool]) -> set[int]:
        """Instructions reachable from the successors of ``start`` without passing a blocked one
        (blocked instructions are reached but not passed)."""
        seen: set[int] = set()
        todo = deque(s for i in start for s in self.succ[i])
        while todo:
            i = todo.popleft()
            if i in seen:
                continue
            seen.add(i)
            if not blocked(self.instrs[i]):
                todo.extend(self.succ[i])
        return seen

    def path(self, start: int, goal: int, blocked: Callable[[Instr], bool]) -> list[int]:
        """A shortest path start -> goal avoiding blocked instructions (empty if none)."""
        prev: dict[int, int] = {}
        todo = deque([start])
        while todo:
            i = todo.popleft()
            for s in self.succ[i]:
                if s in prev or s == start:
                    continue
                prev[s] = i
                if s == goal:
                    out = [goal]
                    while out[-1] != start:
                        out.append(prev[out[-1]])
                    return out[::-1]
                if not blocked(self.instrs[s]):
                    todo.append(s)
        return []


def _split_operands(rest: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in rest:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def parse(ptx: str) -> Kernel:
    """The first ``.entry`` function of ``ptx``."""
    files: dict[int, str] = {}
    for line in ptx.splitlines():
        m = _FILE.match(line.strip())
        if m:
            files[int(m.group(1))] = m.group(2).rsplit("/", 1)[-1]
    lines = ptx.splitlines()
    start = next((i for i, ln in enumerate(lines) if ".entry" in ln), None)
    if start is None:
        raise PTXError("no .entry function in the PTX")
    name = re.search(r"\.entry\s+([\w$]+)", lines[start]).group(1)
    body = next(i for i in range(start, len(lines)) if lines[i].strip() == "{")
    instrs: list[Instr] = []
    labels: dict[str, int] = {}
    loc: Optional[tuple[str, int]] = None
    depth = 0
    for n in range(body, len(lines)):
        raw = lines[n].split("//", 1)[0].strip()
        if raw in ("{", "}"):  # scopes stand alone on a line; vector operands' braces do not
            depth += 1 if raw == "{" else -1
            if depth == 0:
                break
            continue
        for piece in (p.strip() for p in raw.split(";")):
            if not piece:
                continue
            m = _LOC.match(piece)
            if m:
                loc = (files.get(int(m.group(1)), m.group(1)), int(m.group(2)))
                continue
            if piece.startswith("."):
                continue  # .reg, .shared and other declarations
            lm = _LABEL.match(piece)
            if lm:
                labels[lm.group(1)] = len(instrs)
                piece = piece[lm.end():].strip()
                if not piece:
                    continue
            pred = None
            pm = _PRED.match(piece)
            if pm:
                pred = pm.group(1) + pm.group(2)
                piece = piece[pm.end():]
            opcode, rest = (piece.split(None, 1) + [""])[:2]
            instrs.append(Instr(len(instrs), n + 1, " ".join(piece.split()), opcode, pred, _split_operands(rest), loc))
    return Kernel(name, instrs, _successors(instrs, labels))


def _successors(instrs: list[Instr], labels: dict[str, int]) -> list[list[int]]:
    succ: list[list[int]] = []
    n = len(instrs)
    for ins in instrs:
        op = ins.opcode.split(".")[0]
        nxt = [ins.index + 1] if ins.index + 1 < n else []
        if op == "bra":
            target = ins.operands[0].strip() if ins.operands else ""
            if target not in labels:
                raise PTXError(f"branch to an unknown label: {ins.where()}")
            succ.append([labels[target]] + (nxt if ins.pred else []))
        elif op in ("ret", "exit", "trap"):
            succ.append(nxt if ins.pred else [])
        elif op in ("brx", "call"):
            raise PTXError(f"{op} is not analysed (indirect branch or call): {ins.where()}")
        else:
            succ.append(nxt)
    return succ
