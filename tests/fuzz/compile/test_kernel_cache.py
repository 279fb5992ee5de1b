"""The kernel cache managers (``fuzz.compile.kernel_cache``): one build per kernel on a machine, and builds
shared between hosts through a real Redis server.

Real builds: child processes compile one small kernel for sm_90 with Triton's own compiler (no GPU
needed; ``tests.kernel_cache_probe``) and report what Triton's compilation listener saw. The lock's
hand-off is also checked step by step through the manager API, in threads of this process (an
``flock`` is held per open file, so two managers of one process exclude each other too).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fuzz.compile import kernel_cache
from tests.redis_server import redis_url  # noqa: F401  (the fixture)
from tests.paths import REPO

LOCKED = "fuzz.compile.kernel_cache:LockedFileCacheManager"
REMOTE = "fuzz.compile.kernel_cache:LockedRemoteCacheManager"


def _env(cache_dir: Path, manager: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_") and k != kernel_cache.URL_ENV}
    env.update(TRITON_INTERPRET="0", TRITON_CACHE_DIR=str(cache_dir), TRITON_CACHE_MANAGER=manager,
               TRITON_DEFAULT_FP_FUSION="1", PYTHONPATH=str(REPO), **extra)
    return env


def _compile_together(tmp_path: Path, envs: list[dict[str, str]]) -> list[dict]:
    """Start one probe per environment, let them all compile at once, return their reports."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-m", "tests.kernel_cache_probe", str(go)], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for env in envs]
    for p in procs:  # each says "ready" once Triton is imported and its listener is in place
        assert p.stderr.readline().strip() == "ready"
    go.touch()
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr[-2000:]
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def test_two_processes_build_a_kernel_once(tmp_path):
    cache = tmp_path / "cache"
    reports = _compile_together(tmp_path, [_env(cache, LOCKED), _env(cache, LOCKED)])
    assert sorted(r["compiled"] for r in reports) == [0, 1], reports  # one built, the other waited and loaded
    assert sum(r["loaded"] for r in reports) == 1
    assert reports[0]["cubin_bytes"] == reports[1]["cubin_bytes"] > 0


def _manager(cache: Path, monkeypatch) -> kernel_cache.LockedFileCacheManager:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    return kernel_cache.LockedFileCacheManager("KEY")


def test_a_second_manager_waits_for_the_build_and_takes_it(tmp_path, monkeypatch):
    builder, waiter = _manager(tmp_path, monkeypatch), _manager(tmp_path, monkeypatch)
    assert builder.get_group("k.json") is None  # a miss: this one builds, holding the lock
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("group", waiter.get_group("k.json")))
    t.start()
    t.join(0.5)
    assert t.is_alive(), "the second manager did not wait for the build"
    path = builder.put("{}", "k.json")
    builder.put_group("k.json", {"k.json": path})
    t.join(10)
    assert not t.is_alive() and got["group"] == {"k.json": path}
    assert waiter.waited > 0.4


def test_a_builder_that_fails_lets_the_next_one_build(tmp_path, monkeypatch):
    builder, waiter = _manager(tmp_path, monkeypatch), _manager(tmp_path, monkeypatch)
    assert builder.get_group("k.json") is None
    del builder  # the build raised: put_group never ran, the manager is dropped with the frame
    t0 = time.monotonic()
    assert waiter.get_group("k.json") is None and time.monotonic() - t0 < 5  # not blocked: it builds now
    waiter.put_group("k.json", {})


def test_a_failed_build_kept_alive_is_released_when_its_thread_moves_on(tmp_path, monkeypatch):
    """An exception kept somewhere (a traceback in a report) keeps the failed build's manager alive; the
    lock goes when that thread looks up its next kernel."""
    failed = _manager(tmp_path, monkeypatch)
    assert failed.get_group("k.json") is None  # holds the lock; its build raises; the object lives on
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    other = kernel_cache.LockedFileCacheManager("OTHER")
    assert other.get_group("o.json") is None  # the same thread's next kernel
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("group", _manager(tmp_path, monkeypatch).get_group("k.json")))
    t.start()
    t.join(5)
    assert not t.is_alive() and got["group"] is None  # the lock was free: the other thread builds
    other.put_group("o.json", {})


