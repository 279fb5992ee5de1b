"""Known findings: triaged disagreements of a SUT with the FP64 references, matched on a failing case.

Each ``KnownFinding`` names the SUTs it applies to, a predicate on the case and the checks
it explains (``oracles.compare.Check`` members, matched on a failing Report's fields: that
check, judged against the FP64 reference), or, with ``error``, the exception whose traceback
matches it, or, with ``kinds``, any failure of those kinds (``fuzz.status.FailureKind``: an access the
sanitizer stopped, a dead worker, a CUDA error), whatever its text. ``TRIAGE`` is this project's list; a SUT registered from outside may carry its own (``SUT(..., findings=...)``, where ``suts`` may stay empty). A failing case is *known* when every failing check is
explained by some finding that applies to the SUT and the case; anything else (a failing
check no finding explains, a crash no finding expects) is a new failure. The texts live
in ``oracles/findings.py``, with the tests that pin them.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Optional, Sequence

import torch

from cases import AnyCase
from fuzz.judge.check import CaseResult
from fuzz.status import FailureKind
from oracles import findings
from oracles.compare import Check, Mismatch, Oracle, Report
from tbe import KernelConfig

ANY = (Check.FORWARD, Check.WEIGHTS, Check.MOMENTUM, Check.PSW_GRAD, Check.WARNINGS, Check.FATAL_RAISED,
       Check.FATAL_SILENT, Check.UNTOUCHED)
UPDATE = (Check.WEIGHTS, Check.MOMENTUM, Check.PSW_GRAD)
# checks of the stored weights in another form than WEIGHTS: a finding that explains wrong weights explains them
OF_WEIGHTS = (Check.SR_NEIGHBOURS, Check.SR_BIAS)


@dataclasses.dataclass(frozen=True)
class KnownFinding:
    id: str
    suts: tuple[str, ...]
    description: str
    applies: Callable[[AnyCase], bool]  # predicate on the case
    checks: tuple[Check, ...] = ()      # the SUT's checks against FP64 it explains
    error: str = ""                     # a regex: it explains an exception whose traceback matches
    kinds: tuple[FailureKind, ...] = ()  # it explains any failure of these kinds (a memory fault's forms)
    under: Callable[[Optional[KernelConfig]], bool] = lambda config: True  # predicate on the effective config
    worst: Callable[[AnyCase, Mismatch], bool] = lambda case, entry: True   # on a failing check's worst entry

    def applies_to(self, result: CaseResult) -> bool:
        """Whether it applies to ``result``'s case under the config that case ran with."""
        return bool(self.applies(result.case)) and bool(self.under(result.config))

    def explains(self, report: Report, case: Optional[AnyCase] = None) -> bool:
        judged = report.check in self.checks or (report.check in OF_WEIGHTS and Check.WEIGHTS in self.checks)
        return (report.oracle == Oracle.FP64 and report.check is not None and judged
                and (report.worst is None or case is None or bool(self.worst(case, report.worst))))

    def explains_crash(self, result: CaseResult) -> bool:
        """Whether it explains ``result``'s error (an exception, a stopped access, a crash, a CUDA error)."""
        return result.kind in self.kinds or (bool(self.error) and result.error is not None
                                             and re.search(self.error, result.error) is not None)


def _spec(pred: Callable) -> Callable[[AnyCase], bool]:
    return lambda case: bool(pred(case.spec))


def _bad(id_kind: str = "", offset_kind: str = "") -> Callable[[AnyCase], bool]:
    def pred(case: AnyCase) -> bool:
        if case.bad is None:
            return False
        return (any(b.kind == id_kind for b in case.bad.bad_ids) if id_kind
                else offset_kind in case.bad.bad_offsets)
    return pred


def _vbe(pred: Callable[[AnyCase], bool]) -> Callable[[AnyCase], bool]:
    """``pred`` on VBE cases only."""
    return lambda case: case.spec.vbe and bool(pred(case))


def _fbgemm_forward(case: AnyCase) -> bool:
    s = case.spec
    out = s.output_dtype.torch
    return findings.fbgemm_forward_difference(s.pooling, s.weighted, out) is not None


