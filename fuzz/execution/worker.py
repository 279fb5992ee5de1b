"""The kernel side of supervised execution: a process that runs cases for ``fuzz.execution.supervisor``.

Started as ``python -m fuzz.execution.worker REQUEST_FD REPLY_FD``; after its imports reads the environment its
supervisor sends (``Setup``, ``fuzz.execution.worker_process``), greets with its environment (``Hello``), then
answers each request (a case as JSON, a config, where its saved tensors are) with ``Answer`` (its CaseResult) or
``NotMaterialized``; under the interpreter, a kernel program that runs past the request's ``stall_s`` is
reported at once as ``Stalled`` by a watch thread (``fuzz.execution.stall``); the records are
``fuzz.execution.messages``. Tensors
never cross the pipe: the worker materializes the case from its spec (deterministic) or loads an
artifact's tensors.pt itself. ``faulthandler`` writes the Python stack of a fatal signal to stderr (the
supervisor's log), so a crash report shows the kernel line that was running. After a CUDA error the
worker answers and exits: its context is unusable.
``TBE_FUZZ_WORKER_PROFILE=DIR`` profiles the cases a worker runs (cProfile, written to
``DIR/worker-<pid>.prof`` after every case, so a worker that is killed leaves its profile too).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
import traceback
from contextlib import nullcontext
from multiprocessing.connection import Connection
from typing import Any, Callable

from fuzz.execution.messages import Answer, Compile, HarnessFailed, Hello, NotMaterialized, Setup, Stalled


def _sync_error() -> Any:
    """The exception a device synchronization raises (an asynchronous CUDA error), or None."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    try:
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - any failure here is the context's
        return e
    return None


