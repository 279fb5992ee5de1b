"""Pin each pytest-xdist worker to one GPU: ``pytest -m fuzz -n N`` then uses every GPU of a host.

Must run before CUDA starts in the worker (tests/conftest.py calls it before importing
torch). The worker's number comes from ``PYTEST_XDIST_WORKER`` (gw0, gw1, ...); the GPUs
from ``CUDA_VISIBLE_DEVICES`` if set, else from ``nvidia-smi -L``. Worker k gets GPU
k mod (number of GPUs). No GPU, or not an xdist worker: nothing changes. This module
imports nothing heavy, so it is safe to call first.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import MutableMapping, Optional, Sequence


def gpu_ids(env: MutableMapping[str, str]) -> list[str]:
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [x.strip() for x in listed.split(",") if x.strip()]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(l for l in out.splitlines() if l.startswith("GPU "))]


def pick(worker: Optional[str], gpus: Sequence[str]) -> Optional[str]:
    """The GPU for xdist worker ``worker`` ("gw3"), or None when there is nothing to pin."""
    m = re.fullmatch(r"gw(\d+)", worker or "")
    if m is None or not gpus:
        return None
    return gpus[int(m.group(1)) % len(gpus)]


# torch CPU threads of a process whose kernels and FP64 references run on a GPU (see case_threads)
GPU_CASE_THREADS = 4


def case_threads(workers: int) -> str:
    """OMP_NUM_THREADS for a campaign on a GPU and its supervised worker, ``workers`` campaigns per host:
    the CPU side of a case is small ops (materialization, the bounds repair, tiers), which a thread
    per core slows rather than speeds (benchmarks/results/README.md, "Fuzz throughput")."""
    return str(min(GPU_CASE_THREADS, int(core_share(workers))))


def core_share(workers: int) -> str:
    """OMP_NUM_THREADS for one of ``workers`` processes sharing this machine's cores: torch's default of a
    thread per core in each of them oversubscribes the cores (xdist workers, ``--workers`` campaigns)."""
    return str(max(1, (os.cpu_count() or 1) // max(1, workers)))


def pin_xdist_worker(env: MutableMapping[str, str] = os.environ) -> Optional[str]:
    """Set CUDA_VISIBLE_DEVICES for this xdist worker; returns the GPU chosen (None: unchanged)."""
    gpu = pick(env.get("PYTEST_XDIST_WORKER"), gpu_ids(env) if env.get("PYTEST_XDIST_WORKER") else [])
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return gpu
