"""A stamp in Triton's cache directory saying a warm-up of a config finished there.

Loading a fully warm cache still costs the warm-up its worker processes and one case per
combination (about 100 s for the default campaign's 443 groups on 16 cores), so a second
``tbe-fuzz run`` on the same machine would pay for nothing. The stamp's key covers what
decides the specializations: the configs, the kernel sources, the warm-up's own case
enumeration, the Triton and torch versions and the device. Any change there makes a new
key, and a deleted cache takes its stamps with it. A config with a failed warm-up case gets
none. Stamps are per config, so a gate or tune warming a baseline and a candidate builds only
the candidate's configs once the baseline's campaign has run on that machine.

A finished group of a unfinished warm-up gets a group stamp (``write_group``), so a campaign that
ended before its background build did leaves what it built marked, and the next run, or a
campaign running beside it, builds only the rest. ``builder_lock`` makes one process per cache
directory the builder; the others follow its group stamps.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from tbe.config import KernelConfig

_REPO = Path(__file__).resolve().parents[2]
_SOURCES = ("tbe", "fuzz/compile/warmup.py", "strategies/config_space.py", "strategies/tour.py", "cases/spec.py")


def cache_dir() -> Path:
    """Triton's on-disk kernel cache (``TRITON_CACHE_DIR`` or its default)."""
    try:
        import triton

        return Path(triton.knobs.cache.dir)
    except (ImportError, AttributeError):  # an older Triton without knobs
        return Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")


def environment(device: Optional[str] = None) -> str:
    """Digest of what every key shares: Triton and torch versions, ``device`` (default: the GPU's name and
    capability) and the sources. A warm-up computes it once for all its configs (it reads every source)."""
    import torch
    import triton

    if device is None and torch.cuda.is_available():
        cap = torch.cuda.get_device_capability()
        device = f"{torch.cuda.get_device_name()} sm_{cap[0]}{cap[1]}"
    h = hashlib.sha256(f"{triton.__version__} {torch.__version__} {device}".encode())
    for name in _SOURCES:
        root = _REPO / name
        for f in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            h.update(str(f.relative_to(_REPO)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def stamp_key(configs: Sequence[KernelConfig], device: Optional[str] = None, tag: str = "matrix",
              env: Optional[str] = None) -> str:
    """Key of a warm-up of ``configs`` (``tag``: what was built for them) in ``env`` (``environment(device)``
    unless given)."""
    h = hashlib.sha256(json.dumps([c.to_dict() for c in dict.fromkeys(configs)], sort_keys=True).encode())
    h.update(f"{tag} {env if env is not None else environment(device)}".encode())
    return h.hexdigest()[:24]


def _path(key: str) -> Path:
    return cache_dir() / "tbe-fuzz-warm" / f"{key}.json"


def find(key: str) -> Optional[dict[str, Any]]:
    """The stamp of ``key`` (what that warm-up reported), or None."""
    try:
        return json.loads(_path(key).read_text())
    except (OSError, ValueError):
        return None


def write(key: str, summary: dict[str, Any]) -> None:
    """Stamp ``key`` as warm (written atomically: a reader never sees half a stamp)."""
    p = _path(key)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({**summary, "stamped_at": time.strftime("%Y-%m-%d %H:%M:%S")}, sort_keys=True))
    os.replace(tmp, p)


def _group_path(key: str, index: int) -> Path:
    return cache_dir() / "tbe-fuzz-warm" / "groups" / f"{key}-{index}"


def group_done(key: str, index: int) -> bool:
    """Whether group ``index`` of the unit stamped as ``key`` was built here."""
    return _group_path(key, index).exists()


def write_group(key: str, index: int) -> None:
    p = _group_path(key, index)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(time.strftime("%Y-%m-%d %H:%M:%S"))
    os.replace(tmp, p)


def builder_lock() -> Optional[int]:
    """Become this cache directory's one warm-up builder: an open descriptor holding the lock (close it to let
    go; a process that dies lets go with it), or None when another process builds."""
    p = cache_dir() / "tbe-fuzz-warm" / "builder.lock"
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd
