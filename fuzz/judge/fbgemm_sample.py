"""The second oracle in campaigns: FBGEMM's CPU TBE on a sample of the examples.

A fixed fraction (``SAMPLE``, chosen by a hash of the case, so a replay makes the same
choice) of the examples FBGEMM's CPU TBE can run (fp32/fp16 weights and output, every
D % 4 == 0, a valid batch, at most ``MAX_COLUMNS`` lookup columns) also runs through FBGEMM,
step by step from the same initial weights. FBGEMM's outputs and updates are judged
against the FP64 reference under the same derived bounds as the kernel's; settings where
FBGEMM is known to differ (``oracles/findings.py``) are judged against the semantics it
implements or not at all, as the finding says. A disagreement left is an oracle finding
to triage: its Report names FBGEMM, so it is never mistaken for a kernel bug.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

from cases import CaseTensors, initial_weights
from fuzz.sut import batch_kwargs
from oracles import fbgemm_cpu
from oracles.bounds_backward import check_step
from oracles.checks import check_forward
from oracles.compare import Check, Mismatch, Oracle, Report
from oracles.findings import (fbgemm_backward_difference, fbgemm_feature_map_differences, fbgemm_forward_difference,
                              fbgemm_update_difference)
from oracles.reference_backward import reference_backward
from tbe.modes import Pooling

SAMPLE = 4              # one in SAMPLE of the examples FBGEMM applies to
# Lookups x the widest D x steps: the FP64 check of FBGEMM's steps runs on the CPU (FBGEMM's is a CPU TBE)
# at about 0.4 us a lookup column on two cores, so this keeps a sampled case under a second there.
MAX_COLUMNS = 1 << 21
CHECKED, NOT_SAMPLED, TOO_LARGE = "checked", "not sampled", "n/a: size"
RULE = (f"1 in {SAMPLE} of the examples it applies to: fp32/fp16 weights and output, D % 4 == 0, "
        f"valid batches of <= {MAX_COLUMNS:,} lookup columns (lookups x widest D x steps)")


def columns(case: Any, lookups: int) -> int:
    """The lookup columns FBGEMM's check of ``case`` covers over all its steps (an upper bound: the widest D)."""
    spec = case.spec
    return lookups * max((d for _, d in spec.tables), default=0) * max(1, spec.steps)


def not_applicable(case: Any, lookups: int) -> str | None:
    """Why FBGEMM's CPU TBE cannot check ``case`` (a status string), or None."""
    if case.bad is not None:
        return "n/a: bad-id batch"
    spec = case.spec
    w, o = spec.weights_dtype.torch, spec.output_dtype.torch
    if not fbgemm_cpu.supports(w, o, [d for _, d in spec.tables]):
        return "n/a: dtype or D"
    if fbgemm_feature_map_differences(spec.optimizer, o, spec.feature_table_map):
        return "n/a: feature map"
    if columns(case, lookups) > MAX_COLUMNS or lookups == 0 or spec.batch_size == 0:
        return TOO_LARGE
    if not fbgemm_cpu.available():
        return "n/a: fbgemm_gpu not loaded"
    return None


def sampled(case: Any) -> bool:
    return int(hashlib.sha1(case.to_json().encode()).hexdigest()[:8], 16) % SAMPLE == 0


def check(case: Any, t: CaseTensors) -> tuple[str, list[Report]]:
    """(status, FBGEMM's Reports) for one example; no Reports unless it was sampled."""
    why = not_applicable(case, int(t.indices.numel()))
    if why is not None:
        return why, []
    if not sampled(case):
        return NOT_SAMPLED, []
    return CHECKED, run(case, t)


def run(case: Any, t: CaseTensors) -> list[Report]:
    """FBGEMM's steps on ``case`` judged against FP64 (the caller checked ``not_applicable``), on the CPU where
    FBGEMM's tensors are."""
    t = t.to("cpu")
    spec = case.spec
    layout, B, sizes = spec.layout, spec.batch_size, spec.batch_size_per_feature
    wdt, odt = spec.weights_dtype.torch, spec.output_dtype.torch
    pooling, opt = spec.pooling, spec.optimizer
    fb = fbgemm_cpu.FbgemmTBE(spec.tables, opt, spec.learning_rate, spec.eps, wdt, odt, pooling,
                              feature_table_map=spec.feature_table_map)
    w0 = t.initial_weights if t.initial_weights is not None else initial_weights(spec)
    fb.load([w0[o: o + e * d].view(e, d) for o, (e, d) in zip(layout.weights_offsets, spec.tables)])
    idx, off, psw = t.indices, t.offsets, t.per_sample_weights
    reports: list[Report] = []
    for k, grad in enumerate(t.grad_outputs):
        w_before = torch.cat([w.flatten() for w in fb.weights()])
        m_list = fb.momentum()
        m_before = torch.cat(m_list) if m_list else torch.zeros(0)
        out, psw_grad = fb.step(idx, off, psw, grad, **batch_kwargs(spec))
        if fbgemm_forward_difference(pooling, spec.weighted, odt) is None:
            fwd = check_forward(layout, w_before, idx, off, psw, B, pooling, out, what=f"step {k} fbgemm forward vs fp64",
                                batch_size_per_feature=sizes)
            fwd.check, fwd.step, fwd.oracle = Check.FORWARD, k, Oracle.FBGEMM
            reports.append(fwd)
        if fbgemm_update_difference(opt, wdt, spec.feature_table_map) is not None:
            continue  # triaged: FBGEMM's update is outside the one-rounding bound here
        fb_pool = Pooling.SUM if fbgemm_backward_difference(pooling, spec.weighted) else pooling
        ref = reference_backward(layout, w_before, m_before, idx, off, psw, B, fb_pool, opt,
                                 spec.learning_rate, spec.eps, grad, batch_size_per_feature=sizes)
        after = torch.cat([w.flatten() for w in fb.weights()])
        m_after = fb.momentum()
        violations = check_step(ref, layout, w_before, after, torch.cat(m_after) if m_after else None, psw_grad)
        reports.append(Report(f"step {k} fbgemm update vs fp64", not violations, None, len(violations), 1,
                              graded=False, check=Check.UPDATE, step=k, oracle=Oracle.FBGEMM))
        for v in violations:
            reports.append(Report(f"step {k} fbgemm {v.what} at {v.where}", False,
                                  Mismatch(-1, -1, -1, v.exact, v.got, v.bound), 1, 1,
                                  check=Check(v.what), step=k, oracle=Oracle.FBGEMM))
    return reports
