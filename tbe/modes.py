"""Enumerations shared by kernels, oracles and strategies: pooling, optimizer, bounds check.

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


FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int32, torch.int64)

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
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
            torch.int32: "int32", torch.int64: "int64"}[dtype]


FLOAT_NAMES = tuple(dtype_name(d) for d in FLOAT_DTYPES)  # ("fp32", "fp16", "bf16"): as cases and SUTs name them
INDEX_BY_NAME = {dtype_name(d): d for d in INDEX_DTYPES}  # {"int32": torch.int32, "int64": torch.int64}


def parse_index_dtype(field: str, value: object) -> torch.dtype:
    return _parse_dtype(field, value, INDEX_BY_NAME)
