"""``tbe-fuzz run --workers N``: N campaign processes, one merged summary.

Each worker is a ``tbe-fuzz run`` subprocess with its own seed (base seed + worker index) and its own
share of the opening tour (``--tour-share I/N``: the workers run each tour case once between them),
pinned to one GPU through ``CUDA_VISIBLE_DEVICES`` (round-robin over the visible GPUs) or,
without a GPU, one interpreter process each. All share the artifact directory and one
example database (the directory one, or Redis with ``--database redis://...``), so with ``--continue`` (implied
by ``--database``) a failure one worker saved is replayed by the others on their next run. The parent waits,
reads each worker's JSON summary, and merges them (``fuzz.execution.stats``: examples and
lookups add up, tiers add up, the worst ratio per check is the largest; ``fuzz.judge.coverage``:
coverage counts add up), and any worker that failed a case or crashed (no summary, with its exit code and log) makes the whole run fail.

Subprocesses rather than a multiprocessing pool: each worker must choose its GPU before
CUDA starts, a crash must not take the others down, and a worker is exactly the command a
person would run by hand (printed in its log).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from fuzz import time_split
from fuzz.compile import CompileCounts
from fuzz.judge import RATIO_NOTE, coverage, ratio_text
from fuzz.execution.gpu_pin import case_threads
from fuzz.execution.stats import CampaignStats


def visible_gpus() -> list[str]:
    """GPU ids a worker can be pinned to ([] under the interpreter or without CUDA)."""
    from tbe.backend import INTERPRETED

    if INTERPRETED:
        return []
    import torch

    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None and listed.strip():
        return [x.strip() for x in listed.split(",") if x.strip()]
    return [str(i) for i in range(torch.cuda.device_count())]


def default_workers() -> int:
    return max(1, len(visible_gpus()))


def worker_argv(args: Any, index: int, report_dir: Optional[Path]) -> list[str]:
    argv = [sys.executable, "-m", "fuzz", "run", "--budget", args.budget, "--seed", str(args.seed + index),
            "--json", "--no-warmup", "--workers", "1", "--artifacts", str(args.artifacts)]
    if args.time is not None:
        argv += ["--time", str(args.time)]
    if args.max_examples is not None:
        argv += ["--max-examples", str(args.max_examples)]
    if getattr(args, "pack", None) is not None:
        argv += ["--pack", str(args.pack)]
    if args.config:
        argv += ["--config", str(args.config[0])]
    if args.database:
        argv += ["--database", args.database]
    if getattr(args, "continue_", False):
        argv += ["--continue"]
    if getattr(args, "bound", None):
        argv += ["--bound", args.bound]
    if getattr(args, "sut", "triton") != "triton":
        argv += ["--sut", args.sut]
    if getattr(args, "no_tour", False):
        argv += ["--no-tour"]
    if getattr(args, "no_fill", False):
        argv += ["--no-fill"]
    if report_dir is not None:
        argv += ["--report-dir", str(report_dir / f"worker-{index}")]
    return argv


def worker_env(index: int, n: int, gpus: list[str], base: Optional[dict[str, str]] = None) -> dict[str, str]:
    """Worker ``index``'s environment: its GPU, and few torch CPU threads (``fuzz.execution.gpu_pin.case_threads``;
    one each without a GPU). Every campaign and its supervised worker otherwise start a thread per core,
    and oversubscribed cores slow the small CPU ops of a case many times over (``tests/conftest.py``)."""
    env = dict(os.environ if base is None else base)
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus[index % len(gpus)]
        env.setdefault("OMP_NUM_THREADS", case_threads(n))
    else:
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_workers(args: Any, n: int, progress=None) -> dict[str, Any]:
    """Run ``n`` worker campaigns side by side; the merged summary as a dict (see ``merged_text``)."""
    gpus = visible_gpus()
    logs = Path(args.artifacts) / ".workers"
    logs.mkdir(parents=True, exist_ok=True)
    procs = []
    t0 = time.perf_counter()
    for i in range(n):
        env = worker_env(i, n, gpus)
        argv = worker_argv(args, i, args.report_dir)
        if not getattr(args, "no_tour", False):
            argv += ["--tour-share", f"{i}/{n}"]
        log = open(logs / f"worker-{i}.log", "w")
        log.write("$ " + " ".join(argv) + f"\n# CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES', '')}\n")
        log.flush()
        procs.append((i, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, env=env, text=True), log))
    if progress is not None:
        where = f"GPUs {', '.join(gpus[i % len(gpus)] for i in range(n))}" if gpus else "the CPU"
        progress(f"tbe-fuzz run: {n} workers on {where}, seeds {args.seed}..{args.seed + n - 1}, logs in {logs}")
    results = []
    for i, proc, log in procs:
        out, _ = proc.communicate()
        log.close()
        results.append(_parse(i, args.seed + i, proc.returncode, out, logs / f"worker-{i}.log"))
    return merge(results, time.perf_counter() - t0, args.budget)


def _parse(index: int, seed: int, rc: int, out: str, log: Path) -> dict[str, Any]:
    try:
        data = json.loads(out)
        if not isinstance(data, dict) or data.get("kind") != "campaign":
            raise ValueError("not a campaign summary")
    except ValueError:
        tail = log.read_text().splitlines()[-5:] if log.exists() else []
        return {"worker": index, "seed": seed, "crashed": True, "exit_code": rc, "log": str(log), "log_tail": tail}
    data.update(worker=index, seed=seed, crashed=False, exit_code=rc, log=str(log))
    return data


def merge(results: Sequence[dict[str, Any]], wall: float, budget: str) -> dict[str, Any]:
    """One summary of the workers' JSON summaries; their statistics merge as ``CampaignStats`` do."""
    done = [r for r in results if not r["crashed"]]
    stats = CampaignStats(compiles=CompileCounts(interpreted=True))  # stays interpreted only if every worker was
    for r in done:
        stats.merge(CampaignStats.from_state(r))
    state = stats.to_state()
    return {
        "kind": "campaign_workers", "budget": budget, "workers": len(results), "workers_finished": len(done),
        "ok": len(done) == len(results) and all(r["ok"] for r in done),
        **{k: state[k] for k in ("examples", "lookups", "tiers", "max_ratio", "time_split", "compiles", "fbgemm",
                                 "expected_failures", "unmaterializable", "tour")},
        "seconds": round(wall, 3),
        "examples_per_s": round(stats.examples / wall, 3) if wall > 0 else 0.0,
        "lookups_per_s": round(stats.lookups / wall, 1) if wall > 0 else 0.0,
        "coverage": coverage.merge_json([r.get("coverage") for r in done]),
        "known": sorted({k["id"] for r in done for k in r.get("known", [])}),  # triaged findings met (fuzz.judge.known)
        "stopped_artifacts": [p for r in done for p in r.get("stopped_artifacts", [])],  # cut for time, to replay
        "failed": [{"worker": r["worker"], "seed": r["seed"], "artifact": r.get("artifact"),
                    "reports": (r.get("failure") or {}).get("reports", [])[:4]} for r in done if not r["ok"]],
        "crashed": [{k: r[k] for k in ("worker", "seed", "exit_code", "log", "log_tail")}
                    for r in results if r["crashed"]],
        "per_worker": [{k: r.get(k) for k in ("worker", "seed", "ok", "examples", "lookups", "seconds", "crashed",
                                              "exit_code", "log", "tour")} for r in results],
    }


