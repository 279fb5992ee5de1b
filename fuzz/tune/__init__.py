"""Tuning: a search over KernelConfig fields (the space, warm tiny shapes) whose every candidate goes
through the gate's cascade, and the report of what was tried and kept."""

from fuzz.lazy import face

__all__, __getattr__, __dir__ = face(__name__, {
    ".space": ("searched_fields",),
})
