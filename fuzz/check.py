"""Judge one case: run it through ``fuzz.differential`` and record what it exercised.

The verdict itself is ``fuzz.differential.check_batch`` (forward + every training step
against FP64); this module only adds what a campaign counts (lookups, tiers, the largest
error/bound ratio per check) and turns a kernel crash into a failing result instead of an
escaped exception.
"""

from __future__ import annotations

import dataclasses
import re
import time
import traceback
from typing import Optional

import torch

from fuzz.cases import AnyCase, BadIdCase, CaseTensors, base_spec, tensors
from oracles.compare import Report
from fuzz.differential import check_batch
from tbe import KernelConfig
from tbe.forward_dispatch import choose_path
from tbe.modes import parse_float_dtype


@dataclasses.dataclass
class CaseResult:
    case: AnyCase
    reports: list[Report]
    lookups: int
    tiers: frozenset[str]
    seconds: float
    error: Optional[str] = None  # traceback of a kernel exception (a failure)
    max_segment: int = 0         # longest run (lookups of one distinct row), for targeting SL extremes
    segment_hist: tuple = ()     # (segment length, runs) per distinct length, ascending
    fbgemm: str = ""             # the FBGEMM CPU oracle's status for this case (fuzz.fbgemm_sample)

    @property
    def ok(self) -> bool:
        return self.error is None and all(r.ok for r in self.reports)

    @property
    def max_ratio(self) -> float:
        if self.error is not None:
            return float("inf")
        return max((r.max_ratio for r in self.reports), default=0.0)

    def ratios_by_check(self) -> dict[str, float]:
        """Largest ratio per kind of check ('forward vs fp64', 'weights after update', ...)."""
        out: dict[str, float] = {}
        for r in self.reports:
            key = check_name(r.what)
            out[key] = max(out.get(key, 0.0), r.max_ratio)
        return out

    def text(self) -> str:
        """Every Report's str (and the crash, if any): what report.txt holds."""
        lines = [str(r) for r in self.reports]
        if self.error is not None:
            lines.append("kernel raised:\n" + self.error)
        return "\n".join(lines) if lines else "(no reports)"


def check_name(what: str) -> str:
    """Group a Report's label across steps and tables: 'step 1 table 3 weights ...' -> 'weights ...'."""
    name = re.sub(r"^step \d+ ", "", what)
    name = re.sub(r"^table \d+ ", "", name)
    name = re.sub(r" at .*$", "", name)
    name = re.sub(r" \(.*\)$", "", name)
    return name


def tiers_of(case: AnyCase, t: CaseTensors, config: KernelConfig) -> tuple[frozenset[str], int, tuple]:
    """(kernel paths the case takes: forward path, backward tiers by segment length, bad ids;
    the longest segment length; (segment length, runs) per distinct length)."""
    spec = base_spec(case)
    layout = spec.layout
    B = spec.batch_size
    found = set()
    if isinstance(case, BadIdCase):
        found.add("bounds:" + ("fused" if config.fused_bounds_check else "standalone"))
        return frozenset(found), 0, ()
    found.add("fwd:" + choose_path(
        layout.dims, layout.rows, t.indices.numel(), B, parse_float_dtype("w", spec.weights_dtype),
        parse_float_dtype("o", spec.output_dtype), spec.weighted, config,
    ))
    if not t.grad_outputs or t.indices.numel() == 0:
        return frozenset(found), 0, ()
    off = t.offsets.to(torch.int64)
    table_of = torch.repeat_interleave(torch.arange(layout.num_tables), off[B::B] - off[:-1:B])
    lin = torch.tensor(layout.hash_size_cumsum[:-1], dtype=torch.int64)[table_of] + t.indices.to(torch.int64)
    sl = torch.unique(lin, return_counts=True)[1]
    if bool((sl < config.long_run_threshold).any()):
        found.add("bwd:short")
    if bool((sl >= config.long_run_threshold).any()):
        found.add("bwd:long_fused" if config.fused_long_tier else "bwd:long")
        if bool((sl > config.chunk_size).any()):
            found.add("bwd:multi_chunk")
    lengths, runs = torch.unique(sl, return_counts=True)
    return frozenset(found), int(sl.max()), tuple(zip(lengths.tolist(), runs.tolist()))


def run_case(
    case: AnyCase, config: Optional[KernelConfig] = None, saved: Optional[CaseTensors] = None,
    steps: bool = True,
) -> CaseResult:
    """Check ``case`` under ``config``; ``saved`` tensors (already materialized, or from an artifact)
    replace materialization. A spec that cannot be materialized raises ValueError (a generator bug)."""
    config = config or KernelConfig()
    spec = base_spec(case)
    t0 = time.perf_counter()
    t = saved if saved is not None else tensors(case, config, steps)
    grads = t.grad_outputs if steps else []
    reports: list[Report] = []
    error = None
    try:
        reports = check_batch(spec, config, t.indices, t.offsets, t.per_sample_weights, grads)
    except Exception:  # a crash on a case is a finding, kept with its traceback
        error = traceback.format_exc(limit=8)
    fb_status = ""
    if error is None and grads:
        fb_status, fb_reports = _fbgemm(case, t, grads)
        reports += fb_reports
    tiers, max_segment, hist = tiers_of(case, t, config)
    return CaseResult(case, reports, int(t.indices.numel()), tiers, time.perf_counter() - t0, error, max_segment,
                      hist, fb_status)


def _fbgemm(case: AnyCase, t: CaseTensors, grads) -> tuple[str, list[Report]]:
    """FBGEMM's CPU TBE on a sample of the cases (``fuzz.fbgemm_sample``); its crash is an oracle finding."""
    from fuzz import fbgemm_sample

    try:
        return fbgemm_sample.check(case, dataclasses.replace(t, grad_outputs=list(grads)))
    except Exception as e:  # noqa: BLE001
        return fbgemm_sample.CHECKED, [Report(f"step 0 fbgemm raised ({type(e).__name__}: {e})", False, None, 1, 1)]
