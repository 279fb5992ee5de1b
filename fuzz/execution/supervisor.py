"""Supervised execution: every case's kernels run in a worker process this driver watches, so a crash, a poisoned
CUDA context or a hang ends as a failing CaseResult, never as a lost run; why and how: docs/design/execution.md."""

from __future__ import annotations

import atexit
import itertools
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any, Optional

from fuzz.judge import check

from fuzz.execution import forced_crash, interrupt
from fuzz.execution.envelope import stall_for, timeout_for
from fuzz.execution.first_answer import FirstAnswer
from fuzz.execution.messages import Answer, HarnessFailed, NotMaterialized, Stalled, Waited
from fuzz.execution.worker_process import WorkerProcess, log_dir, take_early, worker_env
from fuzz.compile import kernel_cache
from cases import AnyCase, tensors
from fuzz.judge import CaseResult
from fuzz.errors import Unmaterializable, WorkerError
from fuzz.execution.gpu_pin import case_threads
from fuzz.status import FailureKind
from tbe import KernelConfig
from tbe.backend import INTERPRETED
from fuzz.memcheck import SANITIZE

# what a worker started early may be told after its imports (``WorkerProcess.setup``): the kernel cache (read at each
# build), the sanitizer (enabled after the imports), thread counts (set on torch), and the interpreter choice (the
# worker's ``tbe.backend`` makes the driver's, from the same machine)
LATE = frozenset({kernel_cache.MANAGER_ENV, kernel_cache.BACKEND_ENV, kernel_cache.URL_ENV, SANITIZE.name,
                  "OMP_NUM_THREADS", "TRITON_INTERPRET"})


# failures that leave a sanitized interpreter worker intact: the sanitizer stops every out-of-range
# access before it happens, so a mismatch or an exception there damaged no memory
_HARMLESS = (FailureKind.MISMATCH, FailureKind.SANITIZER, FailureKind.EXCEPTION)


class CaseTimedOut(Exception):
    """The caller's time ran out while the case ran: it was stopped and not judged (not a failure). ``seconds``: how
    long it ran; ``timeout``: its own, which it had not reached (both None for a case never started)."""

    def __init__(self, text: str, seconds: Optional[float] = None, timeout: Optional[float] = None) -> None:
        super().__init__(text)
        self.seconds, self.timeout = seconds, timeout


class CaseInterrupted(Exception):
    """A Ctrl-C arrived while the case ran: it was stopped and not judged."""


