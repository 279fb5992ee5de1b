"""Faces that import on first use: a subpackage's ``__init__`` names what it exports and where it lives.

A face that imported its modules eagerly would pull torch and Triton into every import of the
subpackage (the test session imports ``fuzz.execution.gpu_pin`` before torch may start CUDA, and the
CLI parses its arguments before loading kernels); PEP 562's module ``__getattr__`` defers each name.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any, Callable


def face(package: str, exports: dict[str, tuple[str, ...]]) -> tuple[list[str], Callable[[str], Any],
                                                                     Callable[[], list[str]]]:
    """``(__all__, __getattr__, __dir__)`` for ``package``, whose ``exports`` map a submodule (relative,
    ``".search"``) to the names it gives the face. A name resolves on every use, from the module that defines
    it, so a test that patches that module reaches callers that import the name through the face."""
    where = {name: module for module, names in exports.items() for name in names}
    if len(where) != sum(len(names) for names in exports.values()):
        raise ValueError(f"{package}: a name is exported twice")
    for name in where:  # the import system sets a submodule's name on its package, which would replace it
        if importlib.util.find_spec(f"{package}.{name}") is not None:
            raise ValueError(f"{package}: {name!r} is also a submodule's name")

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(where[name], package), name)

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return list(where), __getattr__, __dir__
