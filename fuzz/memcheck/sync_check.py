"""Static check of the fused long tier's synchronisation, for any KernelConfig, on any machine.

``check_config(config)`` records the launches of the synchronising kernels a config can reach
(probe runs through ``tbe.TritonTBE``, kernels not executed), compiles each for sm_90
(``fuzz.compile.cuda_target``: cached, parallel) and reads the PTX (``fuzz.memcheck.sync_analysis``): every partial
sum must be ordered before the countdown by a CTA barrier and released at gpu scope. The
report names the PTX lines it relied on. ``SYNC_KERNELS`` lists the kernels that hand data
between programs (their specializations whose ``FUSED`` constexpr, where they have one, is
true: the long tiers share one chunk kernel); ``discover`` re-derives that list from the PTX
of every kernel a probe launches, so a new hand-off kernel cannot go unchecked.

Levels: ``ci`` compiles every dimension bucket (with its WIDE form) for plain SGD, and the
narrowest and widest with every other setting flipped at once (bf16 weights, fp16 output,
weighted, MEAN, Adagrad); ``full`` compiles every bucket x weighted x pooling x optimizer x weight dtype, the
output dtypes and (under index_dtype auto) both index widths.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import Any, Optional

from fuzz.compile import SM90, Compiled, compile_launches, triton_version
from fuzz.compile import Launch, Probe, run_probe
from fuzz.memcheck.sync_analysis import KernelSync, analyse
from tbe.modes import FloatDtype, Optimizer, Pooling

SYNC_KERNELS = ("tbe.backward_long._chunk_kernel",)
HANDOFF_FLAG = "FUSED"  # a sync kernel's specializations with this constexpr false hand nothing off
LEVELS = ("ci", "full")


def _tables(config, wide: bool) -> tuple[tuple[int, int], ...]:
    """One table per dimension bucket; the widest bucket gets a row wider than itself if ``wide``."""
    buckets = list(config.dim_buckets)
    dims = [b for b in buckets[:-1]] + [2 * buckets[-1] + 1 if wide else buckets[-1]]
    return tuple((4, d) for d in dims)


def probes(config, level: str = "ci") -> list[tuple[Probe, Any]]:
    """(probe, config) pairs whose runs reach the specializations ``level`` covers."""
    if level not in LEVELS:
        raise ValueError(f"sync check level must be one of {LEVELS}, got {level!r}")
    index_cfgs = [config]
    if config.index_dtype == "auto" and level == "full":
        index_cfgs.append(config.replace(index_dtype="int64"))  # tables past 2^31 rows, without allocating them
    out: list[tuple[Probe, Any]] = []
    base = dict(tables=_tables(config, wide=True))
    flipped = dict(weights_dtype="bf16", output_dtype="fp16", weighted=True, pooling="mean",
                   optimizer="exact_rowwise_adagrad")
    out.append((Probe(**base), config))
    out.append((Probe(tables=_tables(config, wide=False)), config))
    if level == "ci":  # every other setting flipped at once, at the narrowest and the widest bucket
        edges = (base["tables"][0], base["tables"][-1])
        out.append((Probe(tables=edges, **flipped), config))
        return out
    for w, pool, opt, wdt in itertools.product((False, True), Pooling, Optimizer, FloatDtype):
        out.append((Probe(**base, weighted=w, pooling=pool, optimizer=opt, weights_dtype=wdt), config))
    for odt in ("fp16", "bf16"):
        out.append((Probe(**base, output_dtype=odt), config))
    for cfg in index_cfgs[1:]:
        out.append((Probe(**base), cfg))
    return out


def hands_off(lc: Launch) -> bool:
    """Whether this launch is a specialization that hands data between programs."""
    return lc.kernel in SYNC_KERNELS and dict(lc.constexprs).get(HANDOFF_FLAG, "true") != "false"


def reachable_launches(config, level: str = "ci", only_sync: bool = True) -> list[Launch]:
    """Distinct launches the probes of ``level`` make under ``config`` (``only_sync``: the hand-offs only)."""
    seen: dict[str, Launch] = {}
    for probe, cfg in probes(config, level):
        for lc in run_probe(probe, cfg, min_lookups=cfg.fused_long_min_lookups):
            if (not only_sync or hands_off(lc)) and lc.key() not in seen:
                seen[lc.key()] = lc
    return list(seen.values())


@dataclasses.dataclass
class Checked:
    compiled: Compiled
    sync: Optional[KernelSync]  # None when it did not compile or parse
    error: Optional[str] = None

    @property
    def problems(self) -> list[str]:
        if self.error:
            return []
        return self.sync.problems if self.sync else []


@dataclasses.dataclass
class SyncReport:
    """The static check of one config: every reachable specialization of every synchronising kernel."""

    config: Any
    level: str
    triton: str
    target: tuple
    checked: list[Checked]
    seconds: float

    @property
    def errors(self) -> list[str]:
        return [f"{c.compiled.launch.name}: {c.error}" for c in self.checked if c.error]

    @property
    def problems(self) -> list[tuple[Launch, str]]:
        return [(c.compiled.launch, p) for c in self.checked for p in c.problems]

    @property
    def ran(self) -> bool:
        """Something was checked and every specialization compiled and parsed."""
        return bool(self.checked) and not self.errors

    @property
    def ok(self) -> bool:
        """No synchronisation problem and nothing that failed to compile (nothing reachable is ok)."""
        return not self.errors and not self.problems

    def evidence(self) -> list[str]:
        """The distinct barrier and release lines the passing pairs relied on."""
        lines: list[str] = []
        for c in self.checked:
            for pair in (c.sync.pairs if c.sync else []):
                for ln in pair.barriers + pair.release:
                    if ln not in lines:
                        lines.append(ln)
        return lines

    def compiler_barriers(self) -> list[str]:
        """Barriers on the partial -> countdown paths whose source line is the countdown's own: the
        compiler put them there with the atomic, not the kernel's ``tl.debug_barrier``."""
        out: list[str] = []
        for c in self.checked:
            for pair in (c.sync.pairs if c.sync else []):
                src = pair.countdown.rsplit(" (", 1)[-1]
                out += [b for b in pair.barriers if b.endswith(" (" + src) and b not in out]
        return out

    def text(self) -> str:
        head = (f"sync check ({self.level}, triton {self.triton}, sm_{self.target[1]}): "
                + ("nothing to check: no synchronising kernel is reachable under this config" if not self.checked
                   else f"{'PASS' if self.ok else 'FAIL'}, {len(self.checked)} specialization(s), "
                        f"{len(self.problems)} problem(s), {self.seconds:.1f}s"))
        lines = [head]
        for c in self.checked:
            lc = c.compiled.launch
            flags = ", ".join(f"{k}={v}" for k, v in lc.constexprs) + f", num_warps={lc.num_warps}"
            dtypes = "/".join(sorted({a.split('"dtype": "')[1].split('"')[0] for a in lc.args if '"dtype"' in a}))
            status = "ERROR" if c.error else ("ok" if not c.problems else "PROBLEM")
            lines.append(f"  {lc.name} [{flags}; tensors {dtypes}]: {status}")
            if c.error:
                lines.append(f"    {c.error}")
            for pair in (c.sync.pairs[:1] if c.sync and not c.problems else []):
                lines += [f"    partial   {pair.partial}", *[f"    barrier   {b}" for b in pair.barriers],
                          *[f"    release   {r}" for r in pair.release]]
            lines += [f"    {p}" for p in dict.fromkeys(c.problems)]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "triton": self.triton, "target": list(self.target), "level": self.level, "ok": self.ok,
            "seconds": round(self.seconds, 2), "config": self.config.to_dict(),
            "specializations": [{
                "launch": c.compiled.launch.to_dict(), "error": c.error,
                "registers": c.compiled.registers, "local_bytes": c.compiled.local_bytes,
                "shared_dynamic": c.compiled.shared_dynamic, "cached": c.compiled.cached,
                "partials": c.sync.partials if c.sync else [], "countdowns": c.sync.countdowns if c.sync else [],
                "pairs": [dataclasses.asdict(p) for p in (c.sync.pairs if c.sync else [])],
            } for c in self.checked],
        }


