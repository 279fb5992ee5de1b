"""``tbe-fuzz mutate``: measure what the fuzz check catches by running it on mutants of the kernels.

The project tree is snapshotted once into a temporary directory; each mutant is a copy of
that snapshot with one site of ``fuzz.mutate.operators`` applied, so the user's tree is never written.
The check (``fuzz.mutate.check``: a campaign, or ``pytest -m fuzz``) runs in the copy, in
``jobs`` processes at once (one per GPU where there are GPUs, pinned by CUDA_VISIBLE_DEVICES).
Each mutant ends as:

- killed: the check failed or crashed (an exit by a signal too);
- timeout: the check ran past the hard limit (e.g. a loop bound that never ends) and was killed;
- equivalent (suspected): the check passed and ``fuzz.mutate.probe`` gave bit-identical results
  to the original on every probe, with the mutated line executed by them;
- survived: the check passed and the mutant is not shown equivalent (the reason is recorded).

Results are appended to ``<out>.jsonl`` as they come, so a run resumes where it stopped
(same seed, sample size, check and kernel sources); ``<out>.json`` and ``<out>.md`` are
rewritten after every mutant. The score is (killed + timeout) / (all - equivalent).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Optional

from fuzz.mutate import kernel_graph

from fuzz.mutate import operators as mutants
from fuzz.mutate.operators import Site
from tbe.env import ALLOW_FAULTS

COPIED = ("tbe", "cases", "fuzz", "oracles", "strategies", "tests", "pyproject.toml")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", ".pytest_cache", "fuzz-artifacts")
ESCAPED = 97  # mutate_check's exit code when the copy imported the project from elsewhere
VERDICTS = ("killed", "timeout", "survived", "equivalent")


@dataclasses.dataclass(frozen=True)
class Check:
    """What runs on each mutant and how long it may take."""

    kind: str = "campaign"      # "campaign" or "pytest-fuzz"
    budget: str = "ci"
    seconds: float = 60.0       # campaign search time
    seed: int = 0               # campaign seed
    timeout: float = 0.0        # hard limit per run; 0 = derived (see ``limit``)
    max_examples: int = 0       # campaign example cap (0: the budget's); with it a check is load-independent
    baseline_seconds: float = 0.0  # how long the check took on the unmutated code

    @property
    def limit(self) -> float:
        """The hard limit: as given, else 4x the unmutated run (at least 5 min more than it)."""
        if self.timeout:
            return self.timeout
        if self.baseline_seconds:
            return max(4 * self.baseline_seconds, self.baseline_seconds + 300)
        return 2 * self.seconds + 300 if self.kind == "campaign" else 3600.0

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "fuzz.mutate.check", self.kind, "--budget", self.budget,
               "--time", f"{self.seconds:g}", "--seed", str(self.seed)]
        return cmd + (["--max-examples", str(self.max_examples)] if self.max_examples else [])


@dataclasses.dataclass
class Outcome:
    site: Site
    verdict: str
    seconds: float
    rc: Optional[int] = None
    note: str = ""
    tail: str = ""
    check_seconds: float = 0.0
    diff: str = ""
    kernels: tuple[str, ...] = ()  # launched kernels that reach the mutated function

    def to_dict(self) -> dict[str, Any]:
        return {"site": self.site.to_dict(), "verdict": self.verdict, "seconds": round(self.seconds, 1),
                "check_seconds": round(self.check_seconds, 1), "rc": self.rc, "note": self.note, "tail": self.tail,
                "diff": self.diff, "kernels": list(self.kernels)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Outcome":
        return cls(Site.from_dict(d["site"]), d["verdict"], d["seconds"], d.get("rc"), d.get("note", ""),
                   d.get("tail", ""), d.get("check_seconds", 0.0), d.get("diff", ""), tuple(d.get("kernels", ())))


def sources_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted((root / mutants.KERNEL_FILES).glob("*.py")):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def check_sources_hash(root: Path) -> str:
    """Hash of the code the check runs (fuzz/, cases/, strategies/, oracles/ less the mutation tool itself): a
    resumed run must judge its remaining mutants with the same check."""
    h = hashlib.sha256()
    for d in ("fuzz", "cases", "strategies", "oracles"):
        for p in sorted((root / d).rglob("*.py")):
            rel = p.relative_to(root)
            if rel.parts[:2] != ("fuzz", "mutate"):
                h.update(rel.as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def probe_hash(root: Path) -> str:
    """Hash of the probe batch's definition (equivalence verdicts depend on it)."""
    return hashlib.sha256((root / "fuzz" / "mutate" / "probe.py").read_bytes()).hexdigest()[:16]


