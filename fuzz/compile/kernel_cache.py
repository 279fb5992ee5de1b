"""Triton cache managers: one builder per kernel on a machine, and a Redis cache shared by a fleet.

Triton's ``compile`` asks its cache manager for a kernel's group of files (``get_group``), builds
on a miss, writes each file (``put``) and finally the group (``put_group``); processes that miss
together all build. ``LockedFileCacheManager`` takes an ``fcntl.flock`` on the kernel's cache
directory after a miss and asks again once it holds it: the first process builds and releases the
lock when its group is written, the others wait and load that build. A waiter gives up after
``TBE_FUZZ_BUILD_LOCK_TIMEOUT`` seconds (default 600) and builds itself. A builder that dies drops
its lock with its file descriptor; a build that raised is never finished, so its lock goes when its
manager is collected or, at the latest, when the same thread looks up its next kernel (Triton builds
one kernel at a time per thread): a failed build never blocks the machine.

``LockedRemoteCacheManager`` does the same over Triton's ``RemoteCacheManager`` (the group and its
files in a remote store, materialized in the local cache directory, where the lock lives), with
``RedisBackend``: Triton's ``RedisRemoteCacheBackend`` reads ``knobs.cache.redis``, which Triton
3.6 and 3.9 do not have (their knob is ``knobs.redis``), so it cannot be constructed; this one
takes a ``redis://`` URL from ``TBE_FUZZ_KERNEL_CACHE``. Both are chosen through Triton's own
variables (``TRITON_CACHE_MANAGER``, ``TRITON_REMOTE_CACHE_BACKEND``), which ``install`` sets so
that every process started afterwards (warm-up pool, campaign workers) inherits them. The lock is
hand-made (a few lines of ``fcntl``) because it must sit between Triton's cache look-up and its
build, which only a cache manager sees.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from typing import Dict, Optional

import tbe.backend  # noqa: F401  (picks the interpreter before Triton is first imported)
from triton.runtime.cache import FileCacheManager, RedisRemoteCacheBackend, RemoteCacheManager
from tbe.env import Kind, register

KERNEL_CACHE = register(
    "TBE_FUZZ_KERNEL_CACHE", Kind.TEXT, None,
    "a redis:// URL holding compiled kernels for a fleet (Triton's remote cache, fuzz.compile.kernel_cache); "
    "tbe-fuzz sets it from --database redis://")
BUILD_LOCK_TIMEOUT = register(
    "TBE_FUZZ_BUILD_LOCK_TIMEOUT", Kind.TEXT, "600",
    "seconds a process waits for another process's build of the same kernel before building it itself")

URL_ENV = KERNEL_CACHE.name
TIMEOUT_ENV = BUILD_LOCK_TIMEOUT.name
LOCK_FILE = "tbe-fuzz-build.lock"
MANAGER_ENV = "TRITON_CACHE_MANAGER"
BACKEND_ENV = "TRITON_REMOTE_CACHE_BACKEND"


def _timeout() -> float:
    text = BUILD_LOCK_TIMEOUT.text()
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV}: expected seconds, got {text!r}") from None
    if not value >= 0:
        raise ValueError(f"{TIMEOUT_ENV}: expected seconds >= 0, got {text!r}")
    return value


_HELD = threading.local()  # .manager: the manager whose build this thread is running, if any


class _BuildLock:
    """The per-kernel build lock: taken after a cache miss, released once the group is written."""

    _fd: Optional[int] = None
    waited: float = 0.0  # seconds this manager waited for another process's build

    def _lock_dir(self) -> Optional[str]:
        raise NotImplementedError

    def _locked_get_group(self, lookup, filename: str) -> Optional[Dict[str, str]]:
        previous = getattr(_HELD, "manager", None)
        if previous is not None and previous is not self:  # this thread moved on: that build raised
            previous._release()
        found = lookup(filename)
        where = self._lock_dir()
        if found is not None or self._fd is not None or where is None:
            return found
        timeout = _timeout()
        fd = os.open(os.path.join(where, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        t0 = time.monotonic()
        deadline = t0 + timeout
        pause = 0.005
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:  # a stuck builder: build anyway rather than hang
                    os.close(fd)
                    self.waited = time.monotonic() - t0
                    return lookup(filename)
                time.sleep(pause)
                pause = min(pause * 2, 0.1)
        self.waited = time.monotonic() - t0
        found = lookup(filename)  # built by the process we waited for?
        if found is not None:
            os.close(fd)  # closing drops the lock
            return found
        self._fd = fd  # this process builds; put_group releases
        _HELD.manager = self
        return None

    def _release(self) -> None:
        if getattr(_HELD, "manager", None) is self:
            _HELD.manager = None
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __del__(self) -> None:  # a build that raised never reaches put_group
        self._release()


class LockedFileCacheManager(_BuildLock, FileCacheManager):
    """Triton's file cache with one builder per kernel among the processes sharing the directory."""

    def __init__(self, key, override=False, dump=False):
        FileCacheManager.__init__(self, key, override=override, dump=dump)
        self._locking = not (override or dump)

    def _lock_dir(self) -> Optional[str]:
        return self.cache_dir if self._locking else None

    def _lookup(self, filename: str) -> Optional[Dict[str, str]]:
        try:
            return super().get_group(filename)
        except (AttributeError, TypeError):  # a group the remote manager materialized here (names, not paths)
            return None

    def get_group(self, filename: str) -> Optional[Dict[str, str]]:
        return self._locked_get_group(self._lookup, filename)

    def put_group(self, filename: str, group: Dict[str, str]):
        try:
            return super().put_group(filename, group)
        finally:
            self._release()


