"""Which launched kernels reach each @triton.jit function, and where each jit function's body lies."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator

from fuzz.mutate.operators import KERNEL_FILES, is_jit


def callers(root: Path) -> dict[str, set[str]]:
    """jit function -> the jit functions that call it (directly, or by passing it to a helper that
    calls it, as ``update_row(_run_block, ...)`` does), over every file under tbe/."""
    out: dict[str, set[str]] = {}
    jit = [fn for path in sorted((root / KERNEL_FILES).glob("*.py")) for fn in ast.parse(path.read_text()).body
           if isinstance(fn, ast.FunctionDef) and is_jit(fn)]
    names = {fn.name for fn in jit}
    for fn in jit:
        for n in ast.walk(fn):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
                out.setdefault(n.func.id, set()).add(fn.name)
                for a in n.args:
                    if isinstance(a, ast.Name) and a.id in names:
                        out.setdefault(a.id, set()).add(fn.name)
    return out


def kernels_of(function: str, calls: dict[str, set[str]]) -> list[str]:
    """The launched kernels (jit functions no other jit function calls) that reach ``function``."""
    seen, todo, roots = set(), [function], set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        up = calls.get(f, set())
        if not up:
            roots.add(f)
        todo += sorted(up)
    return sorted(roots)


def iter_jit_lines(root: Path) -> Iterator[tuple[str, int, int]]:
    """(path, first body line, last line) of every jit function, for coverage."""
    for path in sorted((root / KERNEL_FILES).glob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in tree.body:
            if isinstance(fn, ast.FunctionDef) and is_jit(fn):
                yield path.relative_to(root).as_posix(), fn.body[0].lineno, fn.end_lineno
