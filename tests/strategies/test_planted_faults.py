"""Each planted fault is caught on CPU by the fuzz property that CI runs for its bug class, and
the failing example passes once the fault is switched off (so the catch is the fault's doing).

Time to catch and examples tried are printed (``-s``) and kept in the pytest cache under
``tbe-fuzz/planted_faults``; the measured table is benchmarks/results/planted_faults_cpu.md. No
timing is asserted: a search that does not find the fault within MAX_TRIES fails the test.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from strategies.adversarial import FuzzCase, fuzz_cases
from strategies.specs import case_specs
from tbe import faults
from strategies.int32_edges import int32_edge_specs
from tests.fuzz_properties import bad_duplicate_cases, check_bad_case, check_fuzz_case, check_int32_case
from tests.strategies.test_adversarial import duplicate_case_strategy, wide_case_strategy
from tests.strategies.test_strategies import DEFAULT_CASES

MAX_TRIES = 300
ADVERSARIAL = fuzz_cases(**DEFAULT_CASES)  # the adversarial fuzz test's strategy


def multi_step_adagrad(fc) -> bool:
    """Cases that carry row-wise Adagrad's state across steps."""
    return fc.spec.optimizer == "exact_rowwise_adagrad" and fc.spec.steps > 1


MULTI_STEP_ADAGRAD = ADVERSARIAL.filter(multi_step_adagrad)  # optimizer state carried between steps
MULTI_STEP = ADVERSARIAL.filter(lambda fc: fc.spec.steps > 1)  # a later step meets the state an earlier one left
STRIDED = st.builds(FuzzCase, case_specs(max_lookups=200), st.just("strided"))  # one program per SM
# features sharing a table (every non-empty drawn map reads some table twice), under the configs of each tier
SHARED_MAPS = st.builds(FuzzCase, case_specs(max_lookups=200, shared_tables=True).filter(lambda s: s.feature_table_map),
                        st.sampled_from(["default", "small", "short_rows", "small_fused"]))
# a batch size per feature (VBE, alone or with shared tables): the forward writes each feature's own block
VBE_CASES = st.builds(FuzzCase, case_specs(max_lookups=60, shared_tables=True, vbe=True).filter(lambda s: s.vbe),
                      st.sampled_from(["default", "small_fused"]))


# fault -> (the fuzz test's strategy, its check, a phrase (or phrases, any of) the failure must contain)
PROPERTIES = {
    "unstable_weighted_pairing": (duplicate_case_strategy(), lambda x, f: check_fuzz_case(x, f), "weights after update"),
    "int32_linearize_past_limit": (int32_edge_specs(), check_int32_case, "linear index"),
    "long_threshold_off_by_one": (ADVERSARIAL, check_fuzz_case, "weights after update"),
    "fwd_mean_wrong_length": (bad_duplicate_cases(), lambda x, f: check_bad_case(*x, f), "forward vs fp64"),
    "skip_last_chunk_update": (ADVERSARIAL, check_fuzz_case, "weights after update"),
    # the rounded gradient reaches both the momentum and the weights; either check may see it first
    "accumulate_in_weight_dtype": (ADVERSARIAL, check_fuzz_case, ("weights after update", "momentum")),
    # row E_t is read and written: the sanitizer names it (make test); without it the forward or the
    # count differs, or the access past the buffer kills the supervised worker
    "bounds_check_off_by_one": (bad_duplicate_cases(), lambda x, f: check_bad_case(*x, f),
                                ("sanitizer", "forward vs fp64", "bounds-check warnings", "worker crashed")),
    "fwd_drop_cols_past_1024": (wide_case_strategy(), check_fuzz_case, "forward vs fp64"),
    # the supervisor times the never-ending kernel out: the case fails as a hang
    "hang_narrow_long_run": (ADVERSARIAL, check_fuzz_case, ": hang"),
    # the wide mask reads the next columns' gradient into the row (Adagrad's rate sees it too) and writes
    # the next row; past the buffer's end the sanitizer names it, or the worker dies of it
    "lane_mask_narrow": (ADVERSARIAL, check_fuzz_case,
                         ("weights after update", "momentum", "untouched weight changed", "sanitizer", "crash")),
    # optimizer state across steps: the adversarial cases that update rows twice or more with row-wise Adagrad
    "momentum_low_precision": (MULTI_STEP_ADAGRAD, check_fuzz_case,
                               ("momentum", "weights after update")),
    # a row read by two features of one table: its update misses one feature's gradient (or Adagrad's momentum
    # counts the features apart)
    "runs_per_feature": (SHARED_MAPS, check_fuzz_case, ("weights after update", "momentum")),
    # loop classes (tbe.loops): runs past the first grid-stride pass, a run whose chunk count leaves a partial
    # group of 8, a workspace a later step reuses
    "short_rows_one_pass": (STRIDED, check_fuzz_case, ("weights after update", "momentum")),
    "apply_drops_partial_group": (ADVERSARIAL, check_fuzz_case, ("weights after update", "momentum")),
    "fused_workspace_uninitialized": (MULTI_STEP, check_fuzz_case, ("weights after update", "momentum")),
    # the last feature's rows are rotated by one: its forward block is off wherever two of its bags differ
    "vbe_last_feature_offset": (VBE_CASES, check_fuzz_case, "forward vs fp64"),
}
SEARCH = settings(max_examples=MAX_TRIES, phases=[Phase.generate], database=None, derandomize=True,
                  deadline=None, suppress_health_check=list(HealthCheck), print_blob=False)


