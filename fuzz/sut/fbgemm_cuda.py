"""The ``fbgemm-cuda`` SUT: FBGEMM's CUDA training TBE (EmbeddingLocation.DEVICE, ComputeDevice.CUDA).

The same adapter as ``fbgemm-cpu`` (``fuzz.sut.fbgemm_cpu.FbgemmInstance``) on the device:
given weights written into its tables, stochastic rounding off, fp32/fp16 weights and
outputs, D % 4 == 0, FBGEMM's own bounds check. Left out, from FBGEMM's source, because
they can corrupt memory or kill the CUDA context of the whole campaign process: FATAL
(its CUDA check rejects with a device-side assert); id -1 (the check passes it as a
pruned row, but the CUDA lookup has no such case and would read and update row -1);
broken offsets (the v1 check clamps each bag on its own, in parallel, and never sets the
last offset to len(indices), so some ids can fall in no bag and the backward's
linearized ids for them are never written). Out-of-range ids are still fed: the check
repairs them.
Usable wherever fbgemm_gpu's CUDA build imports and a GPU is present (on a CPU-only
machine it says so and is refused); ``available`` builds a one-row TBE on the device and
runs a training step to be sure the CUDA kernels load.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import torch

from fuzz.sut.protocol import SUT, TBEParams
from fuzz.sut.fbgemm_cpu import CAPABILITIES as CPU_CAPABILITIES
from fuzz.sut.fbgemm_cpu import FbgemmInstance
from oracles.fbgemm_import import import_fbgemm
from cases import ID_KINDS
from tbe.modes import BoundsCheckMode, Optimizer, Pooling

CAPABILITIES = dataclasses.replace(
    CPU_CAPABILITIES, bounds_modes=("warning", "ignore", "none"), devices=("cuda",),
    bad_ids=tuple(k for k in ID_KINDS if k != "minus_one"), bad_offsets=(),
)


class FbgemmCudaInstance(FbgemmInstance):
    device = "cuda"


def probe_params() -> TBEParams:
    """One table of 2 rows x 4, SGD, fp32: the smallest TBE that exercises forward and backward."""
    return TBEParams(((2, 4),), Optimizer.EXACT_SGD, 0.1, 1e-8, torch.float32, torch.float32, Pooling.SUM,
                     BoundsCheckMode.WARNING, initial_weights=(torch.ones(2, 4),))


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> Optional[str]:
    """None when FBGEMM's CUDA TBE trains here, else why not (what a CPU-only machine reports)."""
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    try:
        import_fbgemm()
    except Exception as e:  # noqa: BLE001  (any import failure means the build is absent)
        return f"fbgemm_gpu does not import ({type(e).__name__}: {e})"
    try:
        inst = FbgemmCudaInstance(probe_params())
        out = inst.forward(torch.tensor([0, 1]), torch.tensor([0, 2]))
        inst.backward(torch.ones_like(out))
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001  (e.g. the CPU-only wheel: no CUDA kernels registered)
        return f"fbgemm_gpu has no working CUDA TBE here ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
    return None


def factory() -> SUT:
    return SUT("fbgemm-cuda", CAPABILITIES, FbgemmCudaInstance, unavailable_reason,
               "FBGEMM's SplitTableBatchedEmbeddingBagsCodegen on the GPU (DEVICE / ComputeDevice.CUDA)")
