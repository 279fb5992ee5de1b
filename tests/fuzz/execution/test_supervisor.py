"""Supervised execution: a worker that crashes, hangs or hits a CUDA error gives a failing result with
its artifact, in a campaign, a replay and a pytest fuzz test; the normal path reuses one worker.

Failures are forced with ``fuzz.execution.forced_crash`` (TBE_FUZZ_FORCE_CRASH), which fails the worker for cases
past a size, so shrinking has a threshold to find.
"""

from __future__ import annotations

import dataclasses

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

from fuzz.execution.forced_crash import FORCE_CRASH
from fuzz.execution import artifacts

from tbe import faults
from fuzz.campaign import CampaignOptions, CampaignRunner
from fuzz.judge.check import classify
from fuzz.cli import main
from fuzz.execution import Supervisor, leftover_pending, timeout_for
from fuzz.execution.envelope import envelope, stall_for
from fuzz.execution.messages import Answer, Compile, Waited
from tbe.backend import INTERPRETED
from cases import CaseSpec
from tbe import KernelConfig
from tests.fuzz.campaign.test_fuzz_driver import REPO, TINY

SPEC = CaseSpec(tables=((5, 4), (7, 3)), batch_size=3, seed=3)  # 2 tables, 6 bags


@pytest.fixture(scope="module")
def sup():
    s = Supervisor(sanitize=False)
    yield s
    s.close()


def test_normal_path_keeps_one_worker():
    s = Supervisor()
    try:
        results = [s.run(SPEC, KernelConfig()) for _ in range(3)]
        assert all(r.ok for r in results) and s.started == 1
        assert s.environment["python"] and "triton" in s.environment
    finally:
        s.close()


def test_a_mismatch_keeps_its_worker_from_the_first_failure_on():
    """Unsanitized: the first failure gets a fresh worker (its accesses were not watched); from then on the
    interpreter's address watch vouches for each failing case, and a shrink's failing candidates share one."""
    s = Supervisor(sanitize=False)
    try:
        with faults.allow():
            config = KernelConfig(faults=("fwd_skip_last_id",))
            first = s.run(SPEC, config)
            assert first.kind == "mismatch" and first.outside is None and s._worker is None
            rest = [s.run(SPEC, config) for _ in range(3)]
        assert [r.kind for r in rest] == ["mismatch"] * 3
        if INTERPRETED:
            assert [r.outside for r in rest] == [0, 0, 0] and s._worker.cases == 3
            assert s.started == 3, "one fresh worker after the first failure, and its spare: no more"
    finally:
        s.close()


def test_a_memory_safe_sut_vouches_for_its_cases_and_an_unwatched_kernel_does_not():
    """torch's adapter checks every id it uses (Capabilities.memory_safe): its failing case keeps the worker."""
    s = Supervisor(sanitize=False)
    try:
        assert s.run(SPEC, KernelConfig(), sut="torch").outside == 0
        assert s.run(SPEC, KernelConfig()).outside is None, "no failure yet: the Triton kernels ran unwatched"
    finally:
        s.close()


def test_a_prestarted_worker_is_the_one_that_runs_the_first_case():
    s = Supervisor()
    try:
        s.prestart()
        s.prestart()  # a second call starts nothing more
        early = s._spare
        assert s.started == 1 and early.proc.poll() is None  # running before any case was sent
        assert s.run(SPEC, KernelConfig()).ok
        assert s.started == 1 and s._worker is early and early.cases == 1
    finally:
        s.close()


def test_worker_profile_names_the_kernel_work(tmp_path):
    """TBE_FUZZ_WORKER_PROFILE leaves a cProfile of the cases the worker ran, readable by pstats."""
    import pstats

    s = Supervisor(env={**os.environ, "TBE_FUZZ_WORKER_PROFILE": str(tmp_path)})
    try:
        assert s.run(SPEC, KernelConfig()).ok
    finally:
        s.close()
    (prof,) = tmp_path.glob("worker-*.prof")
    funcs = {f"{file}:{name}" for file, _, name in pstats.Stats(str(prof)).stats}
    assert any(f.endswith("check.py:run_case") for f in funcs), sorted(funcs)[:20]


