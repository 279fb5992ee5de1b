"""One differential check of one case: the Triton TBE against the FP64 references, every step.

Tests, the fuzz campaign driver and replay all judge a case through ``check_case`` so a
failure means the same thing everywhere. It lives in ``fuzz/`` because it runs the kernels
(through ``strategies.run.build_module``); the ``oracles/`` it compares with never do.

Contract of ``check_case(spec, config, steps=True) -> list[Report]``:

- Builds a fresh module for ``spec`` with ``config`` (default KernelConfig()), materializes
  the batch deterministically and runs ``spec.steps`` training steps (forward, then
  backward with ``case.grad_outputs[k]``, the optimizer applied in the kernel). With
  ``steps=False`` or ``spec.steps == 0`` it runs one forward only, under no_grad.
- Every step yields: a forward Report (vs ``oracles.checks.check_forward`` on the weights
  before the step and the reference-repaired batch); per table, a Report of the updated
  touched rows against ``reference_backward`` under ``bounds_backward.table_bounds`` (its
  ``worst.sample`` is the row id); one failing Report per other ``check_step`` violation
  (momentum, untouched rows changed, per-sample-weight gradient); under WARNING, a Report
  of the warning count; under FATAL with invalid input, a Report of whether it raised.
- The case passes iff every Report is ``ok``; ``max(r.max_ratio)`` is the normalized error
  (error / bound) for ``hypothesis.target``. Kernel exceptions other than the bounds
  check's propagate: a crash is a failure the caller sees as such.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from oracles.bounds_backward import check_step, table_bounds
from oracles.checks import check_forward
from oracles.compare import Mismatch, Report, compare
from oracles.reference_backward import reference_backward
from oracles.reference_bounds import reference_bounds_check
from strategies.case import CaseSpec, materialize
from strategies.run import build_module
from tbe import KernelConfig
from tbe.bounds_check import BoundsCheckError
from tbe.modes import BoundsCheckMode


def _scalar_report(what: str, expected: float, got: float) -> Report:
    ok = expected == got
    return Report(what, ok, Mismatch(-1, -1, -1, float(expected), float(got), 0.0), 0 if ok else 1, 1)


def _step_reports(k: int, ref, layout, w_before: torch.Tensor, module, psw_grad, psw_dtype) -> list[Report]:
    """Backward Reports of step ``k``: weights per table with ratios, then the other violations."""
    after = module.weights.detach()  # stays on the kernels' device, where the reference ran
    reports = []
    for s, tb in zip(ref.tables, table_bounds(ref, after.dtype)):
        flat = layout.weights_offsets[s.table] + s.rows[:, None] * s.dim + torch.arange(s.dim, device=s.rows.device)
        r = compare(f"step {k} table {s.table} weights after update (sample = row)", s.w_new, after[flat], tb.w_bound)
        if r.worst is not None:
            r.worst.table, r.worst.sample = s.table, int(s.rows[r.worst.sample])
        reports.append(r)
    violations = check_step(ref, layout, w_before, module.weights, module.momentum, psw_grad, psw_dtype)
    weights_failed = any(not r.ok for r in reports)
    for v in violations:
        if v.what == "weight" and weights_failed:
            continue  # already reported above, with its ratio
        reports.append(Report(f"step {k} {v.what} at {v.where}", False,
                              Mismatch(-1, -1, -1, v.exact, v.got, v.bound), 1, 1))
    return reports


def check_batch(
    spec: CaseSpec,
    config: Optional[KernelConfig],
    indices: torch.Tensor,
    offsets: torch.Tensor,
    per_sample_weights: Optional[torch.Tensor],
    grad_outputs: Sequence[torch.Tensor],
) -> list[Report]:
    """``check_case`` on explicit (possibly invalid) tensors; ``spec`` supplies tables, modes and
    dtypes. One step per entry of ``grad_outputs``; none = one forward only. CPU tensors in; the
    FP64 references run on the kernels' device, beside the outputs they judge."""
    module = build_module(spec, config)
    device, layout, B = module.device, module.layout, spec.batch_size
    mode = module.bounds_check_mode
    first_bad = None  # what FATAL must name: ("offsets", entry) or ("id", position)
    if mode == BoundsCheckMode.NONE:
        ref_idx, ref_off, fatal, expected_warn = indices, offsets, False, 0
    else:
        rb = reference_bounds_check(layout.rows, indices, offsets, mode)
        ref_idx, ref_off, fatal, expected_warn = rb.indices, rb.offsets, rb.fatal, rb.warnings
        first_bad = rb.first_bad
    ref_idx, ref_off = ref_idx.to(device), ref_off.to(device)
    ref_psw = None if per_sample_weights is None else per_sample_weights.to(device)
    if mode != BoundsCheckMode.FATAL:
        fatal = False
    backward = len(grad_outputs) > 0
    reports: list[Report] = []
    for k in range(max(1, len(grad_outputs))):
        w_before = module.weights.detach().clone()
        m_before = module.momentum.detach().clone()
        psw_in = None
        if per_sample_weights is not None:
            psw_in = per_sample_weights.to(device).clone().requires_grad_(backward)
        warn0 = int(module.bounds_check_warnings[0])
        try:
            with torch.set_grad_enabled(backward):
                out = module(indices.to(device), offsets.to(device), psw_in)
        except BoundsCheckError as e:
            ok = fatal and (e.kind, e.position) == first_bad  # it must name the first offender
            why = "" if ok or not fatal else f"; expected it to name {first_bad[0]} entry {first_bad[1]}"
            reports.append(Report(f"step {k} FATAL bounds check raised ({e}){why}", ok, None, 0 if ok else 1, 1))
            return reports
        if fatal:
            reports.append(Report(f"step {k} FATAL bounds check did not raise on invalid input", False, None, 1, 1))
            return reports
        if mode == BoundsCheckMode.WARNING:
            reports.append(_scalar_report(f"step {k} bounds-check warnings", expected_warn,
                                          int(module.bounds_check_warnings[0]) - warn0))
        reports.append(check_forward(layout, w_before, ref_idx, ref_off, ref_psw, B, module.pooling,
                                     out.detach(), what=f"step {k} forward vs fp64"))
        if not backward:
            break
        grad = grad_outputs[k].to(device)
        ref = reference_backward(layout, w_before, m_before, ref_idx, ref_off, ref_psw, B,
                                 module.pooling, module.optimizer, module.learning_rate, module.eps, grad)
        out.backward(grad)
        psw_grad = None if psw_in is None else psw_in.grad
        reports += _step_reports(k, ref, layout, w_before, module, psw_grad,
                                 None if per_sample_weights is None else per_sample_weights.dtype)
    return reports


def check_case(spec: CaseSpec, config: Optional[KernelConfig] = None, steps: bool = True) -> list[Report]:
    """Run ``spec`` through the kernels and judge every output against FP64 (see module docstring)."""
    case = materialize(spec)
    grads = case.grad_outputs if steps else []
    return check_batch(spec, config, case.indices, case.offsets, case.per_sample_weights, grads)


def failures(reports: Sequence[Report]) -> list[Report]:
    return [r for r in reports if not r.ok]


def max_ratio(reports: Sequence[Report]) -> float:
    """The normalized error of a checked case: the largest error / bound over all Reports."""
    return max((r.max_ratio for r in reports), default=0.0)


def summary(reports: Sequence[Report], spec: Optional[CaseSpec] = None) -> str:
    """The failing Reports (or 'ok') and the spec's JSON, for assertion messages and artifacts."""
    bad = failures(reports)
    text = "ok" if not bad else "\n".join(str(r) for r in bad)
    return text if spec is None else f"{text}\nspec: {spec.to_json()}"