def fault_params(nightly: frozenset[str] = frozenset()) -> list:
    """The faults as test parameters; a fault whose kernel never returns, and those in ``nightly``, are
    ``nightly`` tests. A hang costs the supervisor's whole timeout (20 s plus ten times the case's expected
    cost on the interpreter) per example that reaches it, minutes per search; ``make test`` still proves
    its catch with the self-test's fixed case (tests/fuzz/selftest/test_selftest_detectors.py)."""
    slow = faults.HANGS | nightly
    return [pytest.param(f, marks=pytest.mark.nightly) if f in slow else f for f in sorted(PROPERTIES)]


@pytest.fixture(autouse=True)
def _artifacts_in_tmp(tmp_path, monkeypatch):
    """The expected failures' artifacts go to a temporary directory, not the one CI uploads."""
    monkeypatch.setenv("TBE_FUZZ_ARTIFACTS", str(tmp_path / "artifacts"))


@pytest.mark.parametrize("fault", fault_params())
def test_planted_fault_is_caught(fault, request):
    strategy, check, phrase = PROPERTIES[fault]
    tried, failing = 0, []

    @SEARCH
    @given(strategy)
    def search(x):
        nonlocal tried
        tried += 1
        try:
            check(x, (fault,))
        except AssertionError:
            failing.append(x)
            raise

    t0 = time.perf_counter()
    with pytest.raises(AssertionError) as caught:
        search()
    seconds = time.perf_counter() - t0
    phrases = (phrase,) if isinstance(phrase, str) else phrase
    assert any(p in str(caught.value) for p in phrases), str(caught.value)
    replay = [line for line in str(caught.value).splitlines() if line.startswith("replay: ")]
    # where the message names an artifact, the line copied from it replays the fault, as replay.txt does
    assert all(line.startswith("replay: TBE_FUZZ_ALLOW_FAULTS=1 tbe-fuzz replay ") for line in replay), replay
    check(failing[-1], ())  # the same example passes without the fault
    row = {"fault": fault, "seconds": round(seconds, 1), "examples": tried}
    if getattr(request.config, "cache", None) is not None:
        request.config.cache.set(f"tbe-fuzz/planted_faults/{fault}", row)
    print(f"\nplanted fault {fault}: caught after {tried} examples in {seconds:.1f} s")
