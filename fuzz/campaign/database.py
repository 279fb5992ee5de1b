"""Where a campaign keeps its Hypothesis example database: a directory, or Redis for a fleet.

``--database DIR`` (or none: ``<artifacts>/.hypothesis``) gives Hypothesis' directory
database, which processes on one host can share. ``--database redis://host:port/db``
gives Hypothesis' own ``RedisExampleDatabase`` (pip package ``redis``), so campaigns on
many hosts replay and extend one corpus. Either way the key carries a hash of the
KernelConfig, so a failure found under one config is not replayed against another.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def config_key(config: Any) -> str:
    return hashlib.sha1(config.to_json().encode()).hexdigest()[:12]


def is_redis(url: str) -> bool:
    return url.startswith(REDIS_SCHEMES)


def require_redis(url: str) -> str:
    """``url`` (a redis:// one) once the redis package is importable; ValueError naming it otherwise."""
    try:
        import redis  # noqa: F401
    except ImportError:
        raise ValueError(f"{url!r} needs the redis package (pip install redis)") from None
    return url


def check_url(text: str) -> str:
    """Validate a --database value early (argparse); ValueError names what is wrong."""
    if is_redis(text):
        return require_redis(text)
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{text!r} exists and is not a directory")
    return text


def open_database(location: str, config: Any):
    """The example database for ``config`` at ``location`` (a directory or a redis:// URL)."""
    key = config_key(config)
    if is_redis(location):
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase

        client = redis.Redis.from_url(location)
        client.ping()  # fail now, naming the server, rather than mid-campaign
        return RedisExampleDatabase(client, key_prefix=f"tbe-fuzz:{key}:".encode())
    from hypothesis.database import DirectoryBasedExampleDatabase

    return DirectoryBasedExampleDatabase(str(Path(location) / key))
