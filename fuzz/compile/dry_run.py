"""Count the kernel specializations a warm-up would build, without compiling anything.

Runs every warm-up case (``fuzz.compile.warmup``'s groups, in the same worker processes) with
``fuzz.compile.specializations.record(dry_run=True)``: each launch is noted and skipped, so this
works on a CPU-only machine as well as on a GPU. The keys come back per *base* (a config whose
campaign the warm-up covers: its override profiles and its opening tour), so a report can say
which specializations a planted-fault config adds to the default's: a fault should add
specializations only of the kernels whose code it changes.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Optional, Sequence

from fuzz.compile.specializations import by_kernel
from fuzz.compile.warmup import Unit, WarmCase, default_processes, unit_groups


def _record_group(cases: list[WarmCase]) -> set:
    """Worker: the launch keys of one group's cases (no kernel runs)."""
    from fuzz.compile.specializations import record
    from fuzz.compile.warmup import exercise
    from tbe import faults

    with faults.allow(), record(dry_run=True) as keys:
        for c in cases:
            exercise(c.spec, c.config, c.backward)
    return keys


@dataclasses.dataclass
class DryRunResult:
    """Specializations per kernel over all bases, and what each base adds to the first one."""

    specializations: dict[str, int]
    bases: list[dict[str, Any]]   # {"base": label, "total": n, "new": n not in the first base, "new_by_kernel"}
    cases: int
    groups: int
    processes: int
    seconds: float

    @property
    def total(self) -> int:
        return sum(self.specializations.values())

    def to_dict(self) -> dict[str, Any]:
        return {"specializations": self.specializations, "total": self.total, "bases": self.bases,
                "cases": self.cases, "groups": self.groups, "processes": self.processes,
                "seconds": round(self.seconds, 1), "compiled": "not run: dry run"}

    def text(self) -> str:
        lines = [f"warm-up dry run: {self.total} kernel specializations ({self.cases} cases in {self.groups} "
                 f"groups on {self.processes} processes, {self.seconds:.1f}s; nothing compiled)"]
        lines += [f"  {name}: {n}" for name, n in self.specializations.items()]
        for b in self.bases[1:]:
            new = ", ".join(f"{k} {n}" for k, n in b["new_by_kernel"].items()) or "none"
            lines.append(f"  {b['base']}: {b['total']} specializations, {b['new']} not in {self.bases[0]['base']} "
                         f"({new})")
        return "\n".join(lines)


def dry_run(bases: Sequence[tuple[str, Sequence[Unit]]], processes: Optional[int] = None,
            progress: Optional[Callable[[str], None]] = None) -> DryRunResult:
    """Record every specialization the warm-up of each (label, units) reaches (``campaign_units([config])``
    for a campaign); ``processes`` 1 runs in this process."""
    t0 = time.perf_counter()
    jobs = [(label, g) for label, units in bases for unit in units for g in unit_groups(unit)]
    n = max(1, min(processes or default_processes(), len(jobs)))
    keys: dict[str, set] = {label: set() for label, _ in bases}
    if n == 1:
        for label, g in jobs:
            keys[label] |= _record_group(g)
    else:
        import concurrent.futures as cf
        import multiprocessing as mp

        with cf.ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn")) as pool:
            futures = {pool.submit(_record_group, g): label for label, g in jobs}
            for k, fut in enumerate(cf.as_completed(futures), 1):
                keys[futures[fut]] |= fut.result()
                if progress is not None and k % 32 == 0:
                    progress(f"  dry run: {k}/{len(jobs)} groups, {time.perf_counter() - t0:.0f}s")
    union = set().union(*keys.values())
    first = bases[0][0]
    summary = []
    for label, _ in bases:
        new = keys[label] - keys[first]
        summary.append({"base": label, "total": len(keys[label]), "new": len(new), "new_by_kernel": by_kernel(new)})
    return DryRunResult(by_kernel(union), summary, sum(len(g) for _, g in jobs), len(jobs), n,
                        time.perf_counter() - t0)
