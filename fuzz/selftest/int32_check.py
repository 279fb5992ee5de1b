"""The int32 edge of the linearization, checked at the transpose stage, and its self-test detector.

Layouts whose rows in all sit around 2^31 cannot be allocated (the module holds whole
tables), so no campaign example can hold them; the transpose never touches the weights,
though, so it runs on such a layout and is compared with the Python-integer reference
(``oracles.reference_transpose``): linear indices, stable order, runs, and the pairing
of per-sample weights. The self-test detector searches ``strategies.int32_edges`` with a
fault planted, shrinks the failing layout, and counts a catch only if the shrunk layout
passes without the fault.
"""

from __future__ import annotations

import time

import torch
from hypothesis import HealthCheck, Phase, given, settings

from fuzz.selftest.detectors import CAUGHT, MISSED, Context, Detection, Detector, register
from oracles.reference_transpose import reference_transpose
from strategies.int32_edges import Int32EdgeSpec, int32_edge_specs, materialize_int32
from tbe import KernelConfig
from tbe.backend import default_device
from tbe.buckets import device_layout
from tbe.transpose import transpose

MAX_TRIES = 300


def int32_problems(spec: Int32EdgeSpec, config: KernelConfig, check_dtype: bool = False) -> list[str]:
    """Differences between the transpose of ``spec``'s batch and the Python-integer reference;
    with ``check_dtype`` also the int32/int64 choice (int32 iff every linear index fits)."""
    b = materialize_int32(spec)
    layout = spec.layout
    B = spec.batch_size
    ref = reference_transpose(layout, b.indices, b.offsets, b.per_sample_weights, B)
    device = default_device()
    psw = None if b.per_sample_weights is None else b.per_sample_weights.to(device)
    tr = transpose(layout, device_layout(layout, config, device), b.indices.to(device),
                   b.offsets.to(device), psw, B, config)
    linear, perm = tr.key.cpu(), tr.perm.cpu()  # every D is 1: one bucket, so keys are linear indices
    problems = []
    if linear.to(torch.int64).tolist() != ref.linear:
        bad = next(i for i, (x, y) in enumerate(zip(linear.tolist(), ref.linear)) if x != y)
        problems.append(f"linear index of lookup {bad}: got {int(linear[bad])}, expected {ref.linear[bad]}")
    r = int(tr.num_runs[0])
    run_linear, run_length, run_start = tr.run_linear[:r].cpu(), tr.run_length[:r].cpu(), tr.run_start[:r].cpu()
    if perm.tolist() != ref.order:
        problems.append("sorted order differs from the stable order")
    if r != len(ref.run_linear) or run_linear.to(torch.int64).tolist() != ref.run_linear:
        problems.append(f"runs: got {r} runs {run_linear.tolist()}, expected {ref.run_linear}")
    elif run_length.tolist() != ref.run_length or run_start.tolist() != ref.run_start:
        problems.append("run lengths or starts differ")
    if ref.sorted_psw is not None and not torch.equal(tr.sorted_psw.cpu(), ref.sorted_psw):
        problems.append("per-sample weights paired with the wrong sorted lookups")
    expected_dtype = torch.int32 if layout.fits_int32 else torch.int64
    if check_dtype and config.index_dtype == "auto" and tr.linear_dtype != expected_dtype:
        problems.append(f"linearized in {tr.linear_dtype} with {layout.total_rows} rows in all")
    return problems


def search(fault: str, max_tries: int = MAX_TRIES) -> tuple[int, list[Int32EdgeSpec], list[str]]:
    """(layouts tried before the first failure, failing layouts (the last one shrunk), the first
    failure's problems) with ``fault`` planted (derandomized: the same layouts every run)."""
    tried, failing, first = 0, [], []

    @settings(max_examples=max_tries, phases=[Phase.generate, Phase.shrink], database=None, derandomize=True,
              deadline=None, suppress_health_check=list(HealthCheck), print_blob=False)
    @given(int32_edge_specs())
    def prop(spec):
        nonlocal tried
        tried += 0 if failing else 1
        problems = int32_problems(spec, KernelConfig(faults=(fault,)))
        if problems:
            failing.append(spec)
            first[:] = first or problems
            raise AssertionError("; ".join(problems))

    try:
        prop()
    except AssertionError:
        pass
    return tried, failing, first


def _run(fault: str, ctx: Context) -> Detection:
    t0 = time.perf_counter()
    tried, failing, problems = search(fault)
    seconds = time.perf_counter() - t0
    if not failing:
        return Detection("int32_transpose", MISSED, f"no layout of {tried} showed a difference", seconds, tried)
    spec = failing[-1]
    problems = int32_problems(spec, KernelConfig(faults=(fault,))) or problems
    if int32_problems(spec, KernelConfig()):
        return Detection("int32_transpose", MISSED, "the failing layout also fails without the fault "
                         f"(not the fault's doing): {spec.to_json()}", seconds, tried)
    return Detection("int32_transpose", CAUGHT, f"{problems[0]}; rows {list(spec.rows)}; passes without the fault",
                     seconds, tried, (len(spec.rows), len(spec.bag_ids), sum(r for bag in spec.bag_ids for r, _ in bag)))


register("int32_linearize_past_limit", Detector("int32_transpose", _run))
