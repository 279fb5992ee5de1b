"""Failures on purpose, for testing supervision: a worker told ``TBE_FUZZ_FORCE_CRASH=<how>:<measure>>=<n>``
fails that way on every case whose measure reaches n, and runs the others normally.

``how``: segv (the worker sends itself SIGSEGV), abort (``os.abort()``, as glibc does on heap
corruption), exit (``os._exit(3)``), hang (sleeps past any timeout), cuda (raises the error text a CUDA
illegal memory access gives, to test that path without a GPU), ima (a Triton kernel stores 1 TiB past
a tensor: a real illegal memory access on a GPU, a sanitizer finding or a SIGSEGV in the interpreter). ``measure``: lookups, tables or bags of the materialized case, so shrinking has a
threshold to find (``segv:lookups>=20`` shrinks to a case of exactly 20 lookups). Like planted faults it
is refused unless ``TBE_FUZZ_ALLOW_FAULTS=1``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import time
from typing import Optional

import torch
import triton
import triton.language as tl

from tbe.env import ALLOW_FAULTS, Kind, register

FORCE_CRASH = register(
    "TBE_FUZZ_FORCE_CRASH", Kind.TEXT, None,
    "HOW:MEASURE>=N makes supervised workers fail on purpose on large enough cases, to test "
    "supervision (fuzz.execution.forced_crash); needs TBE_FUZZ_ALLOW_FAULTS=1")

HOW = ("segv", "abort", "exit", "hang", "cuda", "ima")
MEASURES = ("lookups", "tables", "bags")


@dataclasses.dataclass(frozen=True)
class ForcedCrash:
    how: str
    measure: str
    at_least: int

    def __str__(self) -> str:
        return f"{self.how}:{self.measure}>={self.at_least}"

    def matches(self, num_tables: int, batch_size: int, lookups: int) -> bool:
        value = {"lookups": lookups, "tables": num_tables, "bags": num_tables * batch_size}[self.measure]
        return value >= self.at_least

    def fire(self, device: torch.device) -> None:
        """Fail as told (returns only for ``ima`` on a backend where the wild store raises nothing)."""
        if self.how == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif self.how == "abort":
            os.abort()
        elif self.how == "exit":
            os._exit(3)
        elif self.how == "hang":
            while True:
                time.sleep(3600)
        elif self.how == "cuda":
            error = getattr(torch, "AcceleratorError", RuntimeError)  # what torch raises for a CUDA error
            raise error(f"CUDA error: an illegal memory access was encountered (forced by {FORCE_CRASH.name})")
        x = torch.zeros(1, device=device)
        _wild_store[(1,)](x)
        x.cpu()  # on a GPU the error surfaces at the next synchronization


def parse(text: Optional[str]) -> Optional[ForcedCrash]:
    """``how:measure>=n`` -> ForcedCrash; empty -> None; anything else -> ValueError naming the variable."""
    if not text:
        return None
    m = re.fullmatch(r"\s*(\w+)\s*:\s*(\w+)\s*>=\s*(\d+)\s*", text)
    if m is None or m.group(1) not in HOW or m.group(2) not in MEASURES:
        raise ValueError(f"{FORCE_CRASH.name} must look like <how>:<measure>>=<n> with how in {HOW} and measure "
                         f"in {MEASURES}, got {text!r}")
    return ForcedCrash(m.group(1), m.group(2), int(m.group(3)))


def from_env() -> Optional[ForcedCrash]:
    forced = parse(FORCE_CRASH.raw())
    if forced is not None:
        from tbe import faults

        if not faults.allowed():
            raise ValueError(f"{FORCE_CRASH.name}={FORCE_CRASH.raw()!r} makes workers fail on purpose and is "
                             f"refused outside tests (set {ALLOW_FAULTS.name}=1 to opt in)")
    return forced


@triton.jit
def _wild_store(x_ptr):
    tl.store(x_ptr + (1 << 38), 1.0)  # 2^38 fp32 elements = 1 TiB past the tensor
