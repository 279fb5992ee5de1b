"""A supervisor stand-in for driver tests: it records each case and passes it at once, its tiers and coverage
cells taken from the materialized case as a real run's are, so only the driver's bookkeeping is under test."""

from __future__ import annotations

from fuzz.judge.check import case_result
from cases import tensors


class PassingSupervisor:
    environment: dict = {}

    def __init__(self) -> None:
        self.cases: list = []

    def run(self, case, config, pending=None, **options):
        self.cases.append((case, config))
        return case_result(case, tensors(case, weights=False), config, 0.0, None, None, [])