class Supervisor:
    """Runs cases in a persistent worker; ``sanitize`` (None: inherit TBE_FUZZ_SANITIZE) sets the worker's
    interpreter sanitizer; ``timeout_scale`` multiplies every case's timeout."""

    def __init__(self, sanitize: Optional[bool] = None, timeout_scale: float = 1.0,
                 env: Optional[dict[str, str]] = None) -> None:
        self.env = worker_env(dict(os.environ if env is None else env))
        if sanitize is not None:
            self.env[SANITIZE.name] = "1" if sanitize else "0"
        if not INTERPRETED:  # kernels and references on the GPU: few CPU threads (fuzz.execution.gpu_pin.case_threads)
            self.env.setdefault("OMP_NUM_THREADS", case_threads(1))
        self.timeout_scale = timeout_scale
        self.tmp = log_dir("workers")
        self._worker: Optional[WorkerProcess] = None
        self._spare: Optional[WorkerProcess] = None
        self._keep_spare = False
        self._watch = False  # after a failure, interpreted cases count accesses outside their tensors
        self._seq = itertools.count()
        self.started = 0  # workers started, for reports and tests
        self.environment: Optional[dict[str, Any]] = None
        self.first_answer = FirstAnswer()  # where the time before the first answered case went

    # ------------------------------------------------------------------ workers
    def _spawn(self) -> WorkerProcess:
        self.started += 1
        w = self._early() or WorkerProcess(self.env, self.tmp)
        w.setup(self.env)
        return w

    def _early(self) -> Optional[WorkerProcess]:
        """The worker ``tbe-fuzz run`` started before its imports, where its environment differs from this
        supervisor's only in what a worker reads after its own imports (``LATE``); else it is ended."""
        w = take_early()
        if w is None:
            return None
        changed = {k for k in self.env if w.env.get(k) != self.env[k]}
        if changed <= LATE and set(w.env) <= set(self.env):  # a setup adds and changes, never removes
            return w
        w.stop(kill=True)
        return None

    def _current(self) -> WorkerProcess:
        if self._worker is None:
            self._worker, self._spare = (self._spare or self._spawn()), None
        hello = self._worker.ready()
        self.environment = hello["environment"]
        if self._keep_spare and self._spare is None:
            self._spare = self._spawn()
        return self._worker

    def prestart(self) -> None:
        """Start the worker now without waiting for it: its imports (and on a GPU its CUDA context) then overlap
        whatever the caller does before its first case."""
        if self._worker is None and self._spare is None:
            self._spare = self._spawn()

    def _retire(self, kill: bool = False) -> None:
        if self._worker is not None:
            self._worker.stop(kill)
            self._worker = None

    def kill_now(self) -> None:
        """SIGKILL the workers without waiting (the process is about to exit on a second Ctrl-C)."""
        for w in (self._worker, self._spare):
            if w is not None and w.proc.poll() is None:
                w.proc.kill()

    def close(self) -> None:
        self._retire()
        if self._spare is not None:
            self._spare.stop()
            self._spare = None
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------------ cases
    def run(self, case: AnyCase, config: Optional[KernelConfig] = None, saved: Optional[Path] = None,
            steps: bool = True, pending: Optional[Path] = None, limit_s: Optional[float] = None,
            **options: Any) -> CaseResult:
        """``fuzz.judge.check.run_case`` in a worker: ``saved`` is an artifact directory whose tensors.pt replaces
        materialization; ``pending`` the directory the case is written under first (default: a temporary
        one); ``limit_s`` the caller's time left (past it: CaseTimedOut); ``options`` go to ``run_case``.
        Raises Unmaterializable for a spec that cannot be built, CaseInterrupted after a Ctrl-C."""
        config = config or KernelConfig()
        forced = forced_crash.from_env()
        req = {"case": case.to_dict(), "config": config.to_dict(), "steps": steps, "options": options,
               "saved": None if saved is None else str(saved), "allow_faults": bool(config.faults),
               "forced": None if forced is None else str(forced),
               "sys_path": [p for p in sys.path if p]}  # a user's SUT module importable here is there too
        where = self._write_pending(pending or self.tmp / "pending", req)
        try:
            end = None if limit_s is None else time.monotonic() + limit_s
            result, earlier = self._run_once(case, config, req, saved, end)
            if result.error_kind == FailureKind.CRASH and earlier:  # confirm it alone, as a replay would run it
                first = result
                result, _ = self._run_once(case, config, req, saved, end)
                result.notes.insert(0, f"first run, after {earlier} other case(s) in the same worker: "
                                       f"{first.error.splitlines()[0]}; this is the run in a fresh worker")
                if result.ok:
                    first.notes = [f"in a fresh worker the case passed: the crash may come from damage one of the "
                                   f"{earlier} earlier case(s) in the same worker did"]
                    result = first
        finally:
            shutil.rmtree(where, ignore_errors=True)
        return result

    def _run_once(self, case: AnyCase, config: KernelConfig, req: dict[str, Any],
                  saved: Optional[Path], end: Optional[float] = None) -> tuple[CaseResult, int]:
        """(result, how many cases the worker had run before this one); ``end``: the caller's deadline
        (time.monotonic), past which the case is stopped and CaseTimedOut raised."""
        asked = time.time()
        w = self._current()
        if w.proc.poll() is not None:  # it died idle (e.g. killed from outside): not this case's doing
            self._retire(kill=True)
            w = self._current()
        since, earlier = os.path.getsize(w.log_path), w.cases
        t0 = time.perf_counter()
        sut = req["options"].get("sut")
        timeout = timeout_for(case, req["steps"], self.timeout_scale, bool(w.hello.get("compile_events")), sut)
        req = dict(req, stall_s=stall_for(case, req["steps"], self.timeout_scale, sut) if w.hello.get("program_watch")
                   else None, watch=self._watch and INTERPRETED and not w.hello.get("sanitizer"))
        left = None if end is None else max(0.0, end - time.monotonic())
        sent, builds, build_seconds = time.time(), w.builds, w.build_seconds
        try:
            w.requests.send(req)
        except OSError:  # it died between the check and the request; its exit is reported below
            pass
        msg = w.wait(timeout, cancellable=True, limit=end)
        if msg in (Waited.INTERRUPTED, Waited.LIMIT):
            self._retire(kill=True)  # stopped, not judged: the worker may be mid-kernel
            self._keep_spare = True
            if msg is Waited.INTERRUPTED:
                raise CaseInterrupted("a Ctrl-C stopped the case")
            ran = time.perf_counter() - t0
            raise CaseTimedOut(f"stopped after {ran:.1f}s: the time left ({left:.1f}s) ran out before the case "
                               f"finished (its own timeout: {timeout:.0f}s)", seconds=ran, timeout=timeout)
        stalled = None
        if isinstance(msg, Stalled):
            msg, stalled = Waited.TIMED_OUT, msg.what
        if isinstance(msg, NotMaterialized):
            raise Unmaterializable(msg.why)
        if not isinstance(msg, (Answer, Waited)):
            self._retire()
            detail = msg.traceback if isinstance(msg, HarnessFailed) else f"an unexpected message: {msg!r}"
            raise WorkerError(f"the worker failed outside the kernels:\n{detail}")
        if isinstance(msg, Answer):
            result = msg.result
            w.cases += 1
            if self.first_answer.answered is None:
                self.first_answer.worker(w.started_at, w.hello.get("clock", {}), w.early)
                self.first_answer.answer(asked, sent, time.time(), w.builds - builds, w.build_seconds - build_seconds,
                                         getattr(result, "compiles", None), result.phases)
            if not result.ok:
                self._keep_spare = self._watch = True
                if not _sound_after(result, bool(w.hello.get("sanitizer"))):
                    self._retire(kill=result.error_kind == FailureKind.CUDA_ERROR)
            return result, earlier
        if msg is Waited.TIMED_OUT:
            if hasattr(signal, "SIGUSR1"):
                os.kill(w.proc.pid, signal.SIGUSR1)  # faulthandler dumps the stacks to the log
                time.sleep(1.0)
            self._retire(kill=True)
            builds = ", kernel builds not counted" if w.hello.get("compile_events") else ""
            kind = FailureKind.HANG
            if stalled is None:
                text = f"no answer after {timeout:.0f}s ({_formula(case, req['steps'])}{builds}); worker killed"
            else:
                text = (f"program {stalled['program']} of {stalled['programs']} of {stalled['kernel']} ran "
                        f"{stalled['seconds']:.0f}s without finishing (one program may run {stalled['limit']:.0f}s: "
                        f"fuzz.execution.envelope.stall_for; the longest finished program of the case took "
                        f"{stalled['longest_finished']:.1f}s; the case's own timeout: {timeout:.0f}s); worker killed")
        else:
            kind, text = FailureKind.CRASH, w.describe_exit() + " while running the case"
            self._retire(kill=True)
        self._keep_spare = self._watch = True
        t = _tensors(case, config, req["steps"], saved)
        result = check.case_result(case, t, config, time.perf_counter() - t0, kind,
                                   f"{text}\n--- worker output (pid {w.proc.pid}) ---\n{w.tail(since)}")
        return result, earlier

    def _write_pending(self, root: Path, req: dict[str, Any]) -> Path:
        where = Path(root) / f"{os.getpid()}-{next(self._seq)}"
        where.mkdir(parents=True, exist_ok=True)
        _write(where / "case.json", json.dumps(req["case"], indent=2, sort_keys=True) + "\n")
        _write(where / "config.json", json.dumps(req["config"], indent=2, sort_keys=True) + "\n")
        _write(where / "pending.json", json.dumps({"pid": os.getpid(), "started": time.time(), "saved": req["saved"],
                                                   "argv": sys.argv}, indent=2) + "\n")
        return where


