"""Level (c) of the gate: the candidate on the dtype and mode matrix, against FP64 and FBGEMM's CPU TBE.

A fixed matrix of multi-table cases, sized by the backend's lookup budget: every optimizer x
pooling x weighting, weights fp32/fp16/bf16 and outputs fp32/fp16/bf16 in turn, tables at
bucket edges and wider than the largest bucket, int32 and int64 ids, hot rows at the
candidate's long-run threshold and across two chunks, and one single fp16 table on the
small-table path. Each case is one training step judged by ``fuzz.judge.check.run_case`` (the FP64
authority under the derived bounds, the verdict every other check uses), in a supervised worker
(``fuzz.execution.supervisor``) like every other command's cases, so a crash or a hang of the kernel
fails the case instead of the gate. Where FBGEMM's CPU
TBE applies (fp32/fp16 weights and outputs, every D % 4 == 0) it runs the same step from the
same weights on every case (``fuzz.judge.fbgemm_sample.run``, which campaigns use on a sample) and
is checked against the same FP64 step and bounds, skipping only what ``oracles/findings.py``
triages. Kernel and FBGEMM both within the bound of FP64 puts the kernel within twice the
bound of FBGEMM. FBGEMM outside it where nothing is triaged fails the level as an oracle
disagreement to triage, named as such (it does not depend on the candidate), as it fails a
campaign; a kernel failure says whether FBGEMM corroborates the reference on that case and
whether the baseline fails the same case.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import Callable, Optional

from fuzz.judge import fbgemm_sample
from cases import CaseSpec, CaseTensors, HotRow, tensors
from fuzz.execution import supervisor as supervision
from fuzz.judge import CaseResult
from fuzz.profiles import MAX_LOOKUPS
from fuzz.status import OracleVerdict, Status
from oracles import fbgemm_cpu
from oracles.compare import Oracle, Report
from oracles.findings import fbgemm_backward_difference, fbgemm_forward_difference, fbgemm_update_difference
from tbe import KernelConfig
from tbe.modes import FloatDtype, Optimizer, Pooling


@dataclasses.dataclass
class OracleCase:
    label: str
    kernel: CaseResult
    fbgemm: OracleVerdict
    fbgemm_detail: list[str]     # triaged findings, why not applicable, or the disagreement
    baseline_ok: Optional[bool] = None  # set when the candidate fails the case

    @property
    def ok(self) -> bool:
        """The kernel passed every FP64 check (FBGEMM's verdict is ``fbgemm``)."""
        return kernel_ok(self.kernel)

    def to_dict(self) -> dict:
        return {"label": self.label, "ok": self.ok, "case": self.kernel.case.to_dict(),
                "max_ratio": self.kernel.max_ratio, "lookups": self.kernel.lookups, "fbgemm": self.fbgemm,
                "fbgemm_detail": self.fbgemm_detail, "baseline_ok": self.baseline_ok,
                "failures": [str(r) for r in self.kernel.reports if not r.ok and not is_fbgemm(r)]
                + ([self.kernel.error] if self.kernel.error else [])}


@dataclasses.dataclass
class OracleResult:
    status: Status = Status.PASS
    cases: list[OracleCase] = dataclasses.field(default_factory=list)
    reasons: list[str] = dataclasses.field(default_factory=list)
    findings: list[str] = dataclasses.field(default_factory=list)  # untriaged oracle disagreements
    notes: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"status": self.status, "reasons": self.reasons, "findings": self.findings, "notes": self.notes,
                "seconds": round(self.seconds, 2), "cases": [c.to_dict() for c in self.cases],
                "fbgemm_checked": sum(c.fbgemm != OracleVerdict.NOT_APPLICABLE for c in self.cases)}


