"""Hypothesis profiles and per-backend size budgets, shared by the test suite and the CLI.

``ci`` is derandomized and sized so the whole suite stays under about 20 minutes on two
CPU cores running the Triton interpreter (about 20k looked-up ids per second); ``dev``
is the default for local runs; ``nightly`` searches far longer; ``smoke`` draws one example
per property test (``HYPOTHESIS_PROFILE=smoke pytest -m fuzz``: does every fuzz test still run?).
Importing this module changes no Hypothesis setting: ``load()`` (called by tests/conftest.py and the
CLI) registers the profiles and loads the one ``$HYPOTHESIS_PROFILE`` names.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from tbe.backend import INTERPRETED
from tbe.env import HYPOTHESIS_PROFILE

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]

# profile name -> (its settings, the scale of example counts: each test states its CI count; smoke keeps one)
PROFILES: dict[str, tuple[dict, float]] = {
    "ci": (dict(derandomize=True, deadline=None, print_blob=True, suppress_health_check=_SLOW_OK, database=None),
           1.0),
    "dev": (dict(deadline=None, print_blob=True, suppress_health_check=_SLOW_OK), 2.0),
    "smoke": (dict(max_examples=1, derandomize=True, deadline=None, print_blob=True, suppress_health_check=_SLOW_OK,
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
    """The max_examples for a test whose measured CI budget is ``ci_count`` examples."""
    return max(1, int(ci_count * PROFILES[name()][1]))


# Largest batch (looked-up ids) one example may draw: interpreter cost bounds CPU runs.
MAX_LOOKUPS = 4_000 if INTERPRETED else 12_000_000

# Sub-cases one drawn example may hold (``strategies.pack``): on a GPU a case's Python (drawing aside) is paid
# once per pack, not per case; the interpreter's cost grows with the batch, so there a pack saves little.
GPU_PACK = 16
PACK = 1 if INTERPRETED else GPU_PACK

# Column blocks one row may span under the drawn config (``strategies.adversarial.fuzz_cases``):
# the interpreter's cost per lookup grows with them; under the 4-wide ``narrow`` config a row of
# D in the hundreds made one example cost 4 s on two cores, most of a dev run's time.
MAX_COLUMN_BLOCKS = 16 if INTERPRETED else None

# Long-tier chunks one campaign example may need (``strategies.space.plain_cases`` caps its lookups at this many
# chunks of the drawn config): each chunk is an interpreter program per column block, and a one-row table
# read 1,873 times under the 2-lookup chunks of the fused-tier profile took 26 s a step, 82 s for its
# three steps, a whole quick budget of the search alone. None: no cap.
MAX_CHUNKS = 150 if INTERPRETED else None

# Lookups times column blocks times steps one general campaign example may hold (``strategies.space.within_work``):
# under the 4-wide buckets of the narrow profile a row of 142 columns is 36 blocks, and 2,306 such lookups cost
# 70 s over two steps. At this cap an example costs a few seconds in all. None: no cap.
MAX_WORK = 4_000 if INTERPRETED else None

# Distinct rows (runs) one example's background may touch: the interpreter's short backward
# tier costs about 2 ms per run, so CPU examples keep most lookups in a few hot runs.
MAX_RUNS = 300 if INTERPRETED else 4_000_000

# Bags and tables one example may draw: each bag is a forward program per column block and each table
# a few launches per step, and under the 4-wide ``narrow`` config a 64-table, 256-bag, two-step example
# cost 27 s on the interpreter (the CI fuzz test's examples then ranged from 0.1 to 27 s). None: the
# strategy's own caps (its background runs; 64 tables).
MAX_BAGS = 64 if INTERPRETED else None
MAX_TABLES = 16 if INTERPRETED else 64
