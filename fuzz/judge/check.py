"""Judge one case: run it through ``fuzz.judge.differential`` and record what it exercised.

The verdict itself is ``fuzz.judge.differential.check_batch`` (forward + every training step
against FP64); this module only adds what a campaign counts (lookups, tiers, the largest
error/bound ratio per check) and turns a kernel exception into a failing result instead of an
escaped exception. A failure has a kind: a mismatch (some Report failed), an exception, a
sanitizer finding (``fuzz.memcheck.sanitizer``), a CUDA error, or, seen by ``fuzz.execution.supervisor`` from
outside the process, a crash (a signal or an exit) or a hang.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import traceback
from typing import Iterable, Optional

import torch

from cases import AnyCase, CaseKind, CaseTensors, tensors
from cases.spec import lookup_features
from fuzz.judge import coverage
from fuzz.judge.differential import check_batch
from fuzz.judge.loop_use import LoopUse, observing
from fuzz.compile import CompileCounts
from fuzz.errors import MemoryViolation
from fuzz.judge.teeth import Teeth
from fuzz.status import FailureKind
from fuzz.time_split import Phases
from oracles.compare import Check, Oracle, Report
from oracles.elements import layout_tensors
from oracles.error_model import ErrorModel
from fuzz.sut import DEFAULT as DEFAULT_SUT
from fuzz.sut import get as get_sut
from tbe import KernelConfig
from tbe.backend import default_device
from tbe.forward_dispatch import choose_path
from tbe.routing import MULTI_CHUNK, backward_paths, bounds_path, route


RAN = "ran to completion"  # the yes/no check a crash, hang or exception fails (outcomes_by_check)


@dataclasses.dataclass(frozen=True)
class CheckOutcome:
    """One kind of check in one example: its largest error / bound, whether it has a bound at all, its verdict."""

    ratio: float   # 0 for a yes/no check
    graded: bool   # False: a yes/no check (raised or not, counts equal or not)
    ok: bool


@dataclasses.dataclass
class CaseResult:
    case: AnyCase
    reports: list[Report]
    lookups: int
    tiers: frozenset[str]
    seconds: float
    error: Optional[str] = None  # what went wrong besides a Report: a traceback, a finding, the crash
    max_segment: int = 0         # longest run (lookups of one distinct row), for targeting SL extremes
    segment_hist: tuple = ()     # (segment length, runs) per distinct length, ascending
    fbgemm: str = ""             # the FBGEMM CPU oracle's status for this case (fuzz.judge.fbgemm_sample)
    teeth: Optional[Teeth] = None  # each weight bound relative to its update, per SL band
    error_kind: Optional[FailureKind] = None  # with ``error``: one of ERROR_KINDS
    notes: list[str] = dataclasses.field(default_factory=list)  # e.g. how a crash behaved in a fresh worker
    compiles: Optional[CompileCounts] = None  # Triton compilations the case caused (set by fuzz.execution.worker)
    phases: dict[str, float] = dataclasses.field(default_factory=dict)  # seconds per fuzz.time_split phase
    cells: frozenset = frozenset()  # coverage cells (fuzz.judge.coverage) it counts in; none for another SUT
    config: Optional[KernelConfig] = None  # the effective config it ran under (drawn overrides applied)
    outside: Optional[int] = None  # interpreted kernel accesses outside their launch's tensors (None: not watched)

    @property
    def ok(self) -> bool:
        return self.error is None and all(r.ok for r in self.reports)

    @property
    def kind(self) -> FailureKind:
        """OK, MISMATCH, or how it failed otherwise (one of ERROR_KINDS)."""
        if self.error is not None:
            return self.error_kind or FailureKind.EXCEPTION
        return FailureKind.OK if self.ok else FailureKind.MISMATCH

    @property
    def max_ratio(self) -> float:
        if self.error is not None:
            return float("inf")
        return max((r.max_ratio for r in self.reports), default=0.0)

    @property
    def headline(self) -> str:
        """One line saying how it failed: the kind and the error's last line or the first failing check."""
        if self.error is not None:
            lines = [line for line in self.error.strip().splitlines() if line.strip()]
            last = lines[-1] if self.kind == FailureKind.EXCEPTION else lines[0]
            return f"{self.kind}: {last.strip()}"
        bad = [r.what for r in self.reports if not r.ok]
        if not bad:
            return "ok"
        where = self.sub_case_text()
        return f"mismatch: {bad[0]}" + (f" ({where})" if where else "")

    def sub_case_text(self) -> str:
        """'sub-case i of K, the pack's tables a-b' for a failing pack that names its sub-case; '' otherwise."""
        sub = self.sub_case
        if sub is None:
            return ""
        start = self.case.table_starts()[sub]
        return (f"sub-case {sub} of {len(self.case.subs)}, the pack's tables {start}-"
                f"{start + self.case.subs[sub].num_tables - 1}")

    @property
    def sub_case(self) -> Optional[int]:
        """A failing pack's sub-case that holds the first failing check's table (its worst entry's, or the
        table the check is of); None for a case that is not a pack, or a failure that names no table."""
        if self.case.kind is not CaseKind.PACK:
            return None
        for r in self.reports:
            if r.ok:
                continue
            table = r.worst.table if r.worst is not None and r.worst.table >= 0 else r.table
            if table is not None and table >= 0:
                return self.case.sub_of_table(table)
        return None

    @property
    def failed_check(self) -> Optional[str]:
        """The kind of check (``Report.key``) of the first failing Report, None if none failed."""
        return next((r.key for r in self.reports if not r.ok), None)

    def ratios_by_check(self) -> dict[str, float]:
        """Largest ratio per kind of graded check ('forward vs fp64', 'weights after update', ...); yes/no
        checks have no bound, so no ratio (``outcomes_by_check`` keeps them)."""
        out: dict[str, float] = {}
        for r in self.reports:
            if not r.graded:
                continue
            out[r.key] = max(out.get(r.key, 0.0), r.max_ratio)
        return out

    def outcomes_by_check(self) -> dict[str, CheckOutcome]:
        """Per kind of check: largest ratio, graded or yes/no, passed; a comparison of nothing is left out, and
        an example that crashed, hung or raised fails the yes/no check ``RAN``."""
        out: dict[str, CheckOutcome] = {}
        for r in self.reports:
            if r.graded and r.num_checked == 0:
                continue
            key = r.key
            old = out.get(key, CheckOutcome(0.0, r.graded, True))
            out[key] = CheckOutcome(max(old.ratio, r.max_ratio if r.graded else 0.0), old.graded or r.graded,
                                    old.ok and r.ok)
        if self.error is not None:
            out[RAN] = CheckOutcome(0.0, False, False)
        return out

    def text(self) -> str:
        """Every Report's str (and the crash, if any): what report.txt holds."""
        lines = [str(r) for r in self.reports]
        if self.error is not None:
            lines.append(ERROR_KINDS[self.kind] + ":\n" + self.error)
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines) if lines else "(no reports)"