class LockedRemoteCacheManager(_BuildLock, RemoteCacheManager):
    """Triton's remote cache (``TRITON_REMOTE_CACHE_BACKEND``) with the same per-machine build lock."""

    def _lock_dir(self) -> Optional[str]:
        return None if (self._dump or self._override) else self._file_cache_manager.cache_dir

    def get_group(self, filename: str) -> Optional[Dict[str, str]]:
        return self._locked_get_group(super().get_group, filename)

    def put_group(self, filename: str, group: Dict[str, str]):
        try:
            return super().put_group(filename, group)
        finally:
            self._release()


class RedisBackend(RedisRemoteCacheBackend):
    """Triton's Redis backend, connected to the ``redis://`` URL in ``TBE_FUZZ_KERNEL_CACHE``; keys follow
    ``TRITON_REDIS_KEY_FORMAT`` (default ``triton:{key}:{filename}``)."""

    def __init__(self, key: str):
        import redis

        url = KERNEL_CACHE.text()
        if not url:
            raise RuntimeError(f"{URL_ENV} is not set: the Redis kernel cache needs a redis:// URL")
        self._key = key
        self._key_fmt = os.environ.get("TRITON_REDIS_KEY_FORMAT", "triton:{key}:{filename}")
        self._redis = redis.Redis.from_url(url)


def install(redis_url: Optional[str] = None) -> str:
    """Make Triton build each kernel once per machine (and share builds through ``redis_url``), in this
    process and every process it starts. A cache manager the user chose (``TRITON_CACHE_MANAGER``) is
    kept. Returns what is in force, for the report."""
    mine = {f"{__name__}:LockedFileCacheManager", f"{__name__}:LockedRemoteCacheManager"}
    current = os.environ.get(MANAGER_ENV)
    if current and current not in mine:
        return f"Triton cache manager {current} (set by the user)"
    if redis_url:
        KERNEL_CACHE.set(redis_url)
        os.environ[BACKEND_ENV] = f"{__name__}:RedisBackend"
        os.environ[MANAGER_ENV] = f"{__name__}:LockedRemoteCacheManager"
        return f"kernel cache: Redis {redis_url}, one build per kernel on this machine"
    if current == f"{__name__}:LockedRemoteCacheManager":
        return f"kernel cache: Redis {KERNEL_CACHE.raw()}, one build per kernel on this machine"
    os.environ[MANAGER_ENV] = f"{__name__}:LockedFileCacheManager"
    return "kernel cache: Triton's cache directory, one build per kernel on this machine"