def test_a_stuck_builder_is_waited_for_only_up_to_the_timeout(tmp_path, monkeypatch):
    builder, waiter = _manager(tmp_path, monkeypatch), _manager(tmp_path, monkeypatch)
    assert builder.get_group("k.json") is None
    monkeypatch.setenv(kernel_cache.TIMEOUT_ENV, "0.3")
    got = {}

    def wait() -> None:  # another thread, as another process would be
        t0 = time.monotonic()
        got["group"] = waiter.get_group("k.json")
        got["seconds"] = time.monotonic() - t0

    t = threading.Thread(target=wait)
    t.start()
    t.join(10)
    assert got["group"] is None and 0.3 <= got["seconds"] < 5
    monkeypatch.setenv(kernel_cache.TIMEOUT_ENV, "soon")
    errors = []
    t = threading.Thread(target=lambda: errors.append(pytest.raises(ValueError, waiter.get_group, "k.json")))
    t.start()
    t.join(10)
    assert "TBE_FUZZ_BUILD_LOCK_TIMEOUT: expected seconds, got 'soon'" in str(errors[0].value)
    builder.put_group("k.json", {})


def test_install_sets_the_managers_and_keeps_a_users_own(monkeypatch):
    for name in (kernel_cache.MANAGER_ENV, kernel_cache.BACKEND_ENV, kernel_cache.URL_ENV):
        monkeypatch.setenv(name, "-")  # recorded, so install's changes are undone after the test
        monkeypatch.delenv(name)
    kernel_cache.install()
    assert os.environ[kernel_cache.MANAGER_ENV] == LOCKED and kernel_cache.BACKEND_ENV not in os.environ
    kernel_cache.install("redis://127.0.0.1:1/0")
    assert os.environ[kernel_cache.MANAGER_ENV] == REMOTE
    assert os.environ[kernel_cache.URL_ENV] == "redis://127.0.0.1:1/0"
    assert os.environ[kernel_cache.BACKEND_ENV] == "fuzz.compile.kernel_cache:RedisBackend"
    monkeypatch.setenv(kernel_cache.MANAGER_ENV, "my.module:Manager")
    assert "set by the user" in kernel_cache.install("redis://127.0.0.1:1/0")
    assert os.environ[kernel_cache.MANAGER_ENV] == "my.module:Manager"


def test_redis_backend_stores_groups_through_tritons_remote_manager(redis_url, tmp_path, monkeypatch):
    url, client = redis_url
    monkeypatch.setenv(kernel_cache.URL_ENV, url)
    monkeypatch.setenv(kernel_cache.BACKEND_ENV, "fuzz.compile.kernel_cache:RedisBackend")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "host-a"))
    a = kernel_cache.LockedRemoteCacheManager("KEY")
    assert a.get_group("k.json") is None
    group = {"k.cubin": a.put(b"\x7fELF-bytes", "k.cubin"), "k.json": a.put('{"name": "k"}', "k.json")}
    a.put_group("k.json", group)
    assert client.get("triton:KEY:k.cubin") == b"\x7fELF-bytes"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "host-b"))  # another host: an empty local cache
    b = kernel_cache.LockedRemoteCacheManager("KEY")
    got = b.get_group("k.json")
    assert set(got) == {"k.cubin", "k.json"} and str(tmp_path / "host-b") in got["k.cubin"]
    assert Path(got["k.cubin"]).read_bytes() == b"\x7fELF-bytes"
    assert b.get_group("missing.json") is None
    b.put_group("missing.json", {})


def test_redis_backend_needs_a_url(monkeypatch):
    monkeypatch.delenv(kernel_cache.URL_ENV, raising=False)
    with pytest.raises(RuntimeError, match="TBE_FUZZ_KERNEL_CACHE"):
        kernel_cache.RedisBackend("KEY")


def test_a_second_host_loads_what_the_first_built_from_redis(redis_url, tmp_path):
    url, client = redis_url
    remote = dict(TBE_FUZZ_KERNEL_CACHE=url, TRITON_REMOTE_CACHE_BACKEND="fuzz.compile.kernel_cache:RedisBackend")
    (first,) = _compile_together(tmp_path / "a", [_env(tmp_path / "host-a", REMOTE, **remote)])
    assert first["compiled"] == 1 and client.keys(b"triton:*")
    (second,) = _compile_together(tmp_path / "b", [_env(tmp_path / "host-b", REMOTE, **remote)])
    assert second == {**first, "compiled": 0, "loaded": 1}