# kind -> the heading report.txt and replay print above the details
ERROR_KINDS = {
    FailureKind.EXCEPTION: "kernel raised",
    FailureKind.SANITIZER: "sanitizer finding (out-of-range access; the launch was stopped before it)",
    FailureKind.CUDA_ERROR: "CUDA error (the worker's context is unusable after it; the worker was replaced)",
    FailureKind.CRASH: "worker crashed",
    FailureKind.HANG: "worker hung",
}
# torch raises CUDA errors as one type; Triton's launcher raises them as RuntimeError, told only by its text
_CUDA_TYPES = tuple(t for t in (getattr(torch, "AcceleratorError", None),) if t is not None)
_TRITON_CUDA_MARKS = ("Triton Error [CUDA]", "CUDA error", "cudaError", "illegal memory access")


def classify(exc: BaseException) -> tuple[FailureKind, str]:
    """(kind, text) of an exception a check raised: a sanitizer finding anywhere in its chain, a CUDA
    error (the process's context is then poisoned), or a plain exception with its traceback."""
    seen, e, cuda = set(), exc, False
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, MemoryViolation):
            return FailureKind.SANITIZER, str(e.finding)
        cuda |= isinstance(e, _CUDA_TYPES) or (isinstance(e, RuntimeError) and any(m in str(e) for m in _TRITON_CUDA_MARKS))
        e = e.__cause__ or e.__context__
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=8))
    return (FailureKind.CUDA_ERROR if cuda else FailureKind.EXCEPTION), text


def tiers_of(case: AnyCase, t: CaseTensors, config: KernelConfig,
             device: Optional[torch.device] = None) -> tuple[frozenset[str], int, tuple]:
    """(kernel paths the case takes: forward path, backward tiers by segment length (or the small-table
    backward), bad ids;
    the longest segment length; (segment length, runs) per distinct length). The segment lengths are
    counted on ``device`` (default the CPU; a worker passes its kernels' device, where a 12M-lookup
    count takes milliseconds instead of a second)."""
    spec = case.spec
    layout = spec.layout
    B = spec.batch_size
    found = set()
    if case.bad is not None:
        found.add(bounds_path(config).value)
        return frozenset(found), 0, ()
    forward = choose_path(
        layout.feature_dims, layout.feature_rows, t.indices.numel(), B, spec.weights_dtype.torch,
        spec.output_dtype.torch, spec.weighted, config, vbe=spec.vbe,
    )
    found.add(forward.value)
    if not t.grad_outputs or t.indices.numel() == 0:
        return frozenset(found), 0, ()
    dev = device or torch.device("cpu")
    table_of = lookup_features(spec, t.offsets.to(dev), t.indices.numel())
    lin = layout_tensors(layout, dev).hash_size_cumsum[table_of] + t.indices.to(dev, torch.int64)
    sl = torch.unique(lin, return_counts=True)[1]
    routing = route(sl, t.indices.numel(), config, forward)
    found |= {p.value for p in backward_paths(routing)}
    if routing.multi_chunk:
        found.add(MULTI_CHUNK)
    lengths, runs = torch.unique(sl, return_counts=True)
    return frozenset(found), int(sl.max()), tuple(zip(lengths.tolist(), runs.tolist()))


