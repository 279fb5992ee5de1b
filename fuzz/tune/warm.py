"""Parallel compilation of a tune trial's kernels, before the trial is timed.

A batch's sizes never make a new kernel (sizes and counts are not specialized, see
``fuzz.compile.warmup``), so a tiny case with a shape's table width, weight dtype, weighting and
optimizer reaches the same specializations as the shape itself. Before a trial is timed, one
persistent worker process per kind of shape runs that case under the trial's config
(``fuzz.compile.warmup``'s worker), so Triton compiles the trial's new kernels side by side into its
disk cache and the timing process only loads them. The workers start once per tune run.
"""

from __future__ import annotations

import time
from typing import Any, Optional, Sequence

from fuzz.gate import PerfShape
from cases import CaseSpec, HotRow
from tbe import KernelConfig


def tiny_specs(shapes: Sequence[PerfShape], config: KernelConfig) -> list[CaseSpec]:
    """One tiny case per kind of shape, as the timing builds it (int64 ids, no bounds check)."""
    kinds = dict.fromkeys((dim, s.weights_dtype, s.output_dtype, s.weighted, s.optimizer)
                          for s in shapes for _, dim in s.specs)
    hot = (HotRow(0, 0, config.fused_long_min_lookups),) if config.fused_long_tier and \
        config.fused_long_min_lookups > 0 else ()  # the fused tier runs only from this many lookups
    return [CaseSpec(tables=((64, dim),), batch_size=2, weights_dtype=w, output_dtype=out, index_dtype="int64",
                     weighted=weighted, optimizer=opt, bounds_check="none", length_profile="fixed", max_length=2,
                     hot_rows=hot, seed=1) for dim, w, out, weighted, opt in kinds]


class TrialWarmer:
    """Worker processes that compile a config's kernels for the tune's shapes (GPU only)."""

    def __init__(self, shapes: Sequence[PerfShape], processes: Optional[int] = None) -> None:
        import concurrent.futures as cf
        import multiprocessing as mp

        from fuzz.compile import default_processes

        self.shapes = list(shapes)
        n = min(len(tiny_specs(shapes, KernelConfig())), processes or default_processes())
        self.pool = cf.ProcessPoolExecutor(max_workers=max(1, n), mp_context=mp.get_context("spawn"))

    def warm(self, config: KernelConfig) -> dict[str, Any]:
        """Compile ``config``'s kernels for every kind of shape; returns counts, errors and seconds."""
        from fuzz.compile import WarmCase, run_group

        t0 = time.perf_counter()
        futures = [self.pool.submit(run_group, [WarmCase(config, spec)]) for spec in tiny_specs(self.shapes, config)]
        out: dict[str, Any] = {"compiled": 0, "loaded": 0, "errors": []}
        for f in futures:
            try:
                r = f.result()
            except Exception as e:  # noqa: BLE001  (a dead worker: the timing will compile in-process)
                out["errors"].append(f"warm-up worker failed: {type(e).__name__}: {e}")
                continue
            out["compiled"] += r["compiled"]
            out["loaded"] += r["loaded"]
            out["errors"] += r["errors"]
        out["seconds"] = time.perf_counter() - t0
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
