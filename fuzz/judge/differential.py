"""One differential check of one case: the system under test against the FP64 references, every step.

Tests, the fuzz campaign driver and replay all judge a case through ``check_case`` so a
failure means the same thing everywhere. It lives in ``fuzz/`` because it runs the SUT
(``fuzz.sut.protocol``: this project's kernels by default); the ``oracles/`` it compares with never do.

Contract of ``check_case(spec, config, steps=True, sut="triton") -> list[Report]``:

- Builds a fresh instance of the SUT for ``spec`` (with ``config`` where the SUT takes a
  KernelConfig) from the spec's seeded initial weights, materializes the batch
  deterministically and runs ``spec.steps`` training steps (forward, then backward with
  ``case.grad_outputs[k]``, the optimizer applied by the SUT). With ``steps=False`` or
  ``spec.steps == 0`` it runs one forward only, under no_grad.
- Every step yields: a forward Report (vs ``oracles.checks.check_forward`` on the weights
  before the step and the reference-repaired batch); per table, a Report of the updated
  touched rows against ``reference_backward`` under ``bounds_backward.step_bounds`` (its
  ``worst.sample`` is the row id); one failing Report per other ``check_step`` violation
  (momentum, untouched rows changed, per-sample-weight gradient); with stochastic rounding of fp16 or bf16
  weights, two Reports of the step's stores (``oracles.stochastic``: each a neighbour, their mean error within
  its bound); under WARNING, a Report
  of the warning count; under FATAL with invalid input, a Report of whether it raised.
- ``model`` (``oracles.error_model``; default ``$TBE_FUZZ_BOUND`` or worst case) picks the
  accumulation bound; ``teeth`` (a ``fuzz.judge.teeth.Teeth``), when given, collects each
  weight bound relative to its update, per segment-length band.
- The case passes iff every Report is ``ok``; ``max(r.max_ratio)`` is the normalized error
  (error / bound) for ``hypothesis.target``. SUT exceptions other than FATAL's
  ``FatalBoundsCheck`` propagate: a crash is a failure the caller sees as such.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from fuzz.sut import DEFAULT as DEFAULT_SUT
from fuzz.errors import FatalBoundsCheck, SUTError
from fuzz.sut import packed_momentum, packed_weights, params_for, warnings_count
from fuzz.sut import get as get_sut
from fuzz.sut import batch_kwargs, refusal
from oracles.bounds import unit_roundoff
from oracles.bounds_backward import check_step, step_bounds
from oracles.checks import check_forward
from oracles.compare import Check, Mismatch, Report, compare_segments
from oracles.error_model import ErrorModel, from_env
from oracles.reference import table_rows
from oracles.reference_backward import reference_backward
from oracles.reference_bounds import reference_bounds_check
from oracles.stochastic import ALPHA, GRID, judge as judge_stochastic
from cases import CaseSpec, initial_weights as spec_weights, materialize
from tbe import KernelConfig
from tbe.modes import BoundsCheckMode, Optimizer
from fuzz.judge.teeth import Teeth
from fuzz.time_split import Phases


def _scalar_report(what: str, expected: float, got: float, check: Check, step: int) -> Report:
    ok = expected == got
    return Report(what, ok, Mismatch(-1, -1, -1, float(expected), float(got), 0.0), 0 if ok else 1, 1,
                  graded=False, check=check, step=step)


def _step_reports(k: int, ref, layout, w_before: torch.Tensor, instance, psw_grad, psw_dtype,
                  model: ErrorModel, teeth: Optional[Teeth], stochastic: bool = False) -> list[Report]:
    """Backward Reports of step ``k``: weights per table with ratios, then the other violations (``stochastic``:
    the SUT rounds its stores stochastically)."""
    after = packed_weights(instance, w_before.device)  # on the reference's device
    momentum = packed_momentum(instance, w_before.device)
    if after.numel() != layout.total_elements:
        raise SUTError(f"the SUT's weights hold {after.numel()} values, the tables {layout.total_elements}")
    if ref.optimizer == Optimizer.EXACT_ROWWISE_ADAGRAD and momentum.numel() != layout.total_rows:
        raise SUTError(f"the SUT's row-wise momentum holds {momentum.numel()} values, the tables have "
                       f"{layout.total_rows} rows")
    bounds = step_bounds(ref, after.dtype, model, stochastic)
    rows = ref.rows
    if teeth is not None and rows.w_new.numel():  # every table at once, entry by entry
        teeth.add(rows.seg_len[rows.row_of], bounds.w_bound, rows.w_new - rows.w_old, rows.exact, rows.w_new,
                  unit_roundoff(after.dtype))
    spans = [sp.elements for sp in ref.spans]
    results = compare_segments(rows.w_new, after[rows.weight_index], bounds.w_bound, spans)
    worst = [a + pos for (a, _), (_, _, pos, *_) in zip(spans, results)]
    worst_row = rows.rows[rows.row_of[torch.tensor(worst, dtype=torch.int64, device=rows.rows.device)]].tolist() \
        if worst else []
    reports = []
    for sp, (num_bad, checked, pos, expected, got, bound), row in zip(ref.spans, results, worst_row):
        reports.append(Report(f"step {k} table {sp.table} weights after update (sample = row)", num_bad == 0,
                              Mismatch(sp.table, row, pos % sp.dim, expected, got, bound), num_bad, checked,
                              check=Check.WEIGHTS, step=k, table=sp.table))
    if stochastic and after.dtype in GRID:
        reports += _stochastic_reports(k, ref, after, bounds)
    violations = check_step(ref, layout, w_before, after, momentum, psw_grad, psw_dtype, model, bounds)
    weights_failed = any(not r.ok for r in reports)
    for v in violations:
        if v.what == "weight" and weights_failed:
            continue  # already reported above, with its ratio
        reports.append(Report(f"step {k} {v.what} at {v.where}", False,
                              Mismatch(-1, -1, -1, v.exact, v.got, v.bound), 1, 1, check=Check(v.what), step=k))
    return reports


def _stochastic_reports(k: int, ref, after: torch.Tensor, bounds) -> list[Report]:
    """The neighbour and bias Reports of step ``k``'s stochastic stores (every touched weight at once): the first's
    worst entry is a store (sample = row) against the farthest neighbour a correct step may store (a yes/no check: a
    correct store to the far neighbour sits exactly at it), the second's the
    summed error against its bound."""
    rows = ref.rows
    v = judge_stochastic(rows.w_new, after[rows.weight_index], bounds.pre_lo, bounds.pre_hi, after.dtype)
    where = (-1, -1, -1)
    for sp in ref.spans if v.worst >= 0 else ():
        a, b = sp.elements
        if a <= v.worst < b:
            where = (sp.table, int(rows.rows[rows.row_of[v.worst]]), (v.worst - a) % sp.dim)
    near = Report(f"step {k} stochastic rounding to a neighbour (bound: the farthest neighbour)", v.neighbours_ok,
                  Mismatch(*where, v.worst_exact, v.worst_stored, v.worst_reach), v.outside, v.checked,
                  graded=False, check=Check.SR_NEIGHBOURS, step=k)  # one of two values or not: no margin to show
    worse, label = max((abs(v.bias), "errors"), (abs(v.bias_away), "errors away from zero"))
    bias = Report(f"step {k} stochastic rounding unbiased (sum of {label} in spacings, false alarm {ALPHA:g})",
                  v.unbiased, Mismatch(-1, -1, -1, 0.0, worse, v.allowance), 0 if v.unbiased else 1, 1,
                  check=Check.SR_BIAS, step=k)
    return [near, bias]


def check_batch(
    spec: CaseSpec,
    config: Optional[KernelConfig],
    indices: torch.Tensor,
    offsets: torch.Tensor,
    per_sample_weights: Optional[torch.Tensor],
    grad_outputs: Sequence[torch.Tensor],
    model: Optional[ErrorModel] = None,
    teeth: Optional[Teeth] = None,
    sut: str = DEFAULT_SUT,
    initial_weights: Optional[torch.Tensor] = None,
    phases: Optional[Phases] = None,
) -> list[Report]:
    """``check_case`` on explicit (possibly invalid) tensors; ``spec`` supplies tables, modes and dtypes. One step per
    entry of ``grad_outputs``; none = one forward only. Tensors on one device in (the CPU, or the SUT's:
    ``fuzz.judge.check.draw_device``); the FP64 references run on the SUT's device (its instance's ``device``,
    else the CPU), beside the outputs they judge. ``sut`` names the system under test (``fuzz.sut.protocol``); it
    starts from ``initial_weights`` (packed; default: the spec's seeded weights). ``model`` picks the
    accumulation bound (default ``$TBE_FUZZ_BOUND``, else worst case); ``teeth`` collects bound / update per
    segment-length band; ``phases`` (``fuzz.time_split``) is charged the SUT's time."""
    phases = phases or Phases()
    model = model or from_env()
    target = get_sut(sut)
    why = refusal(spec, target.capabilities)
    if why is not None:
        raise SUTError(f"SUT {sut!r} cannot run this case: {why}")
    layout, B = spec.layout, spec.batch_size
    sizes = spec.batch_size_per_feature  # VBE: the references take each feature's B_f, outputs are flat
    vbe = batch_kwargs(spec)
    if initial_weights is None:
        initial_weights = spec_weights(spec, indices.device)
    tables = [table_rows(layout, initial_weights, t).clone() for t in range(layout.num_tables)]
    params = params_for(spec, config if target.capabilities.kernel_config else None, tables)
    stochastic = bool(config is not None and config.stochastic_rounding and target.capabilities.reads("stochastic_rounding"))
    with phases.timed("sut"):
        instance = target.build(params)
    device = torch.device(getattr(instance, "device", "cpu"))
    mode, pooling = params.bounds_check, params.pooling
    first_bad = None  # what FATAL must name: ("offsets", entry) or ("id", position)
    if mode == BoundsCheckMode.NONE:
        ref_idx, ref_off, fatal, expected_warn = indices, offsets, False, 0
    else:
        rb = reference_bounds_check(layout.feature_rows, indices, offsets, mode, batch_size_per_feature=sizes)
        ref_idx, ref_off, fatal, expected_warn = rb.indices, rb.offsets, rb.fatal, rb.warnings
        first_bad = rb.first_bad
    ref_idx, ref_off = ref_idx.to(device), ref_off.to(device)
    ref_psw = None if per_sample_weights is None else per_sample_weights.to(device)
    if mode != BoundsCheckMode.FATAL:
        fatal = False
    backward = len(grad_outputs) > 0
    reports: list[Report] = []
    for k in range(max(1, len(grad_outputs))):
        w_before = packed_weights(instance, device)
        m_before = packed_momentum(instance, device)
        psw_in = None if per_sample_weights is None else per_sample_weights.clone()
        warn0 = warnings_count(instance) if mode == BoundsCheckMode.WARNING else 0
        try:
            with torch.set_grad_enabled(backward), phases.timed("sut", device):
                out = instance.forward(indices.clone(), offsets.clone(), psw_in, **vbe)
        except FatalBoundsCheck as e:
            # it must name the first offender, where the SUT says which it found
            ok = fatal and (e.position is None or (e.kind, e.position) == first_bad)
            why = "" if ok or not fatal else f"; expected it to name {first_bad[0]} entry {first_bad[1]}"
            reports.append(Report(f"step {k} FATAL bounds check raised ({e}){why}", ok, None, 0 if ok else 1, 1,
                                  graded=False, check=Check.FATAL_RAISED, step=k))
            return reports
        if fatal:
            reports.append(Report(f"step {k} FATAL bounds check did not raise on invalid input", False, None, 1, 1,
                                  graded=False, check=Check.FATAL_SILENT, step=k))
            return reports
        if mode == BoundsCheckMode.WARNING:
            reports.append(_scalar_report(f"step {k} bounds-check warnings", expected_warn,
                                          warnings_count(instance) - warn0, Check.WARNINGS, k))
        fwd = check_forward(layout, w_before, ref_idx, ref_off, ref_psw, B, pooling,
                            out.detach().to(device), what=f"step {k} forward vs fp64", model=model,
                            batch_size_per_feature=sizes)
        fwd.check, fwd.step = Check.FORWARD, k
        reports.append(fwd)
        if not backward:
            break
        grad = grad_outputs[k]
        ref = reference_backward(layout, w_before, m_before, ref_idx, ref_off, ref_psw, B,
                                 pooling, params.optimizer, params.learning_rate, params.eps, grad.to(device),
                                 batch_size_per_feature=sizes)
        with phases.timed("sut", device):
            psw_grad = instance.backward(grad.clone())
        if per_sample_weights is not None and per_sample_weights.numel() and psw_grad is None \
                and target.capabilities.psw_grad:
            reports.append(Report(f"step {k} missing psw grad (the SUT returned none)", False, None, 1, 1,
                                  graded=False, check=Check.MISSING_PSW_GRAD, step=k))
        psw_grad = None if psw_grad is None else psw_grad.detach().to(device)
        reports += _step_reports(k, ref, layout, w_before, instance, psw_grad,
                                 None if per_sample_weights is None else per_sample_weights.dtype, model, teeth,
                                 stochastic)
    return reports


def check_case(spec: CaseSpec, config: Optional[KernelConfig] = None, steps: bool = True,
               model: Optional[ErrorModel] = None, teeth: Optional[Teeth] = None,
               sut: str = DEFAULT_SUT) -> list[Report]:
    """Run ``spec`` through the SUT and judge every output against FP64 (see module docstring)."""
    case = materialize(spec)
    grads = case.grad_outputs if steps else []
    return check_batch(spec, config, case.indices, case.offsets, case.per_sample_weights, grads, model, teeth,
                       sut=sut)


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