def draw_device(sut: Optional[str] = None) -> torch.device:
    """Where a check materializes its case: this process's device when ``sut`` runs there (a GPU draws a large
    case in milliseconds, and its tensors need no copy), else the CPU. The values are the same on either."""
    dev = default_device()
    return dev if dev.type in get_sut(sut or DEFAULT_SUT).capabilities.devices else torch.device("cpu")


def run_case(
    case: AnyCase, config: Optional[KernelConfig] = None, saved: Optional[CaseTensors] = None,
    steps: bool = True, model: Optional[ErrorModel] = None, sut: str = DEFAULT_SUT,
) -> CaseResult:
    """Check ``case`` under ``config`` in this process; ``saved`` tensors (already materialized, or from
    an artifact) replace materialization, initial weights included. ``model`` picks the accumulation
    bound (default: ``$TBE_FUZZ_BOUND``, else worst case); ``sut`` is the registry name of the system
    under test (``fuzz.sut.protocol``; a string, so a worker process can resolve it again). A spec that cannot
    be materialized raises ValueError (a generator bug). Drivers call it through ``fuzz.execution.supervisor``."""
    config = config or KernelConfig()
    spec = case.spec
    t0 = time.perf_counter()
    phases = Phases()
    with phases.timed("materialize"):
        t = saved if saved is not None else tensors(case, steps=steps, weights=False, device=draw_device(sut))
    grads = t.grad_outputs if steps else []
    reports: list[Report] = []
    error = kind = None
    teeth = Teeth()
    t1 = time.perf_counter()
    beside = get_sut(sut).capabilities.project_kernels  # the sample is an oracle beside this project's kernels
    with (observing() if beside else contextlib.nullcontext(LoopUse())) as loops:
        try:
            reports = check_batch(spec, config, t.indices, t.offsets, t.per_sample_weights, grads, model, teeth,
                                  sut=sut, initial_weights=t.initial_weights, phases=phases)
        except Exception as e:  # a failure on a case is a finding, kept with its traceback
            kind, error = classify(e)
    phases.seconds["oracles"] += max(0.0, time.perf_counter() - t1 - phases.seconds["sut"])
    fb_status = "" if beside else f"n/a: SUT {sut}"
    if error is None and grads and beside:
        with phases.timed("fbgemm"):
            fb_status, fb_reports = _fbgemm(case, t, grads)
        reports += fb_reports
    with phases.timed("bookkeeping"):
        # counted beside the kernels unless the check failed (a CUDA error leaves the device unusable)
        where = default_device() if error is None else None
        result = case_result(case, t, config, time.perf_counter() - t0, kind, error, reports, sut, where, loops.seen)
    result.fbgemm, result.teeth, result.phases = fb_status, teeth, phases.to_dict()
    return result


def case_result(case: AnyCase, t: CaseTensors, config: KernelConfig, seconds: float, kind: Optional[FailureKind],
                error: Optional[str], reports: Optional[list[Report]] = None, sut: str = DEFAULT_SUT,
                device: Optional[torch.device] = None, loops: Iterable = ()) -> CaseResult:
    """The CaseResult of ``case`` (materialized as ``t``) with ``error`` of ``kind`` (None: judged by reports).
    After a CUDA error the device's tensors cannot be read: the same batch is rebuilt on the CPU to count."""
    if kind == FailureKind.CUDA_ERROR and t.indices.device.type != "cpu":
        t, device = tensors(case, steps=False, weights=False), None
    tiers, max_segment, hist = tiers_of(case, t, config, device)
    target = get_sut(sut)
    caps = target.capabilities
    cells = coverage.cells_of(coverage.facts_of(case, t, hist, loops), config) if caps.project_kernels else frozenset()
    if target.paths is not None:  # a SUT that names its own kernel paths
        tiers = target.paths(case, t if error is None else None, config)
    elif not caps.project_kernels:  # not this project's kernels: the segment-length classes only
        tiers = frozenset(x for x in tiers if x.startswith("bwd:"))
    return CaseResult(case, reports or [], int(t.indices.numel()), tiers, seconds, error, max_segment,
                      hist, error_kind=None if error is None else kind, cells=cells, config=config)


def _fbgemm(case: AnyCase, t: CaseTensors, grads) -> tuple[str, list[Report]]:
    """FBGEMM's CPU TBE on a sample of the cases (``fuzz.judge.fbgemm_sample``); its crash is an oracle finding."""
    from fuzz.judge import fbgemm_sample

    try:
        return fbgemm_sample.check(case, dataclasses.replace(t, grad_outputs=list(grads)))
    except Exception as e:  # noqa: BLE001
        return fbgemm_sample.CHECKED, [Report(f"step 0 fbgemm raised ({type(e).__name__}: {e})", False, None, 1, 1,
                                              graded=False, check=Check.RAISED, step=0, oracle=Oracle.FBGEMM)]