def _sound_after(result: CaseResult, sanitized: bool) -> bool:
    """Whether the worker that answered this failing ``result`` may run the next case: a mismatch, finding or
    exception, where the sanitizer stopped every access outside the launch's tensors or the watch counted none
    (nothing else in the process was touched). Anything else, or an unwatched case, gets a fresh worker."""
    return result.kind in _HARMLESS and (sanitized or result.outside == 0)


def _formula(case: AnyCase, steps: bool) -> str:
    tables, bags, lookups = case.size()
    return f"timeout for {lookups} lookups, {bags} bags, {tables} tables; fuzz.execution.envelope.timeout_for"


def _tensors(case: AnyCase, config: KernelConfig, steps: bool, saved: Optional[Path]):
    from fuzz.execution import artifacts

    return artifacts.load_tensors(saved) if saved is not None else tensors(case, steps=steps, weights=False)


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def leftover_pending(root: Path) -> list[Path]:
    """Pending case directories under ``root`` whose driver process is gone (it died mid-case)."""
    out = []
    for d in sorted(Path(root).glob("*-*")) if Path(root).is_dir() else ():
        try:
            os.kill(int(d.name.split("-")[0]), 0)
        except (ValueError, ProcessLookupError):
            out.append(d)
        except PermissionError:
            pass
    return out


_SHARED: dict[Any, Supervisor] = {}


def shared(sanitize: Optional[bool] = None) -> Supervisor:
    """One supervisor per process and sanitize setting, closed at exit (its worker persists across calls)."""
    if sanitize not in _SHARED:
        _SHARED[sanitize] = Supervisor(sanitize)
        if len(_SHARED) == 1:
            atexit.register(lambda: [s.close() for s in _SHARED.values()])
    return _SHARED[sanitize]
