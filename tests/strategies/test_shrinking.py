"""With each planted fault on, a failing example of its fuzz property shrinks to a small,
readable case: at most 2 tables and 8 bags (exceptions in NEEDS_MORE, with why), and the shrunk
case passes once the fault is off. The shrunk cases are printed (``-s``).

The adversarial strategy runs here at a smaller budget (SHRINK_CASES) than in the fuzz test:
the same strategy, but each of the hundreds of shrink steps costs a fraction of a second.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, Phase, find, settings

from strategies.adversarial import FuzzCase, fuzz_cases
from strategies.int32_edges import Int32EdgeSpec
from tests.strategies.test_planted_faults import (  # noqa: F401 (_artifacts_in_tmp: autouse fixture)
    ADVERSARIAL, MULTI_STEP, MULTI_STEP_ADAGRAD, PROPERTIES, _artifacts_in_tmp, fault_params, multi_step_adagrad)

MAX_TABLES, MAX_BAGS = 2, 8
# fault -> (tables, bags) it may shrink to, and why more than 2 tables / 8 bags
NEEDS_MORE: dict[str, tuple[int, int, str]] = {
    # one fp16 row read a few times fails; but removing a table re-draws every value from the
    # seed, so the shrinker stops at 3 one-row tables x 2 bags (1 table x 1 bag at the CI budget)
    "accumulate_in_weight_dtype": (3, 8, "shrinker local minimum: removing a table re-draws all values"),
    # two Adagrad steps of one-row tables fail; Hypothesis's five-minute shrink limit ends the search at
    # 8 such tables x 1 bag (each removal re-draws all values and most re-draws pass)
    "momentum_low_precision": (8, 8, "shrink time limit: removing a table re-draws all values"),
}
# shrinks that take most of a minute or more on two cores: nightly (make test-nightly)
SLOW_SHRINKS = frozenset({"momentum_low_precision", "fused_workspace_uninitialized"})
SHRINK = settings(max_examples=300, phases=[Phase.generate, Phase.shrink], database=None, derandomize=True,
                  deadline=None, suppress_health_check=list(HealthCheck), print_blob=False)


def size(x) -> tuple[int, int, str]:
    """(tables, bags, readable JSON) of a drawn case of any of the fault properties."""
    if isinstance(x, FuzzCase):
        return x.spec.num_tables, x.spec.num_tables * x.spec.batch_size, x.to_json()
    if isinstance(x, Int32EdgeSpec):
        return len(x.rows), len(x.bag_ids), x.to_json()
    case, config = x  # (BadIdCase, config name)
    return case.spec.num_tables, case.spec.num_tables * case.spec.batch_size, \
        f'{{"config": "{config}", "bad": {case.bad.to_json()}, "pooling": "{case.spec.pooling}"}}'


SHRINK_CASES = fuzz_cases(max_lookups=1500, max_runs=60, max_total_dim=64, max_tables=8)
# a fault property's strategy -> the same strategy at the shrinking budget (others shrink as they are)
AT_SHRINK_BUDGET = ((ADVERSARIAL, SHRINK_CASES), (MULTI_STEP_ADAGRAD, SHRINK_CASES.filter(multi_step_adagrad)),
                    (MULTI_STEP, SHRINK_CASES.filter(lambda fc: fc.spec.steps > 1)))


@pytest.mark.parametrize("fault", fault_params(SLOW_SHRINKS))
def test_failing_example_shrinks_small(fault):
    strategy, check, _ = PROPERTIES[fault]
    strategy = next((small for full, small in AT_SHRINK_BUDGET if strategy is full), strategy)

    def fails(x) -> bool:
        try:
            check(x, (fault,))
        except AssertionError:
            return True
        return False

    t0 = time.perf_counter()
    minimal = find(strategy, fails, settings=SHRINK)
    seconds = time.perf_counter() - t0
    tables, bags, text = size(minimal)
    print(f"\n{fault}: shrunk in {seconds:.1f} s to {tables} table(s), {bags} bag(s): {text}")
    check(minimal, ())  # the minimal case shows the fault, not an oracle quirk
    max_tables, max_bags, _ = NEEDS_MORE.get(fault, (MAX_TABLES, MAX_BAGS, ""))
    assert tables <= max_tables and bags <= max_bags, text