def handle(req: dict[str, Any], watch: Any = None) -> tuple[Any, bool]:
    """(reply, whether this process must exit after sending it). ``watch`` (``fuzz.execution.stall``): each of the
    case's interpreter programs is timed against the request's ``stall_s``; one that runs past it ends the case,
    and the reply is ``Stalled``: the supervisor then ends the case as a hang."""
    from fuzz.execution import artifacts, stall
    from fuzz.judge import check
    from fuzz.execution import forced_crash
    from fuzz.status import FailureKind
    from cases import case_from_dict, tensors
    from fuzz.compile import watch as compile_watch
    from fuzz.memcheck import sanitizer
    from tbe import KernelConfig, faults
    from tbe.backend import default_device

    for p in reversed(req.get("sys_path", ())):  # the driver's import path (e.g. a --sut module beside it)
        if p not in sys.path:
            sys.path.insert(0, p)
    with faults.allow() if req["allow_faults"] else nullcontext():
        config = KernelConfig.from_dict(req["config"])
    case = case_from_dict(req["case"])
    t0 = time.perf_counter()
    try:
        t = artifacts.load_tensors(req["saved"]) if req["saved"] else tensors(
            case, steps=req["steps"], weights=False, device=check.draw_device(req.get("options", {}).get("sut")))
    except ValueError as e:
        return NotMaterialized(str(e)), False
    materialized = time.perf_counter() - t0
    forced = forced_crash.parse(req.get("forced"))
    result = None
    if forced is not None:
        tables, bags, _ = case.size()
        if forced.matches(tables, bags // max(1, tables), int(t.indices.numel())):
            try:
                forced.fire(default_device())
            except Exception as e:  # noqa: BLE001 - classified like a kernel's exception
                result = check.case_result(case, t, config, time.perf_counter() - t0, *check.classify(e))
    if result is None:
        if watch is not None and req.get("stall_s") is not None:
            watch.arm(req["stall_s"])
        safe = _memory_safe(req)  # asked first: after a CUDA error nothing may touch the device
        try:
            with compile_watch.watch() as compiles, sanitizer.watched() if req.get("watch") else nullcontext() as outside:
                result = check.run_case(case, config, t, req["steps"], **req.get("options", {}))
            result.outside = outside() if outside is not None else 0 if safe else None
        except stall.ProgramStalled as e:  # the interpreter's state is left mid-program: this worker ends
            return Stalled(e.stalled), True
        finally:
            if watch is not None:
                watch.disarm()
        result.compiles = compiles
        result.phases["materialize"] = result.phases.get("materialize", 0.0) + materialized
    err = _sync_error()
    if err is not None and result.error_kind != FailureKind.CUDA_ERROR:
        result.error, result.error_kind = check.classify(err)[1], FailureKind.CUDA_ERROR
    return Answer(_plain(result)), result.error_kind == FailureKind.CUDA_ERROR


def _memory_safe(req: dict[str, Any]) -> bool:
    """Whether the case's SUT declares that its own code checks every access (``Capabilities.memory_safe``)."""
    from fuzz.sut import DEFAULT, get

    caps = get(req.get("options", {}).get("sut") or DEFAULT).capabilities
    return caps.memory_safe and not caps.triton_kernels


def _plain(result: Any) -> Any:
    """The result with Python numbers only, so unpickling it never needs a device in the driver."""
    for r in result.reports:
        for name, value in vars(r.worst).items() if r.worst is not None else ():
            if hasattr(value, "item"):
                setattr(r.worst, name, value.item())
    return result


def _report_compiles(send: Callable[[Any], None]) -> bool:
    """Tell the supervisor when a kernel build (or disk-cache load) starts and ends, so that its hang timeout
    counts running time, not compiling time; False where this Triton has no JIT hooks (or under the
    interpreter, which builds nothing)."""
    from tbe.backend import INTERPRETED

    if INTERPRETED:
        return False
    try:
        from triton import knobs
    except ImportError:
        return False
    runtime = getattr(knobs, "runtime", None)
    if runtime is None or not hasattr(runtime, "jit_cache_hook") or not hasattr(runtime, "jit_post_compile_hook"):
        return False
    before, after = runtime.jit_cache_hook, runtime.jit_post_compile_hook

    def started(*args: Any, **kwargs: Any) -> bool:
        send(Compile(True))
        return bool(before(*args, **kwargs)) if before is not None else False  # True would skip the build

    def ended(*args: Any, **kwargs: Any) -> None:
        send(Compile(False))
        if after is not None:
            after(*args, **kwargs)

    runtime.jit_cache_hook, runtime.jit_post_compile_hook = started, ended
    return True


def _on_gpu() -> bool:
    from tbe.backend import INTERPRETED, default_device

    return not INTERPRETED and default_device().type == "cuda"


def _make_context() -> None:
    """On a GPU, make the CUDA context now: a worker started ahead of its first case (``fuzz.execution.worker_process``)
    then pays for it while the driver is still starting. Nothing it reads comes with the setup."""
    if _on_gpu():
        import torch

        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()


def _load_triton_driver() -> None:
    """On a GPU, build or load Triton's driver utilities now (after the setup: they go through its cache)."""
    if _on_gpu():
        from triton.runtime import driver

        try:
            driver.active.utils  # noqa: B018  (built or loaded on first use)
        except AttributeError:  # a Triton whose driver keeps them elsewhere: its first launch loads them
            pass


def main(argv: list[str]) -> int:
    clock = {"main": time.time()}  # wall-clock marks of this start, for the first answer's timeline
    faulthandler.enable(file=sys.stderr, all_threads=True)
    if hasattr(signal, "SIGUSR1"):  # the supervisor asks for the stacks of a hung case before killing it
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    requests = Connection(int(argv[1]), writable=False)
    replies = Connection(int(argv[2]), readable=False)
    from fuzz.execution import artifacts, stall
    from fuzz.execution.worker_env import WORKER_PROFILE
    from fuzz.execution.worker_process import apply_setup
    from fuzz.judge import check  # noqa: F401  (what every case needs, imported while the driver starts)
    from fuzz.memcheck import sanitizer

    clock["imported"] = time.time()
    _make_context()
    clock["device"] = time.time()
    try:
        setup = requests.recv()
    except EOFError:  # the driver went away before it needed this worker
        return 0
    if not isinstance(setup, Setup):
        return 0
    clock["setup"] = time.time()
    apply_setup(setup.env)
    sanitize = sanitizer.enable_from_env()
    profile_dir = WORKER_PROFILE.path()
    profiler = None
    if profile_dir:
        import cProfile

        os.makedirs(profile_dir, exist_ok=True)
        profiler = cProfile.Profile()
    lock = threading.Lock()  # Triton's JIT hooks send from whichever thread builds a kernel: one send at a time

    def send(msg: Any) -> None:
        with lock:
            replies.send(msg)

    events = _report_compiles(send)
    program_watch = stall.install()
    _load_triton_driver()
    environment = artifacts.environment()
    clock["hello"] = time.time()
    send(Hello({"pid": os.getpid(), "environment": environment, "sanitizer": sanitize,
                "compile_events": events, "program_watch": program_watch is not None, "clock": clock}))
    while True:
        try:
            req = requests.recv()
        except EOFError:  # the driver went away
            return 0
        if req is None:
            return 0
        if profiler is not None:
            profiler.enable()
        try:
            reply, must_exit = handle(req, program_watch)
        except Exception:  # noqa: BLE001 - a harness bug: report it, never pass it off as the kernel's
            reply, must_exit = HarnessFailed(traceback.format_exc()), False
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(os.path.join(profile_dir, f"worker-{os.getpid()}.prof"))
        send(reply)
        if must_exit:
            sys.stdout.flush()
            os._exit(0)  # no clean-up: it could touch the poisoned context


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