def snapshot(root: Path, dst: Path) -> Path:
    """Copy what the checks need from the user's tree (working-tree files, not git)."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        src = root / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=IGNORED)
        elif src.is_file():
            shutil.copy2(src, dst / name)
    return dst


def run_limited(cmd: list[str], cwd: Path, env: dict[str, str], limit: float, log: Path) -> tuple[Optional[int], float]:
    """(exit code or None on timeout, seconds); the whole process group dies at the limit."""
    t0 = time.perf_counter()
    with open(log, "wb") as out:
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc: Optional[int] = p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # stragglers of a finished check too
            except (ProcessLookupError, PermissionError):
                pass
            p.wait()
    return rc, time.perf_counter() - t0


def _tail(log: Path, n: int = 1500) -> str:
    try:
        return log.read_bytes()[-n:].decode(errors="replace")
    except OSError:
        return ""


def child_env(copy: Path, gpu: Optional[str]) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(copy)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop(ALLOW_FAULTS.name, None)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return env


class Runner:
    """One mutation run: snapshot, original probe, baseline check, then the mutants in parallel."""

    def __init__(self, root: Path, check: Check, jobs: int, out: Path, equivalence: bool = True,
                 keep: bool = False, gpus: Optional[list[str]] = None, progress: Callable[[str], None] = print):
        self.root, self.check, self.jobs, self.out = root, check, jobs, out
        self.equivalence, self.keep, self.progress = equivalence, keep, progress
        self.gpus = gpus or []
        self.work = Path(tempfile.mkdtemp(prefix="tbe-mutate-"))
        self.pristine = snapshot(root, self.work / "pristine")
        self.lock = threading.Lock()
        self.probe: Optional[dict[str, Any]] = None
        self.calls = kernel_graph.callers(self.pristine)

    def cleanup(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)

    def gpu_for(self, slot: int) -> Optional[str]:
        return self.gpus[slot % len(self.gpus)] if self.gpus else None

    # -- one-off steps ---------------------------------------------------------------
    def baseline(self) -> tuple[bool, float, str]:
        """Run the check on the unmutated snapshot: a score means nothing unless it passes."""
        log = self.work / "baseline.log"
        rc, secs = run_limited(self.check.command(), self.pristine, child_env(self.pristine, self.gpu_for(0)),
                               self.check.limit, log)
        return rc == 0, secs, _tail(log)

    def original_probe(self, cache: Path) -> dict[str, Any]:
        """Fingerprints and executed jit lines of the original code (cached beside the report)."""
        key = {"sources": sources_hash(self.pristine), "probe": probe_hash(self.pristine)}
        if cache.is_file():
            data = json.loads(cache.read_text())
            if all(data.get(k) == v for k, v in key.items()):
                return data
        out = self.work / "probe-original.json"
        rc, _ = run_limited([sys.executable, "-m", "fuzz.mutate.probe", "--out", str(out), "--trace"],
                            self.pristine, child_env(self.pristine, None), 3600, self.work / "probe-original.log")
        if rc != 0:
            raise RuntimeError("the probe batch fails on the original code:\n" + _tail(self.work / "probe-original.log"))
        data = json.loads(out.read_text())
        data.update(key)
        cache.write_text(json.dumps(data, sort_keys=True))
        return data

    # -- one mutant ------------------------------------------------------------------
    def make_copy(self, site: Site) -> Path:
        d = Path(tempfile.mkdtemp(prefix="m-", dir=self.work))
        shutil.rmtree(d)
        shutil.copytree(self.pristine, d)
        target = d / site.path
        target.write_text(mutants.apply(target.read_text(), site))
        return d

    def judge_equivalence(self, site: Site, copy: Path) -> tuple[str, str]:
        """('equivalent' | 'survived', why) for a mutant that passed the check."""
        if site.operator in mutants.MEMORY_ORDER_OPS:
            return "survived", "memory-ordering change: the CPU interpreter runs programs one at a time"
        lines = set(self.probe.get("lines", {}).get(site.path, []))
        if not lines & set(range(site.line, site.end_line + 1)):
            return "survived", "mutated line not executed by the probes"
        out = copy / "probe.json"
        rc, _ = run_limited([sys.executable, "-m", "fuzz.mutate.probe", "--out", str(out)], copy,
                            child_env(copy, None), max(600.0, self.check.limit), copy / "probe.log")
        if rc is None:
            return "survived", "a probe hung"
        if rc != 0 or not out.is_file():
            return "survived", f"the probe batch crashed (exit {rc})"
        got = json.loads(out.read_text())["probes"]
        differ = [k for k, v in self.probe["probes"].items() if got.get(k) != v]
        if differ:
            return "survived", f"probes differ ({len(differ)}): " + "; ".join(differ[:3])
        why = "bit-identical on every probe, mutated line executed"
        if site.description == "mask dropped":  # the interpreter neither faults nor reports such an access
            why += "; its unmasked lanes may touch memory out of bounds (invisible on the CPU)"
        return "equivalent", why

    def run_one(self, site: Site, slot: int) -> Outcome:
        t0 = time.perf_counter()
        copy = self.make_copy(site)
        try:
            log = copy / "check.log"
            env = child_env(copy, self.gpu_for(slot))
            rc, secs = run_limited(self.check.command(), copy, env, self.check.limit, log)
            if rc is None:  # a loaded machine must not pass for a hang: once more with twice the time
                rc, secs = run_limited(self.check.command(), copy, env, 2 * self.check.limit, log)
            tail = _tail(log)
            if rc == ESCAPED:
                raise RuntimeError(f"the check imported the project from outside its copy:\n{tail}")
            if rc is None:
                out = Outcome(site, "timeout", 0, None, f"ran past {self.check.limit:.0f}s, then {2 * self.check.limit:.0f}s",
                              tail)
            elif rc != 0:
                why = f"killed by signal {-rc}" if rc < 0 else f"check failed (exit {rc})"
                out = Outcome(site, "killed", 0, rc, why, tail)
            elif not self.equivalence:
                out = Outcome(site, "survived", 0, 0, "equivalence not tested", tail)
            else:
                verdict, why = self.judge_equivalence(site, copy)
                out = Outcome(site, verdict, 0, 0, why, tail)
            out.check_seconds = secs
            out.diff = mutants.diff((self.pristine / site.path).read_text(), site)
            out.kernels = tuple(kernel_graph.kernels_of(site.function, self.calls))
            out.seconds = time.perf_counter() - t0
            return out
        finally:
            if not self.keep:
                shutil.rmtree(copy, ignore_errors=True)

    # -- the run ----------------------------------------------------------------------
    def run(self, sites: list[Site], header: dict[str, Any], on_result: Callable[[list[Outcome]], None]) -> list[Outcome]:
        state = self.out.with_suffix(".jsonl")
        done = load_state(state, header)
        todo = [s for s in sites if s.id not in {o.site.id for o in done}]
        results = [o for o in done if o.site.id in {s.id for s in sites}]
        if not state.is_file() or not done:
            state.write_text(json.dumps({"header": header}) + "\n")
        self.progress(f"tbe-fuzz mutate: {len(sites)} mutants, {len(results)} done before, {len(todo)} to run, "
                      f"{self.jobs} at once; work dir {self.work}")
        if self.equivalence:
            self.probe = self.original_probe(self.out.with_suffix(".probe.json"))
        slots = list(range(self.jobs))

        def task(site: Site) -> Outcome:
            with self.lock:
                slot = slots.pop()
            try:
                return self.run_one(site, slot)
            finally:
                with self.lock:
                    slots.append(slot)

        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            for o in pool.map(task, todo):
                with self.lock:
                    results.append(o)
                    with open(state, "a") as f:
                        f.write(json.dumps(o.to_dict()) + "\n")
                    self.progress(f"[{len(results)}/{len(sites)}] {o.verdict:<10} {o.site.path}:{o.site.line} "
                                  f"{o.site.function} {o.site.operator} ({o.site.description}) "
                                  f"{o.seconds:.0f}s  {o.note[:80]}")
                    on_result(results)
        return results


def load_state(path: Path, header: dict[str, Any]) -> list[Outcome]:
    """Outcomes saved by an earlier run with the same header; a different header is an error."""
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    if not lines:
        return []
    old = json.loads(lines[0]).get("header")
    if old != header:
        changed = sorted(k for k in set(old or {}) | set(header) if (old or {}).get(k) != header.get(k))
        raise ValueError(f"{path} holds a run with other settings ({', '.join(changed)} differ); "
                         f"pass --fresh to start over or another --out")
    out: dict[str, Outcome] = {}
    for line in lines[1:]:
        try:
            o = Outcome.from_dict(json.loads(line))
        except (json.JSONDecodeError, KeyError):
            continue  # a line cut short by an interrupted run: that mutant runs again
        out[o.site.id] = o
    return list(out.values())
