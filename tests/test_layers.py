"""The layers, tested: no import (module-level or inside a function) runs up a layer or sideways between peers.

Top level: ``tbe`` < ``cases`` < ``oracles``, ``strategies`` (``cases``, ``oracles`` and ``strategies`` see only
``tbe``'s data types, never a kernel) < ``fuzz`` < ``benchmarks`` < ``tests``. Inside ``fuzz`` the order is ``FUZZ_LAYERS`` (the table in
``fuzz/__init__``'s docstring). A module may import anything of its own unit and of lower layers; a unit
of the same layer is a peer and out of bounds too. A new unit must be placed in the table before it is used.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
from pathlib import Path
from typing import Optional

import pytest
from tests.paths import REPO


# lowest first; units on one line are peers
TOP_LAYERS = (("tbe",), ("cases",), ("oracles", "strategies"), ("fuzz",), ("benchmarks",), ("tests",))
FUZZ_LAYERS = (
    ("fuzz", "fuzz.errors", "fuzz.lazy"),  # ``fuzz`` itself: the package's face, which imports nothing of it
    ("fuzz.status", "fuzz.profiles", "fuzz.time_split", "fuzz.glossary"),
    ("fuzz.budgets",),
    ("fuzz.sut",),
    ("fuzz.compile",),
    ("fuzz.memcheck",),
    ("fuzz.judge",),
    ("fuzz.execution",),
    ("fuzz.campaign",),
    ("fuzz.gate", "fuzz.selftest", "fuzz.mutate"),
    ("fuzz.tune",),
    ("fuzz.cli",),
    ("fuzz.__main__",),
)
LAYERS = {"top": TOP_LAYERS, "fuzz": FUZZ_LAYERS}
# the tbe modules cases, oracles and strategies may use: data types, pure rules and the seeded draws, no kernel
DATA_MODULES = frozenset({"tbe.config", "tbe.layout", "tbe.modes", "tbe.faults", "tbe.backend", "tbe.env",
                      "tbe.routing", "tbe.buckets", "tbe.draws"})
PACKAGES = tuple(unit for layer in TOP_LAYERS for unit in layer)


@dataclasses.dataclass(frozen=True)
class Edge:
    source: str   # the importing module
    target: str   # the imported module
    line: int
    name: Optional[str] = None  # the name taken from ``target`` (``from target import name``), if any

    def __str__(self) -> str:
        what = self.target + (f" ({self.name})" if self.name else "")
        return f"{self.source}:{self.line} imports {what}"


def _is_module(name: str) -> bool:
    path = REPO.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def edges_of(module: str, source: str, is_package: bool = False) -> list[Edge]:
    """Every import of the project's packages in ``source`` (module ``module``), at any depth."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [Edge(module, a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.append(Edge(module, sub, node.lineno) if _is_module(sub) else
                           Edge(module, target, node.lineno, a.name))
    return [e for e in out if e.target.split(".")[0] in PACKAGES]


def repo_edges() -> list[Edge]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            out += edges_of(module_name(path), path.read_text(), path.name == "__init__.py")
    return out


def _face_sources(package: str) -> dict[str, str]:
    """Name -> the module a package's ``__init__`` takes it from (``from tbe.config import KernelConfig``)."""
    tree = ast.parse((REPO / package / "__init__.py").read_text())
    return {a.asname or a.name: n.module for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.module for a in n.names}


def _layer_of(unit: str, layers: tuple[tuple[str, ...], ...]) -> Optional[int]:
    return next((i for i, layer in enumerate(layers) if unit in layer), None)