def merged_text(m: dict[str, Any]) -> str:
    lines = [
        f"tbe-fuzz campaign: {'PASS' if m['ok'] else 'FAIL'}  ({m['workers']} workers ran, {m['workers_finished']} "
        f"finished, {len(m['crashed'])} crashed, {len(m['failed'])} found a failure; budget {m['budget']})",
        f"  examples {m['examples']}, lookups {m['lookups']}, {m['seconds']:.1f}s wall "
        f"({m['examples_per_s']:.2f} examples/s, {m['lookups_per_s']:,.0f} lookups/s checked)",
        "  tiers exercised: " + (", ".join(f"{t} x{n}" for t, n in sorted(m["tiers"].items())) or "none"),
        "  opening tour: " + ("not run (the search alone)" if m.get("tour") is None else
                              f"{m['tour']['cases']} case(s) checked, split as shares "
                              + ", ".join(f"{t['index']}/{t['of']}" for t in m["tour"]["shares"])),
        f"  max error/bound ratio per check ({RATIO_NOTE}):",
        *[f"    {k:<32} {ratio_text(v)}" for k, v in sorted(m["max_ratio"].items())],
    ]
    if m.get("known"):
        lines.append(f"  known findings met (triaged, not failures; each worker's log lists its shrunk cases): "
                     f"{', '.join(m['known'])}")
    c = m["compiles"]
    lines.append("  kernel compilations during the search: " + (
        "none: kernels run in Triton's interpreter, nothing is compiled" if c["interpreted"]
        else f"{c['compiled']} compiled, {c['loaded']} loaded from Triton's disk cache (all workers)"))
    lines += time_split.text(m.get("time_split", {}))
    lines += coverage.text(m.get("coverage"))
    for w in m["per_worker"]:
        state = "crashed" if w["crashed"] else ("PASS" if w["ok"] else "FAIL")
        extra = "" if w["crashed"] else f", {w['examples']} examples, {w['lookups']} lookups, {w['seconds']:.1f}s"
        lines.append(f"  worker {w['worker']} (seed {w['seed']}): {state}{extra}; log {w['log']}")
    for path in m.get("stopped_artifacts", []):
        lines.append(f"  stopped for time, saved to judge: {path}  (tbe-fuzz replay {path})")
    for f in m["failed"]:
        lines.append(f"  worker {f['worker']} failure saved at {f['artifact']}")
        lines += [f"    {r}" for r in f["reports"] if "MISMATCH" in r or "raised" in r][:3]
    for c in m["crashed"]:
        lines.append(f"  worker {c['worker']} crashed (exit code {c['exit_code']}), no summary; log {c['log']}:")
        lines += [f"    {t}" for t in c["log_tail"]]
    return "\n".join(lines)
