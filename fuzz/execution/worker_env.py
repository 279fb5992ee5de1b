"""The variables a supervised worker reads once its imports are done (a module of their own: the worker's
first lines import nothing of ``tbe``, so that its start-up can be timed and started early)."""

from __future__ import annotations

from tbe.env import Kind, register

WORKER_PROFILE = register(
    "TBE_FUZZ_WORKER_PROFILE", Kind.PATH, None,
    "a directory: each supervised worker writes a cProfile of the cases it ran there")