def check_launches(launches: list[Launch], config, level: str, target: tuple = SM90,
                   jobs: Optional[int] = None) -> SyncReport:
    t0 = time.perf_counter()
    checked = []
    for comp in compile_launches(launches, target=target, jobs=jobs):
        if not comp.ok:
            checked.append(Checked(comp, None, comp.error))
            continue
        try:
            sync = analyse(comp.ptx)
            gap = None if sync.hands_off else "no partial-sum atomic reaches a countdown in the PTX: nothing to vouch for"
            checked.append(Checked(comp, sync, gap))
        except ValueError as e:
            checked.append(Checked(comp, None, f"PTX not analysed: {e}"))
    return SyncReport(config, level, triton_version(), target, checked, time.perf_counter() - t0)


def check_config(config, level: str = "ci", target: tuple = SM90, jobs: Optional[int] = None) -> SyncReport:
    """The static sync check the gate, CI and the self-test run on a candidate KernelConfig."""
    t0 = time.perf_counter()
    report = check_launches(reachable_launches(config, level), config, level, target, jobs)
    report.seconds = time.perf_counter() - t0
    return report


def discovery_probes(config) -> list[tuple[Probe, Any]]:
    """Probes that together launch every kernel of the TBE: both long tiers, both bounds checks (and both forms
    of the offsets repair), both short-tier kernels, the per-sample-weight gradient and the small-table forward."""
    edges = (_tables(config, wide=True)[0], _tables(config, wide=True)[-1])
    checked = dict(tables=edges, weighted=True, bounds_check="warning")
    return [
        (Probe(**checked), config.replace(fused_long_tier=True, bwd_short_runs_per_program=1,
                                          bwd_short_bucket_runs=())),
        (Probe(**checked), config.replace(fused_long_tier=False, fused_bounds_check=True,
                                          bwd_short_runs_per_program=4)),
        (Probe(tables=((64, 64),), weights_dtype="fp16", lookups_per_bag=64), config.replace(small_table_path=True)),
        # 81 offsets in blocks of 4: more block maxima than the offsets repair folds, so its carry scan launches
        (Probe(tables=((8, 4), (8, 4)), batch_size=40, bounds_check="warning"), config.replace(bounds_check_block=4)),
    ]