def _fuzz_unit(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def violations(edges: list[Edge]) -> list[str]:
    """Why each edge that runs up a layer, sideways to a peer, or into a tbe kernel is out of bounds."""
    tbe_face = _face_sources("tbe")
    out = []
    for e in edges:
        src_top, dst_top = e.source.split(".")[0], e.target.split(".")[0]
        if src_top != dst_top:
            s, d = _layer_of(src_top, TOP_LAYERS), _layer_of(dst_top, TOP_LAYERS)
            if d >= s:
                out.append(f"{e}: {dst_top} is {'a peer of' if d == s else 'above'} {src_top}")
            elif src_top in ("cases", "oracles", "strategies") and dst_top == "tbe":
                resolved = tbe_face.get(e.name, "tbe") if e.target == "tbe" else e.target
                if resolved not in DATA_MODULES:
                    out.append(f"{e}: {resolved} is not one of tbe's data types ({', '.join(sorted(DATA_MODULES))})")
        elif src_top == "fuzz":
            su, du = _fuzz_unit(e.source), _fuzz_unit(e.target)
            if su == du:
                continue
            s, d = _layer_of(su, FUZZ_LAYERS), _layer_of(du, FUZZ_LAYERS)
            if s is None or d is None:
                out.append(f"{e}: place {su if s is None else du} in FUZZ_LAYERS")
            elif d >= s:
                out.append(f"{e}: {du} is {'a peer of' if d == s else 'above'} {su}")
    return out


def test_no_import_runs_up_a_layer():
    edges = repo_edges()
    assert len(edges) > 500, "the scan should see the project's imports"
    assert violations(edges) == []


def test_every_fuzz_unit_is_placed():
    units = {_fuzz_unit(module_name(p)) for p in (REPO / "fuzz").rglob("*.py")}
    placed = {u for layer in FUZZ_LAYERS for u in layer}
    assert units - placed == set()


def test_the_fuzz_docstring_lists_the_layers_in_order():
    import fuzz

    lines = [line for line in fuzz.__doc__.splitlines() if line.strip().startswith("|")][2:]
    listed = [tuple(u.strip().strip("`") for u in line.split("|")[2].split(",")) for line in lines]
    assert [tuple(sorted(x)) for x in listed] == [tuple(sorted(x)) for x in FUZZ_LAYERS]


@pytest.mark.parametrize("source, target, why", [
    ("fuzz.judge.check", "fuzz.campaign.search", "above"),
    ("fuzz.gate.cascade", "fuzz.selftest.run", "a peer of"),
    ("fuzz.sut.fit", "fuzz.cli", "above"),
    ("tbe.forward", "oracles.reference", "above"),
    ("oracles.reference", "strategies.space", "a peer of"),
    ("cases.spec", "strategies.space", "above"),
    ("cases.batch", "oracles.reference", "above"),
    ("fuzz.profiles", "fuzz.budgets", "above"),
    ("fuzz.judge.check", "fuzz.newthing", "place fuzz.newthing"),
])
def test_an_upward_edge_is_caught(source, target, why):
    found = violations([Edge(source, target, 1)])
    assert len(found) == 1 and why in found[0]


def test_cases_oracles_and_strategies_see_only_tbe_data_types():
    assert violations([Edge("strategies.space", "tbe", 1, "KernelConfig"), Edge("oracles.reference", "tbe.layout", 1),
                       Edge("cases.batch", "tbe.layout", 1)]) == []
    found = violations([Edge("strategies.tour", "tbe", 1, "TritonTBE"), Edge("oracles.checks", "tbe.forward", 1),
                        Edge("cases.spec", "tbe.forward", 1)])
    assert len(found) == 3 and all("not one of tbe's data types" in f for f in found)


def test_imports_inside_functions_and_relative_imports_are_seen():
    source = "def f():\n    from fuzz.campaign.search import CampaignRunner\n\nfrom .check import CaseResult\n"
    edges = edges_of("fuzz.judge.differential", source)
    assert {(e.target, e.name) for e in edges} == {("fuzz.campaign.search", "CampaignRunner"),
                                                   ("fuzz.judge.check", "CaseResult")}
    assert len(violations(edges)) == 1


FACES = sorted(u for layer in FUZZ_LAYERS for u in layer
               if u != "fuzz" and (REPO / u.replace(".", "/") / "__init__.py").is_file())


@pytest.mark.parametrize("face", FACES)
def test_every_subpackage_has_a_face(face):
    """A docstring that says what the subpackage holds, and ``__all__`` naming only what it can give."""
    module = importlib.import_module(face)
    assert module.__doc__ and len(module.__doc__.split()) >= 12, f"{face}: say what the subpackage holds"
    assert module.__all__, f"{face}: name what other units may use"
    for name in module.__all__:
        value = getattr(module, name)  # AttributeError: the face lists a name its module lacks
        if inspect.isclass(value) or inspect.isfunction(value):
            assert _fuzz_unit(value.__module__) == face, f"{face}.{name} comes from {value.__module__}"


def test_the_sut_boundary_knows_cases_not_how_they_are_drawn():
    """``fuzz.sut`` (where a SUT plugs in) takes cases from ``cases``; nothing there imports ``strategies``."""
    drawn = [e for e in repo_edges() if e.source.startswith("fuzz.sut") and e.target.split(".")[0] == "strategies"]
    assert drawn == []


def test_fuzz_units_reach_each_other_through_their_faces():
    """Between two units of ``fuzz`` an import names the unit (``from fuzz.judge import CaseResult``), never a
    module behind its face, so what a unit gives others is what its ``__init__`` lists."""
    behind = [str(e) for e in repo_edges() if e.source.startswith("fuzz.") and e.target.startswith("fuzz.")
              and _fuzz_unit(e.source) != _fuzz_unit(e.target) and e.name is not None
              and e.target != _fuzz_unit(e.target)]
    assert behind == []


# about the repository or the test suite as a whole, so they sit at the top of tests/
WHOLE_REPO_TESTS = frozenset({"test_docs.py", "test_layers.py", "test_min_examples.py"})


def test_tests_mirror_the_packages():
    """A package's tests live under the same path below tests/ (``fuzz/campaign`` in ``tests/fuzz/campaign``)."""
    misplaced = []
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        folder = path.parent.relative_to(REPO / "tests")
        if folder == Path("."):
            if path.name not in WHOLE_REPO_TESTS:
                misplaced.append(f"{path.name}: at the top of tests/, but not about the whole repository")
        elif not (REPO / folder / "__init__.py").is_file():
            misplaced.append(f"tests/{folder}/{path.name}: {folder} is no package of the project")
    assert not misplaced, "\n".join(misplaced)
