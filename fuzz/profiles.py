"""Hypothesis profiles and each kind of execution's size limits on a drawn example, for the test suite and the CLI.

``ci`` is derandomized and sized so the whole suite stays under about 20 minutes on two
CPU cores running the Triton interpreter (about 20k looked-up ids per second); ``dev``
is the default for local runs; ``nightly`` searches far longer; ``smoke`` runs two examples per
property test, the simplest and one drawn (``HYPOTHESIS_PROFILE=smoke pytest -m fuzz``: does every fuzz
test still run, on a case with something in it?).
Importing this module changes no Hypothesis setting: ``load()`` (called by tests/conftest.py and the
CLI) registers the profiles and loads the one ``$HYPOTHESIS_PROFILE`` names.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Optional

from hypothesis import HealthCheck, settings

from tbe.backend import INTERPRETED
from tbe.env import Kind, register

HYPOTHESIS_PROFILE = register(
    "HYPOTHESIS_PROFILE", Kind.TEXT, "dev",
    "the Hypothesis profile the test suite and the CLI load, by name (registered in fuzz.profiles)")

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]

SMOKE_EXAMPLES = 2  # Hypothesis runs the simplest example first (an empty batch): smoke adds one drawn example
# profile name -> (its settings, the scale of example counts: each test states its CI count; smoke: SMOKE_EXAMPLES)
PROFILES: dict[str, tuple[dict, float]] = {
    "ci": (dict(derandomize=True, deadline=None, print_blob=True, suppress_health_check=_SLOW_OK, database=None),
           1.0),
    "dev": (dict(deadline=None, print_blob=True, suppress_health_check=_SLOW_OK), 2.0),
    "smoke": (dict(max_examples=SMOKE_EXAMPLES, derandomize=True, deadline=None, print_blob=True, suppress_health_check=_SLOW_OK,
                   database=None), 0.0),
    "nightly": (dict(max_examples=2000, deadline=None, print_blob=True, suppress_health_check=_SLOW_OK), 20.0),
}


def name() -> str:
    """The profile ``$HYPOTHESIS_PROFILE`` names (``dev`` when unset); ValueError for an unknown one."""
    value = HYPOTHESIS_PROFILE.text()
    if value not in PROFILES:
        raise ValueError(f"{HYPOTHESIS_PROFILE.name} must be one of {', '.join(PROFILES)}, got {value!r}")
    return value


def load() -> str:
    """Register every profile with Hypothesis and load the named one; returns its name."""
    for profile, (kwargs, _) in PROFILES.items():
        settings.register_profile(profile, **kwargs)
    chosen = name()
    settings.load_profile(chosen)
    return chosen


def examples(ci_count: int) -> int:
    """The max_examples for a test whose measured CI budget is ``ci_count`` examples (smoke: SMOKE_EXAMPLES)."""
    scale = PROFILES[name()][1]
    return SMOKE_EXAMPLES if scale == 0 else max(1, int(ci_count * scale))


class Execution(enum.StrEnum):
    """How a SUT's cases run on this machine (``fuzz.execution.envelope.execution`` says which): the project's
    kernels in Triton's interpreter, anything on a GPU, or a SUT that runs natively on the CPU."""

    INTERPRETER = "interpreter"
    DEVICE = "device"
    CPU = "cpu"


@dataclasses.dataclass(frozen=True)
class Limits:
    """How big one drawn campaign example may be under one kind of execution (None: no cap).

    * ``max_lookups``: looked-up ids, all its sub-cases together.
    * ``pack``: sub-cases one example may hold (``strategies.pack``). On a GPU, and natively on the CPU, a case's
      Python (drawing aside) is paid once per pack; in the interpreter the cost grows with the batch, so a pack
      saves little there.
    * ``max_column_blocks``: column blocks one row may span under the drawn config; the interpreter's cost per
      lookup grows with them (a row of D in the hundreds under the 4-wide ``narrow`` config: 4 s an example).
    * ``max_chunks``: long-tier chunks of the drawn config (``strategies.space.plain_cases``); each is an
      interpreter program per column block (a one-row table read 1,873 times in 2-lookup chunks: 82 s).
    * ``max_work``: lookups times column blocks times steps of a general case (``strategies.space.within_work``).

    Natively on the CPU the FP64 references cost most of a case, about 27 us a lookup on one thread
    (``benchmarks.check_cost --sut torch --large``): 160k lookups keep the largest case near 4 s and hold a
    segment or a batch past 2^16 positions.
    """

    max_lookups: int
    pack: int
    max_column_blocks: Optional[int] = None
    max_chunks: Optional[int] = None
    max_work: Optional[int] = None


GPU_PACK = 16
LIMITS: dict[Execution, Limits] = {
    Execution.INTERPRETER: Limits(max_lookups=4_000, pack=1, max_column_blocks=16, max_chunks=150, max_work=4_000),
    Execution.DEVICE: Limits(max_lookups=12_000_000, pack=GPU_PACK),
    Execution.CPU: Limits(max_lookups=160_000, pack=GPU_PACK),
}

# the project's own kernels on this machine (the test suite, the gate and the self-test draw for them)
PROJECT = LIMITS[Execution.INTERPRETER if INTERPRETED else Execution.DEVICE]
MAX_LOOKUPS = PROJECT.max_lookups
MAX_COLUMN_BLOCKS = PROJECT.max_column_blocks
MAX_CHUNKS = PROJECT.max_chunks
MAX_WORK = PROJECT.max_work

# Distinct rows (runs) one example's background may touch: the interpreter's short backward
# tier costs about 2 ms per run, so CPU examples keep most lookups in a few hot runs.
MAX_RUNS = 300 if INTERPRETED else 4_000_000

# Bags and tables one example may draw: each bag is a forward program per column block and each table
# a few launches per step, and under the 4-wide ``narrow`` config a 64-table, 256-bag, two-step example
# cost 27 s on the interpreter (the CI fuzz test's examples then ranged from 0.1 to 27 s). None: the
# strategy's own caps (its background runs; 64 tables).
MAX_BAGS = 64 if INTERPRETED else None
MAX_TABLES = 16 if INTERPRETED else 64