def discover(config, target: tuple = SM90, jobs: Optional[int] = None) -> dict[str, bool]:
    """Kernel -> whether its PTX hands data between programs, for every kernel the probes launch."""
    launches: list[Launch] = []
    for probe, cfg in discovery_probes(config):
        launches += run_probe(probe, cfg, min_lookups=cfg.fused_long_min_lookups)
    out: dict[str, bool] = {}
    for comp in compile_launches(launches, target=target, jobs=jobs):
        if not comp.ok:
            raise RuntimeError(f"{comp.launch.kernel} did not compile: {comp.error}")
        out[comp.launch.kernel] = out.get(comp.launch.kernel, False) or analyse(comp.ptx).hands_off
    return out


def main(argv=None) -> int:
    """``python -m fuzz.memcheck.sync_check [--config cfg.json] [--fault F] [--level ci|full] [--json out]``."""
    import argparse
    import json
    import sys

    from tbe import KernelConfig, faults

    p = argparse.ArgumentParser(prog="python -m fuzz.memcheck.sync_check", description=__doc__.splitlines()[0])
    p.add_argument("--config", default=None, help="KernelConfig JSON (default: defaults with the fused long tier on)")
    p.add_argument("--fault", action="append", default=[], choices=sorted(faults.KNOWN), help="plant a fault")
    p.add_argument("--level", choices=LEVELS, default="ci")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the report as JSON")
    args = p.parse_args(argv)
    with faults.allow():
        config = KernelConfig.load(args.config) if args.config else KernelConfig(fused_long_tier=True)
        report = check_config(config.replace(faults=tuple(args.fault)) if args.fault else config, args.level)
    print(report.text())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.to_dict(), f, indent=1)
    sys.stdout.flush()
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
