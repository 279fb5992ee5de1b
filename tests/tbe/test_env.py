"""The environment-variable registry (``tbe.env``): every read goes through it, every variable is in it, and each
is registered by its owner (``fuzz.cli.reference.ENV_OWNERS`` lists them all).

The scan is syntactic (``ast``): a read of ``os.environ`` or ``os.getenv`` whose key is a registered
name or a ``TBE_`` literal, or a ``TBE_`` name kept in a variable of its own, is a direct read that
bypasses the registry. Writing a child process's environment (``dict(os.environ, NAME=...)``,
``monkeypatch.setenv``) is not a read.
"""

from __future__ import annotations

import ast
import re
import tokenize
from pathlib import Path

import pytest

from fuzz.memcheck.weak_memory import WEAK_MEMORY, WEAK_MEMORY_DELAY
from fuzz.execution.forced_crash import FORCE_CRASH
from fuzz.cli.reference import ENV_OWNERS, registry
from tbe import env
from tests.paths import REPO

REGISTRY = registry()  # every owner imported: the whole registry
PACKAGES = ("tbe", "cases", "oracles", "strategies", "fuzz", "benchmarks", "tests")
TOKEN = re.compile(r"\bTBE_[A-Z0-9_]*[A-Z0-9]\b")
ENVIRON_METHODS = {"get", "pop", "setdefault", "__getitem__", "__contains__"}


def _python_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py"))


def _is_environ(node: ast.AST) -> bool:
    """``os.environ`` or a bare ``environ``."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ")


def _names_a_variable(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and (
        node.value in REGISTRY or TOKEN.fullmatch(node.value) is not None)


def direct_reads(source: str) -> list[tuple[int, str]]:
    """(line, what) of every environment read in ``source`` that bypasses the registry."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and node.args and _names_a_variable(node.args[0]):
            f = node.func
            if isinstance(f, ast.Attribute) and (
                    (f.attr in ENVIRON_METHODS and _is_environ(f.value)) or f.attr == "getenv"):
                found.append((node.lineno, f"{ast.unparse(f)}({node.args[0].value!r})"))
        elif isinstance(node, ast.Subscript) and _is_environ(node.value) and _names_a_variable(node.slice):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Compare) and _names_a_variable(node.left) and any(
                _is_environ(c) for c in node.comparators):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for v in values:
                if isinstance(v, ast.Constant) and isinstance(v.value, str) and TOKEN.fullmatch(v.value):
                    found.append((node.lineno, f"a name kept aside: {ast.unparse(node)}"))
    return found


@pytest.mark.parametrize("source", [
    'import os\nx = os.environ.get("TBE_FUZZ_BOUND", "worst")',
    'import os\nx = os.environ["TBE_WEAK_MEMORY"]',
    'import os\nx = os.getenv("TBE_FUZZ_CACHE")',
    'import os\nx = "TBE_FUZZ_SANITIZE" in os.environ',
    'from os import environ\nx = environ.get("HYPOTHESIS_PROFILE")',
    'import os\nos.environ.setdefault("TBE_FUZZ_ALLOW_FAULTS", "1")',
    'ENV = "TBE_" "SOMETHING_NEW"',  # one literal once parsed; split so the repository names no such variable
    'A, B = "TBE_WEAK_MEMORY", "TBE_WEAK_MEMORY_SEED"',
])
def test_the_scan_finds_a_direct_read(source):
    assert direct_reads(source), source


@pytest.mark.parametrize("source", [
    'import os\nenv = dict(os.environ, TBE_FUZZ_ALLOW_FAULTS="1")',
    'def t(monkeypatch):\n    monkeypatch.setenv("TBE_FUZZ_BOUND", "worst")',
    'import os\nx = os.environ.get("PYTEST_CURRENT_TEST")',
    'from tbe.env import BOUND\nx = BOUND.text()',
])
def test_the_scan_leaves_writes_and_registry_reads_alone(source):
    assert direct_reads(source) == []


def test_no_module_reads_the_environment_past_the_registry():
    found = [f"{p.relative_to(REPO)}:{line}: {what}" for p in _python_files()
             for line, what in direct_reads(p.read_text())]
    assert found == [], "read these through tbe.env:\n" + "\n".join(found)


def _named(path: Path) -> set[str]:
    """The ``TBE_`` names a file mentions: in Python, in its strings and comments (not its identifiers)."""
    if path.suffix != ".py":
        return set(TOKEN.findall(path.read_text()))
    with path.open("rb") as f:
        return {m for tok in tokenize.tokenize(f.readline) if tok.type in (tokenize.STRING, tokenize.COMMENT)
                or tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1) for m in TOKEN.findall(tok.string)}