def _fbgemm_backward(case: AnyCase) -> bool:
    s = case.spec
    return findings.fbgemm_backward_difference(s.pooling, s.weighted) is not None


def _fbgemm_update(text: str) -> Callable[[AnyCase], bool]:
    """Whether ``text`` is why FBGEMM's CPU update is not judged on the case (``findings.fbgemm_update_difference``)."""
    def pred(case: AnyCase) -> bool:
        s = case.spec
        weights = s.weights_dtype.torch
        return findings.fbgemm_update_difference(s.optimizer, weights, s.feature_table_map) == text
    return pred


def _fbgemm_feature_map(text: str) -> Callable[[AnyCase], bool]:
    """Whether ``text`` is among the reasons FBGEMM's CPU TBE cannot run the case's feature map
    (``findings.fbgemm_feature_map_differences``)."""
    def pred(case: AnyCase) -> bool:
        s = case.spec
        out = s.output_dtype.torch
        return text in findings.fbgemm_feature_map_differences(s.optimizer, out, s.feature_table_map)
    return pred


def _stored_through_fp16(case: AnyCase, entry: Mismatch) -> bool:
    """The worst weight is an fp16 value, and for bf16 weights one that bf16 would hold more finely (outside fp16's
    normal range, where fp16 has subnormals or overflows): a store that rounded to fp16, not to the weights' dtype."""
    got = torch.tensor(entry.got, dtype=torch.float64)
    on_grid = bool(torch.isinf(got) or got.half().double() == got)
    if case.spec.weights_dtype == "fp32":
        return on_grid
    return on_grid and not (2.0 ** -14 <= abs(entry.expected) <= 65504.0)


