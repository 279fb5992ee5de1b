"""Failing cases saved whole: one directory per failure, enough to replay it anywhere.

``fuzz-artifacts/<timestamp>-<hash>/`` holds case.json (the spec), config.json (the
KernelConfig), tensors.pt (the materialized batch, d_out of every step and the initial
weights, so a replay survives changes to the materialization code), report.txt (every
Report), environment.json (versions, device, interpreter), meta.json (how the campaign
was run) and replay.txt (the exact command).
"""

from __future__ import annotations

import dataclasses

import datetime
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import torch

from cases import AnyCase, CaseTensors, case_from_dict, tensors
from tbe import KernelConfig
from tbe.backend import INTERPRETED
from fuzz.execution.forced_crash import FORCE_CRASH
from tbe.env import ALLOW_FAULTS

if TYPE_CHECKING:
    from fuzz.judge import CaseResult

FILES = ("case.json", "config.json", "tensors.pt", "report.txt", "environment.json", "meta.json", "replay.txt")
DEFAULT_DIR = Path("fuzz-artifacts")


def _version(dist: str) -> Optional[str]:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _git_commit() -> Optional[str]:
    try:
        root = Path(__file__).resolve().parents[2]
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        commit = out.stdout.strip()
        return commit if out.returncode == 0 and len(commit) == 40 else None
    except (OSError, subprocess.SubprocessError):
        return None


def environment() -> dict[str, Any]:
    """Versions and device this run used (what a replay on another machine should compare)."""
    cuda = torch.cuda.is_available() and not INTERPRETED
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "fbgemm_gpu": _version("fbgemm-gpu-cpu") or _version("fbgemm-gpu") or _version("fbgemm_gpu"),
        "hypothesis": _version("hypothesis"),
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "triton_interpreter": INTERPRETED,
        "git_commit": _git_commit(),
    }


def sut_record(sut: str) -> dict[str, Any]:
    """The SUT's name, and for one loaded from a source tree, the source and what was loaded from it."""
    from fuzz.errors import SUTError
    from fuzz.sut import get

    try:
        target = get(sut)
    except SUTError:
        return {}
    out: dict[str, Any] = {"sut_name": target.name}
    if target.source is not None:
        out["sut_source"] = target.source
    if target.version:
        out["sut_version"] = target.version
    return out


def replay_command(path: Path, config: KernelConfig) -> str:
    forced = FORCE_CRASH.raw()  # a test's forced failure is part of how the case ran
    prefix = f"{ALLOW_FAULTS.name}=1 " if config.faults or forced else ""
    prefix += f"{FORCE_CRASH.name}={shlex.quote(forced)} " if forced else ""
    return f"{prefix}tbe-fuzz replay {shlex.quote(str(path))}   (or: {prefix}python -m fuzz replay {shlex.quote(str(path))})"


def save_failure(
    root: Path, case: AnyCase, config: KernelConfig, saved: CaseTensors, report_text: str,
    meta: Optional[dict[str, Any]] = None, env: Optional[dict[str, Any]] = None,
) -> Path:
    """Write one failure's directory under ``root``; returns its path. ``env`` is the environment the
    kernels ran in (a worker's), default this process's."""
    case_json = json.dumps(case.to_dict(), indent=2, sort_keys=True) + "\n"
    digest = hashlib.sha1((case_json + config.to_json()).encode()).hexdigest()[:10]
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    path = Path(root) / f"{stamp}-{digest}"
    path.mkdir(parents=True, exist_ok=False)
    (path / "case.json").write_text(case_json)
    config.save(path / "config.json")
    torch.save(saved.to_dict(), path / "tensors.pt")
    (path / "report.txt").write_text(report_text.rstrip() + "\n")
    (path / "environment.json").write_text(json.dumps(env or environment(), indent=2, sort_keys=True) + "\n")
    meta = dict(meta or {})
    if meta.get("sut"):  # what it ran against, beside the address a replay resolves again
        meta.update(sut_record(str(meta["sut"])))
    meta.setdefault("argv", sys.argv)
    meta.setdefault("cwd", os.getcwd())
    (path / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    (path / "replay.txt").write_text(replay_command(path, config) + "\n")
    return path


def save_result(root: Path, result: CaseResult, config: KernelConfig, meta: dict[str, Any],
                environment: Optional[dict[str, Any]] = None) -> Path:
    """Save a failing CaseResult as an artifact directory (tensors re-materialized from its case on the
    CPU); ``environment`` is the worker's, where the kernels ran."""
    saved = tensors(result.case)
    meta = {"failure_kind": result.kind, "failed_check": result.failed_check, **meta}
    return save_failure(root, result.case, config, saved, result.text(), meta, environment)


def load_case(path: Path) -> AnyCase:
    """The case a case.json holds; ValueError saying what the file is instead (a KernelConfig, a report, ...)."""
    data = json.loads(Path(path).read_text())
    if isinstance(data, dict) and "kind" not in data and "tables" not in data:
        from tbe import KernelConfig

        what = ("a KernelConfig (give it with --config)" if data and set(data) <= {f.name for f in
                dataclasses.fields(KernelConfig)} else f"an object with fields {sorted(data)[:6]}")
        raise ValueError(f"{path} is not a case: it is {what}; a case.json names its tables")
    try:
        return case_from_dict(data)
    except TypeError as e:  # a missing or extra field of a case record
        raise ValueError(f"{path} is not a valid case: {e}") from e


def load_tensors(directory: Path) -> CaseTensors:
    return CaseTensors.from_dict(torch.load(Path(directory) / "tensors.pt", weights_only=True))