def matrix(config: KernelConfig, max_lookups: int = MAX_LOOKUPS) -> list[tuple[str, CaseSpec]]:
    """The level's cases for ``config`` within ``max_lookups`` lookups each."""
    scale = max(1, max_lookups // 4000)              # 1 on the interpreter, thousands on a GPU
    batch, length = min(6 * scale, 2048), min(6 + scale, 40)
    budget = max_lookups - 3 * batch * length
    hots = [c for c in (config.long_run_threshold, 2 * config.chunk_size + 1, 64 * config.chunk_size + 3)
            if c <= budget // 2]
    fb_tables = ((50, 4), (97, 64), (23, 2 * max(config.dim_buckets) + 4))
    any_tables = ((50, 3), (97, 33), (23, max(config.dim_buckets) + 3))
    dtypes = tuple(FloatDtype)
    out: list[tuple[str, CaseSpec]] = []
    combos = list(itertools.product(Optimizer, Pooling, (False, True)))
    for i, (opt, pooling, weighted) in enumerate(combos + combos[:3]):
        fb_dims = i < len(combos)
        wdt = dtypes[i % 3]
        odt = wdt if wdt == "bf16" or not fb_dims else ("fp32", "fp16")[(i // 3) % 2]
        tables = fb_tables if fb_dims else any_tables
        hot = tuple(HotRow(k % 3, 5 + k, c) for k, c in enumerate(hots))
        spec = CaseSpec(tables=tables, batch_size=batch, pooling=pooling, weights_dtype=wdt, output_dtype=odt,
                        index_dtype=("int64", "int32")[i % 2], weighted=weighted, optimizer=opt, learning_rate=0.5,
                        max_length=length, hot_rows=hot, seed=7000 + i)
        dims = "D%4==0" if fb_dims else "any D"
        out.append((f"{opt} {pooling}{' weighted' if weighted else ''} {wdt}->{odt} ({dims}; hot SL "
                    f"{', '.join(map(str, hots)) or 'none'})", spec))
    st_rows, st_dim = config.small_table_max_rows, config.small_table_min_dim
    st_len = max(config.small_table_min_pooling, 1)
    st_batch = max(1, min(2 * config.small_table_bags_per_program + 1, max_lookups // (2 * st_len)))
    out.append((f"small table E={st_rows} D={st_dim} L={st_len} fp16->fp32", CaseSpec(
        tables=((st_rows, st_dim),), batch_size=st_batch, weights_dtype="fp16", output_dtype="fp32",
        length_profile="fixed", max_length=st_len, optimizer="exact_rowwise_adagrad", learning_rate=0.5,
        seed=7100)))
    return out


def triaged_findings(spec: CaseSpec) -> list[str]:
    """The ``oracles/findings.py`` entries that change how FBGEMM is judged on ``spec``."""
    wdt, odt = spec.weights_dtype.torch, spec.output_dtype.torch
    pooling, optimizer = spec.pooling, spec.optimizer
    found = [("forward not compared: ", fbgemm_forward_difference(pooling, spec.weighted, odt)),
             ("update not compared: ", fbgemm_update_difference(optimizer, wdt, spec.feature_table_map)),
             ("update compared with the SUM-pooled step: ", fbgemm_backward_difference(pooling, spec.weighted))]
    return [head + why for head, why in found if why]


def is_fbgemm(report: Report) -> bool:
    return report.oracle == Oracle.FBGEMM


def kernel_ok(result: CaseResult) -> bool:
    """The kernel's own verdict on a case: every FP64 check, none of FBGEMM's."""
    return result.error is None and all(r.ok for r in result.reports if not is_fbgemm(r))


def fbgemm_verdict(spec: CaseSpec, t: CaseTensors, result: CaseResult) -> tuple[str, list[str]]:
    """FBGEMM's CPU step on the case (``fuzz.judge.fbgemm_sample``: judged against the FP64 step under
    the derived bounds and the triage list)."""
    why = fbgemm_sample.not_applicable(spec, int(t.indices.numel()))
    if why is not None:
        return OracleVerdict.NOT_APPLICABLE, [why]
    try:  # here, not in the kernels' worker: every case, whether or not the worker's sample took it
        reports = fbgemm_sample.run(spec, t)
    except Exception as e:  # noqa: BLE001  (an oracle crash is a finding about the oracle)
        return OracleVerdict.DISAGREES, [f"FBGEMM raised {type(e).__name__}: {e}"]
    bad = [str(r) for r in reports if not r.ok]
    if bad:
        return OracleVerdict.DISAGREES, bad
    triaged = triaged_findings(spec)
    return (OracleVerdict.TRIAGED, triaged) if triaged else (OracleVerdict.AGREES, [])


def run_oracle_level(
    baseline: KernelConfig, candidate: KernelConfig, max_lookups: int = MAX_LOOKUPS,
    progress: Optional[Callable[[str], None]] = None, max_cases: Optional[int] = None,
    deadline: Optional[float] = None, supervisor: Optional[supervision.Supervisor] = None,
) -> OracleResult:
    """Every matrix case (or the first ``max_cases``) under the candidate, FBGEMM beside it; stops at
    the first candidate failure. Past ``deadline`` (time.monotonic()) no case starts and the level
    is "not run": an unfinished matrix never passes. ``supervisor`` runs the kernels' cases (default: this
    process's shared one); FBGEMM, an oracle, runs here."""
    t0 = time.perf_counter()
    sup = supervisor or supervision.shared()
    res = OracleResult()
    cases = matrix(candidate, max_lookups)
    if max_cases is not None and max_cases < len(cases):
        res.notes.append(f"only the first {max_cases} of {len(cases)} matrix cases ran (--oracle-cases); the "
                         f"first not run: {cases[max_cases][0]}")
        cases = cases[:max_cases]
    for i, (label, spec) in enumerate(cases):
        if deadline is not None and time.monotonic() > deadline:
            res.status, res.reasons = Status.NOT_RUN, [f"out of time after {i} of {len(cases)} matrix cases"]
            res.seconds = time.perf_counter() - t0
            return res
        saved = tensors(spec)
        kernel = sup.run(spec, candidate)
        verdict, detail = fbgemm_verdict(spec, saved, kernel)
        case = OracleCase(label, kernel, verdict, detail)
        res.cases.append(case)
        if progress is not None:
            progress(f"  (c) {label}: {'ok' if case.ok else 'FAIL'}, fbgemm {verdict}")
        if verdict == OracleVerdict.DISAGREES:
            res.findings.append(f"{label}: FBGEMM vs FP64 - " + "; ".join(detail[:2]))
            res.reasons.append(f"FBGEMM disagrees with FP64 on {label}: an oracle disagreement, not the "
                               f"candidate's (it does not depend on the config); triage it in oracles/findings.py")
        if not case.ok:
            case.baseline_ok = kernel_ok(sup.run(spec, baseline))
            corroborated = {OracleVerdict.AGREES: "; FBGEMM agrees with FP64 on this case",
                            OracleVerdict.TRIAGED: "; FBGEMM agrees with FP64 where not triaged"}.get(verdict, "")
            how = "disagrees with FP64 on" if kernel.error is None else f"fails ({kernel.headline}) on"
            res.reasons.append(f"candidate {how} {label}"
                               + (" (the baseline fails it too)" if not case.baseline_ok else "") + corroborated)
        if res.reasons:
            break
    if not fbgemm_cpu.available():
        res.notes.append("FBGEMM's CPU TBE did not load: cases were checked against FP64 only")
    res.status = Status.FAIL if res.reasons else Status.PASS
    res.seconds = time.perf_counter() - t0
    return res