@pytest.mark.parametrize("how, expect", [("segv", "killed by SIGSEGV"), ("abort", "killed by SIGABRT"),
                                         ("exit", "exited with status 3")])
def test_crash_becomes_a_failing_result(sup, monkeypatch, how, expect):
    monkeypatch.setenv(FORCE_CRASH.name, f"{how}:tables>=2")
    r = sup.run(SPEC, KernelConfig())
    assert not r.ok and r.kind == "crash" and expect in r.error, r.text()
    assert r.lookups > 0 and r.tiers, "a crashed case still reports what it was"
    if how != "exit":  # faulthandler's stack names the line that was running
        assert "forced_crash.py" in r.error
    monkeypatch.delenv(FORCE_CRASH.name)
    assert sup.run(SPEC, KernelConfig()).ok  # a fresh worker took over


def test_cuda_error_is_its_own_kind_and_retires_the_worker(sup, monkeypatch):
    started = sup.started
    monkeypatch.setenv(FORCE_CRASH.name, "cuda:tables>=1")
    r = sup.run(SPEC, KernelConfig())
    assert r.kind == "cuda_error" and "illegal memory access" in r.error and "replaced" in r.text()
    monkeypatch.delenv(FORCE_CRASH.name)
    assert sup.run(SPEC, KernelConfig()).ok and sup.started > started
    assert classify(RuntimeError("Triton Error [CUDA]: an illegal memory access was encountered"))[0] == "cuda_error"
    assert classify(ValueError("bad"))[0] == "exception"


def test_cuda_errors_are_told_by_type_and_triton_s_by_its_launcher_s_text():
    """torch's CUDA error is a type of its own, found anywhere in the chain; a message that only mentions CUDA is
    no CUDA error (the traceback's text is not searched)."""
    try:
        try:
            raise torch.AcceleratorError("CUDA error: an illegal memory access was encountered")
        except RuntimeError as inner:
            raise ValueError("the check failed") from inner
    except ValueError as e:
        assert classify(e)[0] == "cuda_error"
    assert classify(ValueError("expected a CUDA error: illegal memory access"))[0] == "exception"
    assert classify(RuntimeError("cudaErrorIllegalAddress from the launcher"))[0] == "cuda_error"


def test_hang_is_killed_after_its_timeout(monkeypatch):
    s = Supervisor(timeout_scale=0.06)
    monkeypatch.setenv(FORCE_CRASH.name, "hang:lookups>=1")
    try:
        t0 = time.perf_counter()
        r = s.run(SPEC, KernelConfig())
        assert r.kind == "hang" and "no answer after" in r.error
        assert "forced_crash.py" in r.error, "the stacks dumped before the kill show where it hung"
        assert time.perf_counter() - t0 < timeout_for(SPEC, scale=0.06) + 30
    finally:
        s.close()


@pytest.mark.parametrize("var, value, allow", [("TBE_FUZZ_SANITIZE", "maybe", "1"),
                                               (FORCE_CRASH.name, "segv:lookups=3", "1"),
                                               (FORCE_CRASH.name, "segv:lookups>=3", "0")])
