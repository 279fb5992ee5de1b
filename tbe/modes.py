"""Enumerations shared by kernels, oracles and strategies: pooling, optimizer, bounds check, and the dtypes.

StrEnums: a member equals, hashes and prints as its value, so a case holds members and its JSON their names."""

from __future__ import annotations

import enum

import torch


class _Mode(enum.StrEnum):
    """A mode's member reads as its value: equal to it, hashed, printed and repr'd like it (case JSON and messages
    show ``'mean'``, not the member)."""

    def __repr__(self) -> str:
        return repr(self.value)


class Pooling(_Mode):
    SUM = "sum"
    MEAN = "mean"


class Optimizer(_Mode):
    EXACT_SGD = "exact_sgd"
    EXACT_ROWWISE_ADAGRAD = "exact_rowwise_adagrad"


class BoundsCheckMode(_Mode):
    """FBGEMM's BoundsCheckMode: FATAL raises, WARNING repairs and counts, IGNORE repairs, NONE trusts."""

    FATAL = "fatal"
    WARNING = "warning"
    IGNORE = "ignore"
    NONE = "none"


class FloatDtype(_Mode):
    """A weights or output dtype as cases, SUTs and reports name it; ``torch`` is the tensor dtype."""

    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"

    @property
    def torch(self) -> torch.dtype:
        return _TORCH[self]


class IndexDtype(_Mode):
    """An indices and offsets dtype as cases name it; ``torch`` is the tensor dtype."""

    INT32 = "int32"
    INT64 = "int64"

    @property
    def torch(self) -> torch.dtype:
        return _TORCH[self]


_TORCH = {FloatDtype.FP32: torch.float32, FloatDtype.FP16: torch.float16, FloatDtype.BF16: torch.bfloat16,
          IndexDtype.INT32: torch.int32, IndexDtype.INT64: torch.int64}
FLOAT_DTYPES = tuple(d.torch for d in FloatDtype)
INDEX_DTYPES = tuple(d.torch for d in IndexDtype)

_DTYPE_NAMES = {
    "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
}


def parse_enum(cls: type[enum.Enum], field: str, value: object) -> enum.Enum:
    """Accept an enum member or its name/value (case-insensitive); ValueError names the field."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        for member in cls:
            if value.lower() in (member.value, member.name.lower()):
                return member
    choices = [m.value for m in cls]
    raise ValueError(f"{field} must be one of {choices}, got {value!r}")


def _parse_dtype(field: str, value: object, by_name: dict[str, torch.dtype]) -> torch.dtype:
    """A dtype, or a name ``by_name`` knows (case-insensitive); ValueError names the field and the choices."""
    if isinstance(value, torch.dtype) and value in by_name.values():
        return value
    if isinstance(value, str) and value.lower() in by_name:
        return by_name[value.lower()]
    choices = ", ".join(dict.fromkeys(dtype_name(d) for d in by_name.values()))
    raise ValueError(f"{field} must be one of {choices}, got {value!r}")


def parse_float_dtype(field: str, value: object) -> torch.dtype:
    return _parse_dtype(field, value, _DTYPE_NAMES)


def dtype_name(dtype: torch.dtype) -> str:
    return _NAMES[dtype]


_NAMES = {d.torch: d for d in (*FloatDtype, *IndexDtype)}


def parse_index_dtype(field: str, value: object) -> torch.dtype:
    return _parse_dtype(field, value, {d.value: d.torch for d in IndexDtype})


def float_dtype(field: str, value: object) -> FloatDtype:
    """A ``FloatDtype`` from a member, a torch dtype or any name ``parse_float_dtype`` knows; ValueError names
    the field."""
    return _NAMES[parse_float_dtype(field, value)]


def index_dtype(field: str, value: object) -> IndexDtype:
    """An ``IndexDtype`` from a member, a torch dtype or its name; ValueError names the field."""
    return _NAMES[parse_index_dtype(field, value)]
