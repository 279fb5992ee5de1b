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
from fuzz.compile.warmup import Unit, WarmCase, default_processes, key_width_tables, unit_groups
from tbe.config import KernelConfig


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


def count_specializations(bases: Sequence[tuple[str, Sequence[Unit]]], processes: Optional[int] = None,
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


# ----------------------------------------------------------------------------- a quick sample
# (weights, output, index dtype, weighted, pooling, optimizer, bounds check)
_VARIANTS = (
    ("fp32", "fp32", "int64", False, "sum", "exact_sgd", "warning"),
    ("fp16", "fp32", "int32", True, "mean", "exact_rowwise_adagrad", "fatal"),
    ("bf16", "fp16", "int64", True, "mean", "exact_sgd", "ignore"),
)


def reach_cases(config: KernelConfig) -> list:
    """A few cases of ``config`` that reach each of its kernels (not every specialization): every dimension
    bucket and a wider row, a hot row long enough for its long tiers, a small table where it has the path, and
    a layout past each narrow sort-key dtype (the transpose's wider-key kernels)."""
    from cases import CaseSpec, HotRow

    tables = tuple((4, b) for b in config.dim_buckets) + ((4, config.dim_buckets[-1] + 1),)
    hot = (HotRow(0, 0, max(config.long_run_threshold, config.fused_long_min_lookups)),)
    out = [CaseSpec(tables=tables, batch_size=2, weights_dtype=w, output_dtype=o, index_dtype=i, weighted=wt,
                    pooling=p, optimizer=opt, bounds_check=mode, length_profile="fixed", max_length=2, seed=1,
                    hot_rows=hot) for w, o, i, wt, p, opt, mode in _VARIANTS]
    out += [CaseSpec(tables=t, batch_size=2, index_dtype=i, length_profile="fixed", max_length=2, seed=1)
            for t in key_width_tables(config) for i in sorted({v[2] for v in _VARIANTS})]
    if config.small_table_path:
        out += [CaseSpec(tables=((config.small_table_max_rows, config.small_table_max_dim),), batch_size=1,
                         pooling=p, weights_dtype="fp16", output_dtype="fp32", length_profile="fixed",
                         max_length=max(1, config.small_table_min_pooling), seed=1) for p in ("sum", "mean")]
    return out


def keys_by_kernel(base: KernelConfig) -> dict[str, set]:
    """Launch keys per kernel of ``reach_cases`` under every config a campaign under ``base`` runs: seconds
    on a CPU where the whole warm-up matrix takes many minutes, so tests and quick comparisons use it."""
    from fuzz.compile.specializations import record
    from fuzz.compile.warmup import exercise
    from strategies.config_space import campaign_configs
    from tbe import faults

    with faults.allow(), record(dry_run=True) as keys:
        for config in campaign_configs(base):
            for spec in reach_cases(config):
                exercise(spec, config)
    out: dict[str, set] = {}
    for name, key in keys:
        out.setdefault(name, set()).add(key)
    return out
