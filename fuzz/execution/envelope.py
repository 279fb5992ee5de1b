"""What a case may cost, per kind of execution: the envelope a budget plans with and the timeouts it derives.

``timeout_for`` = floor + SLACK x ``expected_seconds``, where the expected cost is (per case + per lookup x
lookups + per bag x bags + per table x tables) x (steps + 1), with lookups, bags and tables from
``CaseRecord.size``. The terms are measured upper envelopes, one set per kind of execution
(``execution``), because the same case costs a thousand times more in Triton's interpreter than natively:

* ``interpreter``: the project's kernels under Triton's interpreter, over 80 drawn campaign cases (configs default
  and small, up to 2.3k lookups, 20 s) on 2 cores at load average 10. The floor covers a kernel's first run in a
  fresh worker (the interpreter builds each kernel lazily): a 3-table, 2-step case took 16 s there and 5-10 s
  afterwards at load average 8, within SLACK x expected (35 s) alone. A floor well under a quick campaign's
  budget is what lets a planted hang (``hang_narrow_long_run``) end as ``hang`` inside the self-test's time.
* ``device``: a SUT whose cases run on a GPU, after the warm-up, references on the device and vectorized over
  tables: a lookup twice and a half its 0.8 us (1.3M lookups/s, all of a case's time included), a case twice its
  50 ms, a table and a bag next to nothing (no pass is per table or per bag); the floor covers a worker's first
  case and, without build events, compiling. A worker that reports its kernel builds (``compile_events`` in its
  hello; Triton's JIT hooks) has the time they take added to its deadline, so its floor need not cover
  compiling: ``EVENTS_FLOOR_S`` (one build is credited for at most
  ``fuzz.execution.worker_process.BUILD_CREDIT_S``).
* ``cpu``: any other SUT on the CPU (torch, FBGEMM's CPU TBE, a user's), with the FP64 references beside it: over
  150 drawn cases of a quick campaign each (2 cores, one thread, up to 3.8k lookups, packs of 16 and single
  cases), the slowest took 0.08 s and the first 0.28-0.46 s; large cases take about 15 us a lookup
  (``benchmarks.check_cost --sut torch``). Envelope: a case 0.2 s, a lookup 40 us, a table 5 ms. Under the
  interpreter's envelope such a SUT's hang got a timeout of minutes, past the time a campaign lets a case run, so
  it was stopped for time instead of judged a hang.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

from fuzz.profiles import LIMITS, Execution, Limits
from cases import AnyCase
from tbe.backend import INTERPRETED

SLACK = 10.0
EVENTS_FLOOR_S = 20.0


@dataclasses.dataclass(frozen=True)
class Envelope:
    """Upper envelope of one kind of execution's cost (seconds per case, lookup, bag and table, each paid once
    per step and once for the forward), and the floor of its timeouts."""

    floor_s: float
    per_case_s: float
    per_lookup_s: float
    per_bag_s: float
    per_table_s: float

    def seconds(self, lookups: int, bags: int, tables: int, passes: int) -> float:
        return (self.per_case_s + self.per_lookup_s * lookups + self.per_bag_s * bags
                + self.per_table_s * tables) * passes


ENVELOPES: dict[Execution, Envelope] = {
    Execution.INTERPRETER: Envelope(floor_s=20.0, per_case_s=0.5, per_lookup_s=4.5e-3, per_bag_s=2.0e-2,
                                    per_table_s=0.2),
    Execution.DEVICE: Envelope(floor_s=180.0, per_case_s=0.1, per_lookup_s=2.0e-6, per_bag_s=2.0e-6, per_table_s=0.01),
    Execution.CPU: Envelope(floor_s=20.0, per_case_s=0.2, per_lookup_s=4.0e-5, per_bag_s=2.0e-6, per_table_s=5.0e-3),
}


@functools.lru_cache(maxsize=None)
def execution(sut: Optional[str] = None) -> Execution:
    """How ``sut``'s cases run on this machine: in Triton's interpreter (Triton kernels: the project's, TorchRec's),
    on a GPU, or natively on the CPU."""
    from fuzz.judge import draw_device
    from fuzz.sut import DEFAULT, get

    if INTERPRETED and get(sut or DEFAULT).capabilities.triton_kernels:
        return Execution.INTERPRETER
    return Execution.DEVICE if draw_device(sut).type == "cuda" else Execution.CPU


def envelope(sut: Optional[str] = None) -> Envelope:
    return ENVELOPES[execution(sut)]


def limits(sut: Optional[str] = None) -> Limits:
    """How big one drawn example of ``sut`` may be here (``fuzz.profiles.LIMITS``)."""
    return LIMITS[execution(sut)]


def expected_seconds(case: AnyCase, steps: bool = True, sut: Optional[str] = None) -> float:
    """The measured upper envelope of the case's cost under ``sut`` (no floor, no slack): what a budget plans
    with."""
    tables, bags, lookups = case.size()
    n_steps = getattr(getattr(case, "spec", case), "steps", 1) if steps else 0
    return envelope(sut).seconds(lookups, bags, tables, n_steps + 1)


def timeout_for(case: AnyCase, steps: bool = True, scale: float = 1.0, compile_events: bool = False,
                sut: Optional[str] = None) -> float:
    """Seconds a case may run; ``compile_events``: its worker reports builds, which its deadline then excludes."""
    floor = EVENTS_FLOOR_S if compile_events else envelope(sut).floor_s
    return scale * (floor + SLACK * expected_seconds(case, steps, sut))


def stall_for(case: AnyCase, steps: bool = True, scale: float = 1.0, sut: Optional[str] = None) -> float:
    """Seconds one interpreter program of the case may run (``fuzz.execution.stall``): the floor and the whole
    case's envelope once, where the case as a whole gets ten times it; at most the case's own timeout."""
    return min(timeout_for(case, steps, scale, sut=sut),
               scale * (envelope(sut).floor_s + expected_seconds(case, steps, sut)))
