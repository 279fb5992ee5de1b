"""A Triton table-batched embedding (TBE): pooled forward, exact-optimizer backward."""

from tbe import backend  # noqa: F401  (must run before any kernel module is imported)
from tbe.bounds_check import BoundsCheckError
from tbe.config import KernelConfig
from tbe.layout import TableLayout, TableSpec
from tbe.modes import BoundsCheckMode, Optimizer, Pooling
from tbe.module import TritonTBE

__all__ = [
    "BoundsCheckError", "BoundsCheckMode", "KernelConfig", "Optimizer", "Pooling",
    "TableLayout", "TableSpec", "TritonTBE",
]
