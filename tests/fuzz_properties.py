"""The property checks the adversarial fuzz tests run, shared with the planted-fault and
shrinking tests so those prove the power of exactly what CI runs.

Each ``check_*`` raises AssertionError (with the case's JSON) when the kernels disagree with
the FP64 references; ``faults`` plants bugs on top of the case's config. Inside a Hypothesis
test they also steer the search with ``hypothesis.target``: toward larger error / bound and
toward longer runs. Cases run through ``fuzz.execution.verdict`` in a supervised worker: a crash, a CUDA
error or a hang fails the test (the final example saved as an artifact the message names) instead
of killing the pytest-xdist worker. ``check_int32_case`` runs in process: the transpose it checks
reads only its own inputs by position, never a table row by id.
"""

from __future__ import annotations

import math

from hypothesis import currently_in_test_context, target
from hypothesis import strategies as st

from cases import AnyCase, BadIdCase, CaseSpec
from fuzz.selftest.int32_check import int32_problems
from fuzz.execution import assert_passes
from strategies.adversarial import FuzzCase
from strategies.configs import named_config
from strategies.duplicates import bad_duplicate_specs
from strategies.int32_edges import Int32EdgeSpec
from tbe import KernelConfig

def _verdict(case: AnyCase, spec: CaseSpec, config: KernelConfig, label: str) -> None:
    """Steer toward long hot runs, then judge the case supervised (it steers toward error / bound)."""
    if currently_in_test_context():
        longest = max((h.count for h in spec.hot_rows), default=spec.max_length)
        target(math.log2(1 + longest), label="log2 longest hot run")
    assert_passes(case, config, label)


def check_fuzz_case(fc: FuzzCase, faults: tuple[str, ...] = ()) -> None:
    """Forward and every training step of ``fc`` against FP64."""
    _verdict(fc.spec, fc.spec, fc.kernel_config(faults), f"config {fc.config!r}")


def check_spec(spec: CaseSpec, config_name: str, faults: tuple[str, ...] = ()) -> None:
    check_fuzz_case(FuzzCase(spec, config_name), faults)


# ----------------------------------------------------------------------------- bad input
@st.composite
def bad_duplicate_cases(draw: st.DrawFn) -> tuple[BadIdCase, str]:
    """A weighted-duplicates batch with bad ids and/or offsets (strategies.bad_inputs), the module
    settings it runs under (pooling, bounds-check mode, optimizer, dtype) and a config name."""
    bad = draw(bad_duplicate_specs(max_length=6))
    spec = CaseSpec(
        tables=bad.tables, batch_size=bad.batch_size, pooling=draw(st.sampled_from(["mean", "sum"])),
        index_dtype=bad.index_dtype, weighted=True,
        weights_dtype=draw(st.sampled_from(["fp32", "fp16", "bf16"])),
        optimizer=draw(st.sampled_from(["exact_sgd", "exact_rowwise_adagrad"])),
        learning_rate=draw(st.sampled_from([0.5, 0.05])),
        bounds_check=draw(st.sampled_from(["warning", "ignore", "fatal"])), max_length=bad.max_length,
        seed=bad.seed,
    )
    return BadIdCase(spec, bad), draw(st.sampled_from(["small", "fused_bounds", "small_fused"]))


def check_bad_case(case: BadIdCase, config_name: str, faults: tuple[str, ...] = ()) -> None:
    """The module's bounds check, forward and step on a bad batch vs the repaired FP64 reference."""
    _verdict(case, case.spec, named_config(config_name, faults), f"config {config_name!r}")


# ----------------------------------------------------------------------------- int32 edges
def check_int32_case(spec: Int32EdgeSpec, faults: tuple[str, ...] = ()) -> None:
    """Values only: a wrong int32/int64 label that computes right values is not this bug class."""
    problems = int32_problems(spec, KernelConfig(faults=tuple(faults)))
    assert not problems, "; ".join(problems) + f"\nspec: {spec.to_json()}"
