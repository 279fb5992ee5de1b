"""Mutation operators for the ``@triton.jit`` code under ``tbe/``: sites, seeded samples, mutated text.

A site is one small, type-preserving change at one place in a jit function's body
(comparisons, arithmetic and bitwise operators, constants +-1 and 0<->1, ``and``/``or``, dropped
``not``/``~``/``-``, masks dropped or negated, ``other=`` values, ``tl.where`` arms swapped, loop
bounds off by one, atomic ``sem=``/``scope=`` values, removed ``tl.debug_barrier()``, removed
stores and atomics, ``tl.minimum``<->``tl.maximum``, accumulations turned into assignments, runtime
``if`` conditions negated). Code inside ``if FAULT_*:`` (planted faults, off in every real
config), shape and dtype arguments (``tl.arange``, ``axis=``, ``.to(...)``: a change there
only fails to compile) and compile-time ``if`` tests (config switches) are not mutated.
Edits replace the exact source span, so a mutant's diff is the changed line(s) only.

Why hand-made: mutmut 3.8.1 skips every decorated function (``@triton.jit`` included: 0 of
its 95 mutants in tbe/forward.py fall in the kernel), and forcing it past that check makes
its trampoline the jit function: the interpreter then fails with "triton.language must be
visible from within jit'd function" and a compile for sm_90 with "NameError: tl is not
defined", since Triton reads the wrapped function's source and globals, never the
trampoline's choice of mutant. cosmic-ray 8.7.0's operators parse with parso and work on a
copy as a library, but they are generic Python: in tbe/'s jit code they yield 4,813
positions, 80% binary-operator swaps to every other operator (``**``, shifts on floats,
``/`` on pointers) that Triton rejects at compile time, and ``for x in []`` loops Triton cannot
compile; none of them knows masks, ``other=``, ``sem=``/``scope=``, barriers, stores or
min/max. Its runner writes the mutant into the module's file in place and runs mutants one
after another (the local distributor) with no notion of equivalent mutants or of one worker
per GPU. The few generic rewrites kept here are a page of ``ast`` code.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import random
from pathlib import Path
from typing import Optional

KERNEL_FILES = "tbe"
MEMORY_ORDER_OPS = ("atomic", "barrier")  # changes the Triton interpreter cannot observe

_CMP = {ast.Lt: ("<", ["<=", ">="]), ast.LtE: ("<=", ["<", ">"]), ast.Gt: (">", [">=", "<="]),
        ast.GtE: (">=", [">", "<"]), ast.Eq: ("==", ["!="]), ast.NotEq: ("!=", ["=="])}
_BIN = {ast.Add: ("+", ["-"]), ast.Sub: ("-", ["+"]), ast.Mult: ("*", ["+"]), ast.Div: ("/", ["*"]),
        ast.FloorDiv: ("//", ["*"]), ast.Mod: ("%", ["//"]), ast.BitAnd: ("&", ["|"]),
        ast.BitOr: ("|", ["&"]), ast.BitXor: ("^", ["|"]), ast.LShift: ("<<", [">>"]),
        ast.RShift: (">>", ["<<"])}
_MEMORY = {"load", "store", "atomic_add", "atomic_min", "atomic_max", "atomic_cas", "atomic_xchg",
           "atomic_and", "atomic_or", "atomic_xor"}
_SIDE_EFFECTS = {"store", "debug_barrier"} | {n for n in _MEMORY if n.startswith("atomic")}
_SWAP = {"minimum": "maximum", "maximum": "minimum", "min": "max", "max": "min",
         "atomic_min": "atomic_max", "atomic_max": "atomic_min"}
_SHAPE_CALLS = {"arange", "zeros", "full", "reshape", "histogram", "zeros_like", "static_assert", "program_id",
                "num_programs"}
_SHAPE_KWARGS = {"axis", "keep_dims", "dtype", "bitcast", "volatile", "out_dtype", "num_warps"}
_SEM = {"acq_rel": ["relaxed"], "acquire": ["relaxed"], "release": ["relaxed"], "relaxed": ["acq_rel"]}
_SCOPE = {"gpu": ["cta"], "sys": ["gpu"], "cta": ["gpu"]}


@dataclasses.dataclass(frozen=True)
class Site:
    """One mutant: replace ``original`` at [line:col, end_line:end_col) of ``path`` with ``replacement``."""

    path: str
    function: str
    operator: str
    line: int
    col: int
    end_line: int
    end_col: int
    original: str
    replacement: str
    description: str

    @property
    def id(self) -> str:
        h = hashlib.sha1(f"{self.original}\0{self.replacement}".encode()).hexdigest()[:6]
        return f"{self.path}:{self.line}:{self.col}:{self.operator}:{h}"

    def to_dict(self) -> dict:
        return {"id": self.id, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, d: dict) -> "Site":
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls)})


def _tl_attr(func: ast.AST) -> Optional[str]:
    """'load' for ``tl.load`` (any ``<name>.load`` attribute call), else None."""
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "tl":
        return func.attr
    return None


def is_jit(fn: ast.FunctionDef) -> bool:
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if isinstance(target, ast.Attribute) and target.attr == "jit":
            return True
    return False


def _constexprs(fn: ast.FunctionDef) -> set[str]:
    return {a.arg for a in fn.args.args if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)}


class _Finder:
    """Walks one jit function and collects its sites."""

    def __init__(self, path: str, src: str, fn: ast.FunctionDef) -> None:
        self.path, self.src, self.fn = path, src, fn
        self.lines = src.splitlines(keepends=True)
        self.constexpr = _constexprs(fn)
        self.sites: list[Site] = []

    # -- text helpers ---------------------------------------------------------------
    def text(self, l1: int, c1: int, l2: int, c2: int) -> str:
        if l1 == l2:
            return self.lines[l1 - 1].encode()[c1:c2].decode()
        parts = [self.lines[l1 - 1].encode()[c1:].decode()] + self.lines[l1:l2 - 1]
        return "".join(parts + [self.lines[l2 - 1].encode()[:c2].decode()])

    def seg(self, node: ast.AST) -> str:
        return self.text(node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)

    def add(self, op: str, span: tuple[int, int, int, int], new: str, what: str) -> None:
        old = self.text(*span)
        if new != old:
            self.sites.append(Site(self.path, self.fn.name, op, *span, old, new, what))

    def add_node(self, op: str, node: ast.AST, new: str, what: str) -> None:
        self.add(op, (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset), new, what)

    def gap(self, a: ast.AST, b: ast.AST) -> tuple[int, int, int, int]:
        return a.end_lineno, a.end_col_offset, b.lineno, b.col_offset

    def swap_token(self, op: str, a: ast.AST, b: ast.AST, token: str, new: str) -> None:
        span = self.gap(a, b)
        text = self.text(*span)
        if text.count(token) == 1 or (token in text and text.strip(" ()\n\\") == token):
            self.add(op, span, text.replace(token, new, 1), f"{token} -> {new}")

    # -- walk ----------------------------------------------------------------------
    def run(self) -> list[Site]:
        body = self.fn.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # docstring
        for stmt in body:
            self.visit(stmt, skip=False)
        return self.sites

    def is_fault_test(self, test: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id.startswith("FAULT_") for n in ast.walk(test))

    def static_test(self, test: ast.AST) -> bool:
        names = [n.id for n in ast.walk(test) if isinstance(n, ast.Name) and n.id != "tl"]
        return bool(names) and all(n in self.constexpr for n in names)

    def visit(self, node: ast.AST, skip: bool) -> None:
        """Collect sites at ``node`` and below; ``skip`` marks shape/dtype contexts (no value mutants)."""
        if isinstance(node, ast.If):
            if self.is_fault_test(node.test):
                for s in node.orelse:  # the real code path of `if FAULT: ... else: ...`
                    self.visit(s, skip)
                return
            if not self.static_test(node.test):
                self.add_node("if", node.test, f"not ({self.seg(node.test)})", "condition negated")
                self.visit(node.test, skip)
            for s in node.body + node.orelse:
                self.visit(s, skip)
            return
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            name = _tl_attr(node.value.func)
            if name in _SIDE_EFFECTS:
                op = "barrier" if name == "debug_barrier" else "remove"
                self.add_node(op, node, "pass", f"tl.{name}(...) removed")
        if isinstance(node, ast.For):
            self.loop(node.iter)
        if isinstance(node, ast.AugAssign):
            self.aug(node)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP:
            token, news = _CMP[type(node.ops[0])]
            for new in news:
                self.swap_token("cmp", node.left, node.comparators[0], token, new)
        if isinstance(node, ast.BinOp) and type(node.op) in _BIN and not skip:
            token, news = _BIN[type(node.op)]
            for new in news:
                self.swap_token("bitwise" if token in "&|^" else "arith", node.left, node.right, token, new)
        if isinstance(node, ast.BoolOp):
            token, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
            for a, b in zip(node.values, node.values[1:]):
                self.swap_token("bool", a, b, token, new)
        if isinstance(node, ast.UnaryOp) and not skip and not isinstance(node.op, ast.UAdd):
            name = {ast.Not: "not", ast.Invert: "~", ast.USub: "-"}[type(node.op)]
            self.add_node("unary", node, f"({self.seg(node.operand)})", f"{name} dropped")
        if isinstance(node, ast.Constant) and not skip:
            self.const(node, "const")
        if isinstance(node, ast.Call):
            self.call(node, skip)
            return
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.expr_context, ast.operator, ast.cmpop, ast.boolop, ast.unaryop)):
                continue
            self.visit(child, skip or isinstance(node, ast.Subscript) and child is node.slice)

    def const(self, node: ast.Constant, op: str) -> None:
        v = node.value
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return
        if isinstance(v, int):
            news = {0: ["1"], 1: ["0", "2"]}.get(v, [str(v + 1), str(v - 1)])
        else:
            news = {0.0: ["1.0"], 1.0: ["0.0"]}.get(v, [repr(v * 2)])
        for new in news:
            self.add_node(op, node, new, f"{self.seg(node)} -> {new}")

    def call(self, node: ast.Call, skip: bool) -> None:
        name = _tl_attr(node.func)
        if name in _SWAP:
            self.add_node("minmax", node.func, f"tl.{_SWAP[name]}", f"tl.{name} -> tl.{_SWAP[name]}")
        if name == "where" and len(node.args) == 3:
            a, b = node.args[1], node.args[2]
            self.add("where", (a.lineno, a.col_offset, b.end_lineno, b.end_col_offset),
                     f"{self.seg(b)}, {self.seg(a)}", "tl.where arms swapped")
        args_skip = skip or name in _SHAPE_CALLS
        for a in node.args:
            self.visit(a, args_skip)
        has_sem = False
        prev: ast.AST = node.args[-1] if node.args else node.func
        for kw in node.keywords:
            k = kw.arg
            if name in _MEMORY and k == "mask":
                self.add("mask", (prev.end_lineno, prev.end_col_offset, kw.end_lineno, kw.end_col_offset), "",
                         "mask dropped")
                self.add_node("mask", kw.value, f"~({self.seg(kw.value)})", "mask negated")
            if name in _MEMORY and k == "other" and isinstance(kw.value, (ast.Constant, ast.UnaryOp)):
                v = kw.value
                if isinstance(v, ast.UnaryOp) and isinstance(v.operand, ast.Constant):
                    self.add_node("other", v, "0", f"other={self.seg(v)} -> 0")
                elif isinstance(v, ast.Constant):
                    self.const(v, "other")
                prev = kw
                continue
            if k in ("sem", "scope") and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                has_sem |= k == "sem"
                for new in (_SEM if k == "sem" else _SCOPE).get(kw.value.value, []):
                    self.add_node("atomic", kw.value, repr(new).replace("'", '"'), f"{k}={kw.value.value} -> {new}")
                prev = kw
                continue
            has_sem |= k == "sem"
            self.visit(kw.value, skip or k in _SHAPE_KWARGS)
            prev = kw
        if isinstance(node.func, ast.Attribute):
            self.visit(node.func.value, skip)  # the receiver of x.to(...), x.dtype, ...
        if name and name.startswith("atomic") and not has_sem:
            end = (node.end_lineno, node.end_col_offset - 1)
            self.add("atomic", (*end, *end), ', sem="relaxed"', f"tl.{name}: default acq_rel -> relaxed")

    def loop(self, it: ast.AST) -> None:
        if not isinstance(it, ast.Call) or not it.args:
            return
        fname = it.func.attr if isinstance(it.func, ast.Attribute) else getattr(it.func, "id", "")
        if fname not in ("range", "static_range"):
            return
        stop = it.args[1] if len(it.args) >= 2 else it.args[0]
        for d in ("- 1", "+ 1"):
            self.add_node("loop", stop, f"{self.seg(stop)} {d}", f"loop end {d}")
        if len(it.args) >= 2:
            self.add_node("loop", it.args[0], f"{self.seg(it.args[0])} + 1", "loop start + 1")

    def aug(self, node: ast.AugAssign) -> None:
        tok = {ast.Add: "+=", ast.Sub: "-="}.get(type(node.op))
        if tok is None:
            return
        span = self.gap(node.target, node.value)
        text = self.text(*span)
        other = "-=" if tok == "+=" else "+="
        self.add("aug", span, text.replace(tok, other, 1), f"{tok} -> {other}")
        self.add("aug", span, text.replace(tok, "=", 1), f"{tok} -> = (accumulation lost)")


def file_sites(root: Path, rel: str) -> list[Site]:
    """Every site of every @triton.jit function in ``root/rel``."""
    src = (root / rel).read_text()
    tree = ast.parse(src)
    out: list[Site] = []
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef) and is_jit(fn):
            out += _Finder(rel, src, fn).run()
    good = []
    for s in out:  # every mutant must still parse
        try:
            ast.parse(apply(src, s))
        except SyntaxError:
            continue
        good.append(s)
    return good


def all_sites(root: Path) -> list[Site]:
    """Every site under ``root/tbe``, in a stable order (file, position, operator, replacement)."""
    sites = []
    for path in sorted((root / KERNEL_FILES).glob("*.py")):
        sites += file_sites(root, path.relative_to(root).as_posix())
    return sorted(sites, key=lambda s: (s.path, s.line, s.col, s.end_line, s.end_col, s.operator, s.replacement))


def sample(sites: list[Site], n: int, seed: int) -> list[Site]:
    """``n`` sites drawn without replacement by ``seed`` (all of them when ``n`` >= their number)."""
    if n >= len(sites):
        return list(sites)
    chosen = random.Random(seed).sample(range(len(sites)), n)
    return [sites[i] for i in sorted(chosen)]


def apply(src: str, site: Site) -> str:
    """``src`` with ``site``'s span replaced (UTF-8 byte columns, as ``ast`` reports them)."""
    lines = src.splitlines(keepends=True)
    head = "".join(lines[:site.line - 1]) + lines[site.line - 1].encode()[:site.col].decode()
    tail = lines[site.end_line - 1].encode()[site.end_col:].decode() + "".join(lines[site.end_line:])
    return head + site.replacement + tail


def diff(src: str, site: Site, context: int = 0) -> str:
    """Unified diff of the mutated line(s)."""
    import difflib

    new = apply(src, site)
    return "".join(difflib.unified_diff(src.splitlines(keepends=True), new.splitlines(keepends=True),
                                        f"a/{site.path}", f"b/{site.path}", n=context))
