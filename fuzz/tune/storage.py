"""Where ``tbe-fuzz tune --storage`` keeps Optuna's study, so several processes search one study.

``redis://host:port/db`` (or ``rediss://``, ``unix://``): Optuna's journal storage on Redis,
the same server that can hold the campaign's example database (keys under ``tbe-fuzz-tune``).
An SQLAlchemy URL (``sqlite:///tune.db``, ``postgresql://...``): Optuna's RDB storage. Any
other text: a journal file at that path (processes of one host). Processes join one study when
they tune the same baseline for the same shapes and fields: the study's name is a hash of those
(``study_name``), so a process with another baseline never mixes its trials in.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Optional, Sequence

from fuzz.campaign import is_redis, require_redis
from fuzz.gate import PerfShape
from tbe import KernelConfig

REDIS_PREFIX = "tbe-fuzz-tune"
RDB_SCHEMES = ("sqlite://", "postgresql://", "postgresql+", "mysql://", "mysql+")


def check_url(text: str) -> str:
    """Validate a --storage value early (argparse); ValueError names what is wrong."""
    if is_redis(text):
        return require_redis(text)
    if text.startswith(RDB_SCHEMES):
        return text
    path = Path(text)
    if path.is_dir():
        raise ValueError(f"{text!r} is a directory; give a journal file path, a redis:// or an "
                         "SQLAlchemy URL")
    if not path.parent.is_dir():
        raise ValueError(f"{text!r}: no such directory {str(path.parent)!r}")
    return text


def open_storage(url: str) -> Any:
    """The Optuna storage at ``url``; a Redis server is pinged now so a wrong address fails before any trial."""
    import warnings

    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend, JournalRedisBackend

    if is_redis(url):
        with warnings.catch_warnings():  # experimental since Optuna 3.1 and pinned here, so no surprise
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            backend = JournalRedisBackend(url, prefix=REDIS_PREFIX)
        backend._redis.ping()
        return JournalStorage(backend)
    if url.startswith(RDB_SCHEMES):
        return optuna.storages.RDBStorage(url)
    return JournalStorage(JournalFileBackend(url))


def study_name(baseline: KernelConfig, shapes: Sequence[PerfShape], fields: Sequence[str]) -> str:
    """``tune-<hash>`` of the baseline, the shapes and the searched fields: what makes trials comparable."""
    key = json.dumps({"baseline": baseline.to_dict(), "shapes": [dataclasses.asdict(s) for s in shapes],
                      "fields": sorted(fields)}, sort_keys=True, default=str)
    return "tune-" + hashlib.sha1(key.encode()).hexdigest()[:12]


def open_study(storage: Optional[Any], name: str, sampler, pruner) -> tuple[Any, bool]:
    """The study and whether this call created it (only the creator enqueues the baseline and the hints)."""
    import optuna

    if storage is None:
        return optuna.create_study(direction="maximize", sampler=sampler, pruner=pruner), True
    try:
        return optuna.create_study(storage=storage, study_name=name, direction="maximize", sampler=sampler,
                                   pruner=pruner), True
    except optuna.exceptions.DuplicatedStudyError:
        return optuna.load_study(storage=storage, study_name=name, sampler=sampler, pruner=pruner), False