def test_every_variable_named_in_the_repository_is_registered():
    files = _python_files() + [REPO / "Makefile", REPO / "pyproject.toml"] + sorted(REPO.glob("*.md"))
    files += sorted((REPO / "docs").rglob("*.md")) if (REPO / "docs").is_dir() else []
    named = {m: p.relative_to(REPO) for p in files for m in _named(p)}
    missing = {name: str(where) for name, where in named.items() if name not in REGISTRY}
    assert missing == {}, "add these to tbe.env (name: a file naming it)"
    # the scan saw the variables the code reads, so it looks where they are named
    assert {"TBE_FUZZ_ALLOW_FAULTS", "TBE_WEAK_MEMORY_DELAY"} <= named.keys()


@pytest.mark.parametrize("var", list(REGISTRY.values()), ids=list(REGISTRY))
def test_every_variable_is_documented_and_its_default_reads(var, monkeypatch):
    assert len(var.doc.split()) >= 5, f"{var.name}: say in a line what it does"
    monkeypatch.delenv(var.name, raising=False)
    if var.kind is env.Kind.FLAG:
        assert var.default in ("0", "1") and var.flag() is (var.default == "1")
    elif var.kind is env.Kind.INT:
        assert var.integer() == int(var.default)
    elif var.kind is env.Kind.PATH:
        assert var.path() == (None if var.default is None else Path(var.default).expanduser())
    else:
        assert var.text() == var.default


def test_markdown_has_one_row_per_variable():
    lines = env.markdown().splitlines()
    assert len(lines) == 2 + len(REGISTRY)
    for line, var in zip(lines[2:], sorted(REGISTRY.values(), key=lambda v: v.name)):
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        assert cells[0] == f"`{var.name}`" and cells[1] == var.kind.value and cells[3] == var.doc


def test_flag_refuses_other_text_naming_the_variable(monkeypatch):
    for text, want in (("", False), ("0", False), ("1", True)):
        monkeypatch.setenv(WEAK_MEMORY.name, text)
        assert WEAK_MEMORY.flag() is want
    monkeypatch.setenv(WEAK_MEMORY.name, "yes")
    with pytest.raises(ValueError, match="TBE_WEAK_MEMORY must be 0 or 1, got 'yes'"):
        WEAK_MEMORY.flag()
    monkeypatch.setenv(WEAK_MEMORY_DELAY.name, "four")
    with pytest.raises(ValueError, match="TBE_WEAK_MEMORY_DELAY must be an integer, got 'four'"):
        WEAK_MEMORY_DELAY.integer()
    with pytest.raises(TypeError, match="TBE_WEAK_MEMORY_DELAY is read as integer, not as 0 or 1"):
        WEAK_MEMORY_DELAY.flag()


def test_scoped_restores_set_and_unset(monkeypatch):
    monkeypatch.delenv(FORCE_CRASH.name, raising=False)
    with FORCE_CRASH.scoped("exit:tables>=1"):
        assert FORCE_CRASH.raw() == "exit:tables>=1"
    assert FORCE_CRASH.raw() is None
    monkeypatch.setenv(FORCE_CRASH.name, "segv:bags>=2")
    with FORCE_CRASH.scoped(None):
        assert FORCE_CRASH.raw() is None
    assert FORCE_CRASH.raw() == "segv:bags>=2"


def _registered(path: Path) -> list[str]:
    """The variables a module registers (``register("NAME", ...)`` at its top level, ``register`` being
    ``tbe.env``'s: a planted fault's ``tbe.faults.register`` is another registry)."""
    tree = ast.parse(path.read_text())
    env_register = {"env.register"} | {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom)
                                      and n.module == "tbe.env" for a in n.names if a.name == "register"}
    if path == REPO / "tbe" / "env.py":  # where register is defined
        env_register.add("register")
    return [n.value.args[0].value for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
            and isinstance(n.value, ast.Call) and ast.unparse(n.value.func) in env_register]


def test_each_variable_is_registered_by_its_owner_and_every_owner_is_listed():
    """The owners list is whole (a module that registers a variable is in it), and the kernel package registers
    only what the kernels read: the driver's settings live with the driver."""
    by_owner = {".".join(p.relative_to(REPO).with_suffix("").parts): _registered(p) for p in _python_files()}
    by_owner = {owner: names for owner, names in by_owner.items() if names}
    assert set(by_owner) == set(ENV_OWNERS)
    assert sorted(n for names in by_owner.values() for n in names) == sorted(REGISTRY)
    assert by_owner["tbe.env"] == ["TBE_FUZZ_ALLOW_FAULTS"]