CPU, CUDA, TORCHREC = "fbgemm-cpu", "fbgemm-cuda", "torchrec-triton"
MEMORY_FAULT = (FailureKind.SANITIZER, FailureKind.CRASH, FailureKind.CUDA_ERROR)  # one bad access, three forms
TRIAGE: tuple[KnownFinding, ...] = (
    KnownFinding("fbgemm-weighted-mean-fp16-forward", (CPU,), findings.FBGEMM_WEIGHTED_MEAN_FP16_FORWARD,
                 _fbgemm_forward, (Check.FORWARD,)),
    KnownFinding("fbgemm-weighted-mean-backward", (CPU,), findings.FBGEMM_WEIGHTED_MEAN_BACKWARD,
                 _fbgemm_backward, UPDATE),
    KnownFinding("fbgemm-fp16-sgd-step-rounding", (CPU,), findings.FBGEMM_FP16_SGD_UPDATE,
                 _fbgemm_update(findings.FBGEMM_FP16_SGD_UPDATE), (Check.WEIGHTS,)),
    KnownFinding("fbgemm-sgd-split-feature-runs", (CPU,), findings.FBGEMM_SGD_SPLIT_FEATURE_RUNS,
                 _fbgemm_update(findings.FBGEMM_SGD_SPLIT_FEATURE_RUNS), (Check.WEIGHTS,)),
    KnownFinding("fbgemm-adagrad-unsorted-feature-map", (CPU,), findings.FBGEMM_ADAGRAD_UNSORTED_FEATURE_MAP,
                 _fbgemm_feature_map(findings.FBGEMM_ADAGRAD_UNSORTED_FEATURE_MAP), error=r"does not match c_block size"),
    KnownFinding("fbgemm-adagrad-unsorted-feature-map-vbe", (CPU,), findings.FBGEMM_ADAGRAD_UNSORTED_FEATURE_MAP_VBE,
                 _vbe(_fbgemm_feature_map(findings.FBGEMM_ADAGRAD_UNSORTED_FEATURE_MAP)), (Check.WEIGHTS, Check.MOMENTUM)),
    KnownFinding("fbgemm-fp16-output-unsorted-feature-map", (CPU,), findings.FBGEMM_FP16_OUTPUT_UNSORTED_FEATURE_MAP,
                 _fbgemm_feature_map(findings.FBGEMM_FP16_OUTPUT_UNSORTED_FEATURE_MAP),
                 error=r"is out of bounds: \d+, range 0 to -\d+"),
    KnownFinding("fbgemm-minus-one-raises", (CPU,), findings.FBGEMM_MINUS_ONE_CPU, _bad(id_kind="minus_one"),
                 error=r"out of bounds: -1"),
    KnownFinding("fbgemm-first-offset-kept", (CPU, TORCHREC), findings.FBGEMM_FIRST_OFFSET_KEPT,
                 _bad(offset_kind="first_positive"), ANY),
    KnownFinding("fbgemm-cuda-weighted-mean-psw-grad", (CUDA,), findings.FBGEMM_CUDA_WEIGHTED_MEAN_PSW_GRAD,
                 _spec(lambda s: s.pooling == "mean" and s.weighted), (Check.PSW_GRAD,)),
    KnownFinding("fbgemm-cuda-mean-grad-rounded", (CUDA,), findings.FBGEMM_CUDA_MEAN_GRAD_ROUNDED,
                 _spec(lambda s: s.pooling == "mean" and s.output_dtype in ("fp16", "bf16")),
                 (Check.WEIGHTS, Check.MOMENTUM)),
    KnownFinding("torchrec-weighted-unstable-argsort", (TORCHREC,), findings.TORCHREC_WEIGHTED_UNSTABLE_ARGSORT,
                 _spec(lambda s: s.weighted), (Check.WEIGHTS, Check.MOMENTUM)),
    KnownFinding("torchrec-missing-psw-grad", (TORCHREC,), findings.TORCHREC_MISSING_PSW_GRAD,
                 _spec(lambda s: s.weighted), (Check.MISSING_PSW_GRAD,)),
    KnownFinding("torchrec-empty-batch-backward-raises", (TORCHREC,), findings.TORCHREC_EMPTY_BATCH_BACKWARD,
                 _spec(lambda s: s.batch_size == 0), error=r"B must be positive"),
    KnownFinding("torchrec-broken-offsets-out-of-bounds", (TORCHREC,), findings.TORCHREC_BROKEN_OFFSETS_OUT_OF_BOUNDS,
                 _bad(offset_kind="first_positive"), kinds=MEMORY_FAULT),
    KnownFinding("torchrec-stochastic-rounding-through-fp16", (TORCHREC,), findings.TORCHREC_STOCHASTIC_ROUNDING_FP16,
                 _spec(lambda s: s.weights_dtype in ("fp32", "bf16")), (Check.WEIGHTS, Check.SR_NEIGHBOURS),
                 under=lambda config: config is not None and config.stochastic_rounding, worst=_stored_through_fp16),
)


def for_sut(sut: str, triage: Sequence[KnownFinding] = TRIAGE) -> tuple[KnownFinding, ...]:
    """The findings triaged for ``sut``: the entries of ``triage`` naming it, then those the SUT
    carries itself (``fuzz.sut.protocol.SUT.findings``, for SUTs registered from outside this project)."""
    from fuzz.sut import get

    target = get(sut)  # an address NAME@DIR is triaged as NAME
    return tuple(f for f in triage if target.name in f.suts) + tuple(target.findings)


def explain(sut: str, result: CaseResult, triage: Sequence[KnownFinding] = TRIAGE,
            only: Optional[Sequence[str]] = None) -> Optional[tuple[KnownFinding, ...]]:
    """The known findings that together explain every failure of ``result`` (in triage order), or None
    when it passed or some failure is not on the list. ``only`` restricts the findings used to these ids."""
    if result.ok:
        return None
    usable = [f for f in for_sut(sut, triage) if (only is None or f.id in only) and f.applies_to(result)]
    used: list[KnownFinding] = []

    def take(pred) -> bool:
        hit = next((f for f in usable if pred(f)), None)
        if hit is not None and hit not in used:
            used.append(hit)
        return hit is not None

    if result.error is not None and not take(lambda f: f.explains_crash(result)):
        return None
    for r in result.reports:
        if not r.ok and not take(lambda f, r=r: f.explains(r, result.case)):
            return None
    return tuple(f for f in usable if f in used)