def test_cli_refuses_bad_environment_cleanly(monkeypatch, capsys, var, value, allow):
    monkeypatch.setenv(var, value)
    monkeypatch.setenv("TBE_FUZZ_ALLOW_FAULTS", allow)
    with pytest.raises(SystemExit) as exc:
        main(["replay", "/no/such/artifact"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and var in err and "Traceback" not in err


def test_timeout_grows_with_the_case():
    small, big = CaseSpec(tables=((5, 4),), batch_size=2), CaseSpec(tables=((5, 4),) * 8, batch_size=64, max_length=50)
    assert timeout_for(big) > timeout_for(small) >= envelope().floor_s


@pytest.mark.skipif(not INTERPRETED, reason="the wild store and the sanitizer are the Triton interpreter's")
def test_interpreter_wild_store_crashes_or_is_named(monkeypatch):
    """The 'ima' kernel stores 1 TiB past its tensor: SIGSEGV unsanitized, a finding under the sanitizer."""
    monkeypatch.setenv(FORCE_CRASH.name, "ima:lookups>=1")
    for sanitize, kind, words in ((False, "crash", "SIGSEGV"), (True, "sanitizer", "_wild_store")):
        s = Supervisor(sanitize=sanitize)
        try:
            r = s.run(SPEC, KernelConfig())
            assert r.kind == kind and words in r.error, r.text()
        finally:
            s.close()
    assert "x_ptr[274877906944]" in r.error and "past the end of its storage" in r.error


def test_the_case_is_on_disk_while_it_runs(tmp_path, monkeypatch):
    s = Supervisor()
    seen = []
    real = s._run_once

    def spy(case, config, req, saved, *end):
        (d,) = list((tmp_path / "pending").iterdir())
        seen.append((json.loads((d / "case.json").read_text()), json.loads((d / "config.json").read_text())))
        return real(case, config, req, saved, *end)

    monkeypatch.setattr(s, "_run_once", spy)
    try:
        assert s.run(SPEC, KernelConfig(chunk_size=4), pending=tmp_path / "pending").ok
    finally:
        s.close()
    assert seen == [(SPEC.to_dict(), KernelConfig(chunk_size=4).to_dict())]
    assert not list((tmp_path / "pending").iterdir()), "removed once the driver holds the result"


def test_leftover_pending_names_cases_of_dead_drivers(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f"{int(gone.stdout)}-0"
    dead.mkdir()
    (tmp_path / f"{os.getpid()}-1").mkdir()
    assert leftover_pending(tmp_path) == [dead]


@pytest.mark.fuzz
def test_campaign_survives_a_crash_saves_shrinks_and_replays_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(FORCE_CRASH.name, "segv:lookups>=30")
    # each crashing shrink step costs a fresh worker (seconds on a loaded machine): room for a few
    budget = dataclasses.replace(TINY, max_examples=20, shrink_seconds=60.0)
    res = CampaignRunner(KernelConfig(), budget, 2, CampaignOptions(artifacts_dir=tmp_path)).run()
    assert not res.ok and res.failure.kind == "crash" and "SIGSEGV" in res.failure.error
    # shrunk by Hypothesis (found by the search) or by the spec reducer (found by the opening tour)
    assert res.failure.lookups >= 30 and res.shrink_examples + res.reduce_steps >= 1
    path = res.artifact
    assert sorted(p.name for p in path.iterdir()) == sorted(artifacts.FILES)
    assert "killed by SIGSEGV" in (path / "report.txt").read_text()
    assert json.loads((path / "meta.json").read_text())["failure_kind"] == "crash"
    assert "TBE_FUZZ_FORCE_CRASH=" in (path / "replay.txt").read_text()
    assert artifacts.load_tensors(path).indices.numel() == res.failure.lookups
    assert main(["replay", str(path)]) == 1
    out = capsys.readouterr().out
    assert "failure kind: crash" in out and "killed by SIGSEGV" in out
    monkeypatch.delenv(FORCE_CRASH.name)
    assert main(["replay", str(path)]) == 0  # without the forced crash the case passes


PYTEST_FILE = '''
from hypothesis import given, settings, strategies as st
from strategies.adversarial import FuzzCase
from cases import CaseSpec
from tests.fuzz_properties import check_fuzz_case

@settings(max_examples=6, database=None, derandomize=True, deadline=None)
@given(st.integers(1, 4).map(lambda b: FuzzCase(CaseSpec(tables=((5, 4),), batch_size=b, seed=1))))
def test_kernel_crash(fc):
    check_fuzz_case(fc)
'''


@pytest.mark.fuzz
def test_pytest_reports_a_crash_as_a_test_failure_naming_its_artifact(tmp_path):
    (tmp_path / "test_crash_demo.py").write_text(textwrap.dedent(PYTEST_FILE))
    child = dict(os.environ, PYTHONPATH=str(REPO), TBE_FUZZ_ALLOW_FAULTS="1", TBE_FUZZ_ARTIFACTS=str(tmp_path / "art"),
                 **{FORCE_CRASH.name: "abort:bags>=2"})
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "1", "-p", "no:cacheprovider",
                          str(tmp_path / "test_crash_demo.py")], cwd=tmp_path, env=child, capture_output=True,
                         text=True, timeout=600)
    text = out.stdout + out.stderr
    print(text)
    assert out.returncode == 1 and "1 failed" in text, text
    assert "crashed" not in text.replace("worker crashed", ""), "the xdist worker must survive"
    assert "worker crashed" in text and "killed by SIGABRT" in text
    (saved,) = [p for p in (tmp_path / "art").iterdir() if not p.name.startswith(".")]  # .pending: in-flight cases
    assert not any((tmp_path / "art" / ".pending").glob("*")), "no case is left pending after the run"
    assert f"artifact: {saved}" in text and f"tbe-fuzz replay {saved}" in text
    assert json.loads((saved / "case.json").read_text())["batch_size"] == 2, "the shrunk example was saved"


# ----------------------------------------------------------------------------- GPU only
@pytest.mark.gpu
def test_gpu_illegal_memory_access_is_survived(monkeypatch):
    s = Supervisor()
    try:
        monkeypatch.setenv(FORCE_CRASH.name, "ima:lookups>=1")
        r = s.run(SPEC, KernelConfig())
        assert r.kind == "cuda_error" and "illegal memory access" in r.error, r.text()
        monkeypatch.delenv(FORCE_CRASH.name)
        # a fresh worker replaced the poisoned one, and after a replacement a spare is kept warm
        assert s.run(SPEC, KernelConfig()).ok and s.started == 3
    finally:
        s.close()


class _Alive:
    def poll(self):
        return None


def _talking_worker(messages):
    """A worker stand-in whose reply pipe carries ``messages`` as (delay_s, message) pairs, in a thread."""
    import multiprocessing

    from fuzz.execution.worker_process import WorkerProcess

    ours, theirs = multiprocessing.Pipe()
    w = object.__new__(WorkerProcess)
    w.replies, w.proc = ours, _Alive()

    def talk():
        for delay, msg in messages:
            time.sleep(delay)
            try:
                theirs.send(msg)
            except OSError:  # the test has ended and dropped its end of the pipe: nobody is listening
                return

    threading.Thread(target=talk, daemon=True).start()
    return w


def test_kernel_builds_do_not_count_toward_a_case_timeout():
    """A worker that reports a build (compile events) gets the build's time added to its deadline: a 1.5 s build
    inside a 1 s timeout is not a hang; the same silence without the events is one."""
    w = _talking_worker([(0.1, Compile(True)), (1.5, Compile(False)), (0.3, Answer("ok"))])
    assert w.wait(1.0) == Answer("ok")
    silent = _talking_worker([(2.0, Answer("late"))])
    assert silent.wait(1.0) is Waited.TIMED_OUT


def test_the_callers_limit_bounds_build_credit_and_is_not_a_hang():
    w = _talking_worker([(0.1, Compile(True)), (5.0, Compile(False))])
    t0 = time.monotonic()
    assert w.wait(0.5, limit=t0 + 1.0) is Waited.LIMIT
    assert time.monotonic() - t0 < 2.5


def test_an_interpreter_program_past_its_limit_ends_the_case_as_hang_naming_the_program():
    """The planted endless chunk loop ends as ``hang`` from the worker's program watch (it names the kernel and the
    program), not from the case's timeout; the same case passes without the fault under the same watch."""
    from fuzz.selftest.hangs import CASE, CONFIG
    from tbe import faults

    if not INTERPRETED:
        pytest.skip("the program watch hooks Triton's interpreter; compiled kernels keep the case's timeout")
    scale = 0.6  # the case's timeout comes 11 s after the program's limit: the kernels before the loop fit in it
    s = Supervisor(timeout_scale=scale)
    try:
        with faults.allow():
            hung = s.run(CASE, KernelConfig(faults=("hang_narrow_long_run",), **CONFIG))
        assert hung.kind == "hang" and "of _chunk_kernel ran" in hung.error and "without finishing" in hung.error
        assert f"one program may run {stall_for(CASE, scale=scale):.0f}s" in hung.error
        assert stall_for(CASE, scale=scale) < timeout_for(CASE, scale=scale)
        assert s.run(CASE, KernelConfig(**CONFIG)).ok
    finally:
        s.close()


def test_the_program_watch_reports_once_past_the_limit_and_never_when_disarmed():
    from fuzz.execution.stall import ProgramWatch

    w, told = ProgramWatch(), []
    w.arm(5.0, told.append)
    w.program("_k", 0, 3)
    t = w._started
    assert w.check(t + 4.9) is None  # within the limit
    w.program("_k", 1, 3)  # a new program restarts the clock
    t1 = w._started
    assert w.longest >= 0.0 and w.check(t1 + 4.0) is None
    stalled = w.check(t1 + 6.0)
    assert stalled is not None and stalled["kernel"] == "_k" and stalled["program"] == 1 and told == [stalled]
    assert w.check(t1 + 60.0) is None and len(told) == 1  # once per arming
    w.arm(5.0, told.append)
    w.launch_ended()  # between launches no program runs: nothing stalls
    assert w.check(t1 + 600.0) is None
    w.program("_k", 0, 1)
    w.disarm()
    assert w.check(w._started + 600.0) is None and len(told) == 1


def test_log_directories_a_hard_exit_left_are_swept_up_and_live_ones_stay(tmp_path):
    """A driver killed hard (a second Ctrl-C) cannot remove its workers' log directory; the next driver sweeps up
    those whose driver is gone and that are an hour old. A live driver's, a recent one, and other files stay."""
    from fuzz.execution.worker_process import STALE_LOGS_S, sweep_stale_logs

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid no process holds now
    old = time.time() - 2 * STALE_LOGS_S
    dirs = {name: tmp_path / name for name in (f"tbe-fuzz-workers-{gone.pid}-abc", f"tbe-fuzz-early-{gone.pid}-def",
                                               f"tbe-fuzz-workers-{os.getpid()}-ghi", f"tbe-fuzz-early-{gone.pid}-new",
                                               "tbe-fuzz-cache")}
    for name, d in dirs.items():
        d.mkdir()
        (d / "worker-0.log").write_text("log")
        if not name.endswith("-new"):
            os.utime(d, (old, old))
    removed = sweep_stale_logs(tmp_path)
    assert sorted(p.name for p in removed) == sorted([f"tbe-fuzz-workers-{gone.pid}-abc",
                                                      f"tbe-fuzz-early-{gone.pid}-def"])
    assert [name for name, d in dirs.items() if d.exists()] == [f"tbe-fuzz-workers-{os.getpid()}-ghi",
                                                                f"tbe-fuzz-early-{gone.pid}-new", "tbe-fuzz-cache"]


def test_a_supervisors_log_directory_names_its_driver():
    s = Supervisor()
    try:
        assert s.tmp.name.startswith(f"tbe-fuzz-workers-{os.getpid()}-") and s.tmp.is_dir()
    finally:
        s.close()
    assert not s.tmp.exists()


def test_the_program_watch_ends_a_stalled_program_in_the_main_thread_on_time():
    """The watch checks from a timer's signal in the thread that runs the kernels, so a program stuck in an endless
    loop is ended within a tick of its limit (a watch thread, starved of the GIL by the interpreter, told 2 to 27 s
    late). Run in a process of its own: installing the watch hooks the interpreter for good."""
    if not INTERPRETED:
        pytest.skip("the program watch hooks Triton's interpreter; compiled kernels keep the case's timeout")
    code = textwrap.dedent("""
        import json, time
        from fuzz.execution import stall
        from fuzz.judge.check import run_case
        from fuzz.selftest.hangs import CASE, CONFIG
        from tbe import KernelConfig, faults
        watch = stall.install()
        watch.arm(2.0)
        try:
            with faults.allow():
                run_case(CASE, KernelConfig(faults=("hang_narrow_long_run",), **CONFIG))
        except stall.ProgramStalled as e:
            print(json.dumps(e.stalled))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, TRITON_INTERPRET="1"))
    stalled = json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else None
    assert stalled is not None, out.stderr[-2000:]
    assert stalled["kernel"] == "_chunk_kernel" and 2.0 < stalled["seconds"] < 2.0 + 1.0, stalled
