"""Level (a) of the gate: the config validates, compiles for sm_90 within resource limits, and synchronises.

Three checks, cheapest first, on any machine (compile only; no GPU needed):

1. the config validates (``KernelConfig.validate``; per-bucket tiles naming a BLOCK_D the
   buckets never produce are noted);
2. the synchronisation check of the fused long tier passes (``fuzz.memcheck.sync_check``: its
   specializations compiled for sm_90 and their PTX read, one specialization first so a
   config that drops the fence fails here in seconds);
3. every kernel specialization the config can reach (the sync check's probes over every
   dimension bucket and flipped dtypes and modes, plus the small-table path and both bounds
   checks) compiles for sm_90 (``fuzz.compile.cuda_target``, cached, one child per core) and stays within
   ``LIMITS``. The launches are recorded through Triton's interpreter, so on a GPU host this
   level runs in a child process with ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from typing import Any, Callable, Optional

from fuzz.status import Status

# sm_90 limits, each a launch failure or a silent slowdown when crossed
LIMITS = {
    "registers": 255,             # per thread: the ISA's maximum; ptxas spills beyond it
    "register_file": 65536,       # registers x threads of one block: more and the launch is refused
    "local_bytes": 0,             # per thread: Triton allocates no local arrays, so any local memory is a
                                  # register spill, an L1/L2 round trip inside the gather loops
    "shared_bytes": 232448,       # per block: 227 KB, the most an sm_90 block can opt in to
}


@dataclasses.dataclass
class StaticResult:
    status: Status = Status.PASS
    reasons: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    steps: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)  # (check, status, detail)
    specializations: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    sync_text: str = ""
    seconds: float = 0.0

    def step(self, name: str, status: str, detail: str = "") -> None:
        self.steps.append((name, status, detail))
        if status == Status.FAIL:
            self.status = Status.FAIL
        elif status == Status.NOT_RUN and self.status == Status.PASS:
            self.status = Status.NOT_RUN

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reasons": self.reasons, "notes": self.notes, "limits": LIMITS,
                "steps": [{"check": c, "status": s, "detail": d} for c, s, d in self.steps],
                "specializations": self.specializations, "sync": self.sync_text, "seconds": round(self.seconds, 2)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StaticResult":
        return cls(d["status"], d["reasons"], d["notes"], [(s["check"], s["status"], s["detail"]) for s in d["steps"]],
                   d["specializations"], d["sync"], d["seconds"])


def infrastructure_missing() -> Optional[str]:
    """Why the compile-based checks cannot run here, or None."""
    try:
        import fuzz.compile.cuda_target  # noqa: F401
        import fuzz.compile.launches  # noqa: F401
        import fuzz.memcheck.sync_check  # noqa: F401
    except ImportError as e:
        return f"the sm_90 compile and synchronisation checks are not available ({e})"
    try:
        import triton.backends.nvidia  # noqa: F401
    except ImportError:
        return "this Triton has no NVIDIA backend to compile for sm_90 with"
    return None


def over_limits(spec: dict[str, Any]) -> list[str]:
    """Which LIMITS one compiled specialization crosses (``spec`` as in ``StaticResult.specializations``)."""
    out = []
    threads = 32 * spec["num_warps"]
    if spec["registers"] > LIMITS["registers"]:
        out.append(f"{spec['registers']} registers per thread > {LIMITS['registers']}")
    if spec["registers"] * threads > LIMITS["register_file"]:
        out.append(f"{spec['registers']} registers x {threads} threads > the {LIMITS['register_file']}-register file")
    if spec["local_bytes"] > LIMITS["local_bytes"]:
        out.append(f"{spec['local_bytes']} bytes of local memory per thread (register spills)")
    if spec["shared_bytes"] > LIMITS["shared_bytes"]:
        out.append(f"{spec['shared_bytes']} bytes of shared memory > {LIMITS['shared_bytes']}")
    return out


def _validate(config, res: StaticResult) -> bool:
    from tbe.buckets import block_for_dim

    try:
        config.validate()
    except (TypeError, ValueError) as e:
        res.step("config validates", Status.FAIL, str(e))
        res.reasons.append(f"the config does not validate: {e}")
        return False
    blocks = {block_for_dim(d, config) for d in range(1, 2 * max(config.dim_buckets) + 1)}
    for name in ("fwd_bucket_tiles", "bwd_short_bucket_runs"):
        dead = [e[0] for e in getattr(config, name) if e[0] not in blocks]
        if dead:
            res.notes.append(f"{name} names BLOCK_D {dead}, which dim_buckets {list(config.dim_buckets)} "
                             f"never produce: those entries are never used")
    res.step("config validates", Status.PASS)
    return True


def extra_launches(config) -> list:
    """Launches the sync check's probes do not reach: the small-table path and the bounds check in
    each repairing mode (standalone or fused, as the config says)."""
    import torch

    from fuzz.compile import Probe, recording, run_probe
    from tbe import TritonTBE

    out = list(run_probe(Probe(tables=((config.small_table_max_rows, config.small_table_min_dim),),
                               weights_dtype="fp16", output_dtype="fp32", optimizer="exact_rowwise_adagrad",
                               lookups_per_bag=max(config.small_table_min_pooling, 1),
                               batch_size=config.small_table_bags_per_program), config))
    for mode in ("warning", "ignore", "fatal"):
        m = TritonTBE([(8, 16), (5, 3)], bounds_check=mode, config=config)
        ids, offsets = torch.tensor([1, 7, 0, 2, 4, 4, 1, 3]), torch.tensor([0, 2, 4, 6, 8])
        with recording(execute=True) as launches:  # valid ids: the checks run and find nothing
            m(ids, offsets)
        out += launches
    return out


def _check_here(config, progress: Optional[Callable[[str], None]]) -> StaticResult:
    t0 = time.perf_counter()
    res = StaticResult()
    if not _validate(config, res):
        return res
    why = infrastructure_missing()
    if why is not None:
        res.step("synchronisation check", Status.NOT_RUN, why)
        res.step("compiles for sm_90 within limits", Status.NOT_RUN, why)
        res.reasons.append(why)
        return res
    from fuzz.compile import compile_launches
    from fuzz.memcheck import check_launches, reachable_launches

    sync_launches = reachable_launches(config, "ci")
    if not sync_launches:  # nothing to check is no pass
        res.step("synchronisation check", Status.NOT_APPLICABLE, "the config reaches no launch that synchronises")
    sync = check_launches(sync_launches[:1], config, "ci") if sync_launches else None  # a dropped fence fails fast
    if sync is not None and sync.ok:
        sync = check_launches(sync_launches, config, "ci")  # the first comes from the compile cache
    res.sync_text = "" if sync is None else sync.text()
    if sync is not None and not sync.ok:
        first = (sync.problems[0][1] if sync.problems else sync.errors[0]).splitlines()[0]
        res.step("synchronisation check", Status.FAIL,
                 f"{len(sync.problems)} problem(s), {len(sync.errors)} error(s): {first}")
        res.reasons.append(f"synchronisation check fails: {first}")
        res.seconds = time.perf_counter() - t0
        return res
    if sync is not None:
        res.step("synchronisation check", Status.PASS, sync.text().splitlines()[0])
    if progress is not None:
        done = "passed" if sync is not None else "not applicable"
        progress(f"  (a) sync check {done} in {time.perf_counter() - t0:.1f}s; compiling every reachable "
                 f"specialization")
    launches = {lc.key(): lc for lc in reachable_launches(config, "ci", only_sync=False) + extra_launches(config)}
    _compile_all(list(launches.values()), res, compile_launches)
    res.seconds = time.perf_counter() - t0
    return res


def _compile_all(launches: list, res: StaticResult, compile_launches) -> None:
    """Compile every launch for sm_90 and hold each against LIMITS."""
    bad = []
    for c in compile_launches(launches):
        spec = {"kernel": c.launch.kernel, "num_warps": c.launch.num_warps, "registers": c.registers,
                "local_bytes": c.local_bytes, "stack_bytes": c.stack_bytes,
                "shared_bytes": c.shared_static + c.shared_dynamic, "cached": c.cached, "error": c.error,
                "constexprs": dict(c.launch.constexprs)}
        spec["over_limits"] = [] if c.error else over_limits(spec)
        res.specializations.append(spec)
        if c.error:
            bad.append(f"{c.launch.name} does not compile for sm_90: {c.error.splitlines()[0][:200]}")
        elif spec["over_limits"]:
            tile = ", ".join(f"{k}={v}" for k, v in c.launch.constexprs if k in ("BLOCK_D", "GATHER", "RUNS", "BAGS"))
            bad.append(f"{c.launch.name} ({tile}, num_warps={c.launch.num_warps}): {'; '.join(spec['over_limits'])}")
    worst = max(res.specializations, key=lambda s: s["registers"], default=None)
    summary = (f"{len(res.specializations)} specialization(s), {sum(s['cached'] for s in res.specializations)} "
               f"from the cache; most registers {worst['registers'] if worst else 0} "
               f"({worst['kernel'] if worst else '-'})")
    res.step("compiles for sm_90 within limits", Status.FAIL if bad else Status.PASS, bad[0] if bad else summary)
    res.reasons += bad


def run_static_level(config, progress: Optional[Callable[[str], None]] = None) -> StaticResult:
    """Level (a) for ``config``; in a child process under the interpreter when this one compiles."""
    from tbe.backend import INTERPRETED

    if INTERPRETED:
        return _check_here(config, progress)
    t0 = time.perf_counter()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    proc = subprocess.run([sys.executable, "-m", "fuzz.gate.static"], input=config.to_json(), text=True,
                          capture_output=True, env=env, cwd=root)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        res = StaticResult()
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        res.step("static checks (child process)", Status.FAIL, f"exited {proc.returncode}: {tail}")
        res.reasons.append(f"the static checks crashed: {tail}")
        res.seconds = time.perf_counter() - t0
        return res
    return StaticResult.from_dict(json.loads(lines[-1]))


def main() -> int:
    """Child entry point: a KernelConfig JSON on stdin, the StaticResult as one JSON line on stdout."""
    from tbe import KernelConfig

    config = KernelConfig.from_json(sys.stdin.read())
    print(json.dumps(_check_here(config, None).to_dict()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
