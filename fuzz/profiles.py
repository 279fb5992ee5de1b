"""Hypothesis profiles and per-backend size budgets, shared by the test suite and the CLI.

``ci`` is derandomized and sized so the whole suite stays under about 20 minutes on two
CPU cores running the Triton interpreter (about 20k looked-up ids per second); ``dev``
is the default for local runs; ``nightly`` searches far longer; ``smoke`` draws one example
per property test (``HYPOTHESIS_PROFILE=smoke pytest -m fuzz``: does every fuzz test still run?).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

from tbe.backend import INTERPRETED

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile(
    "ci", derandomize=True, deadline=None, print_blob=True, suppress_health_check=_SLOW_OK, database=None,
)
settings.register_profile("dev", deadline=None, print_blob=True, suppress_health_check=_SLOW_OK)
settings.register_profile(
    "smoke", max_examples=1, derandomize=True, deadline=None, print_blob=True, suppress_health_check=_SLOW_OK,
    database=None,
)
settings.register_profile(
    "nightly", max_examples=2000, deadline=None, print_blob=True, suppress_health_check=_SLOW_OK,
)

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")
if PROFILE not in ("ci", "dev", "nightly", "smoke"):
    raise ValueError(f"HYPOTHESIS_PROFILE must be ci, dev, nightly or smoke, got {PROFILE!r}")
settings.load_profile(PROFILE)

# Scale of example counts: each test states its CI count; dev doubles it, nightly x20, smoke keeps one.
_SCALE = {"ci": 1.0, "dev": 2.0, "nightly": 20.0, "smoke": 0.0}[PROFILE]


def examples(ci_count: int) -> int:
    """The max_examples for a test whose measured CI budget is ``ci_count`` examples."""
    return max(1, int(ci_count * _SCALE))


# Largest batch (looked-up ids) one example may draw: interpreter cost bounds CPU runs.
MAX_LOOKUPS = 4_000 if INTERPRETED else 12_000_000

# Column blocks one row may span under the drawn config (``strategies.adversarial.fuzz_cases``):
# the interpreter's cost per lookup grows with them; under the 4-wide ``narrow`` config a row of
# D in the hundreds made one example cost 4 s on two cores, most of a dev run's time.
MAX_COLUMN_BLOCKS = 16 if INTERPRETED else None

# Distinct rows (runs) one example's background may touch: the interpreter's short backward
# tier costs about 2 ms per run, so CPU examples keep most lookups in a few hot runs.
MAX_RUNS = 300 if INTERPRETED else 4_000_000
