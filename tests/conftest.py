"""Suite-wide set-up: xdist workers pinned to GPUs, planted faults allowed, Hypothesis profile loaded, GPU tests skipped on CPU."""

import os

os.environ.setdefault("TBE_FUZZ_ALLOW_FAULTS", "1")

from fuzz.gpu_pin import pin_xdist_worker  # noqa: E402

pin_xdist_worker()  # before torch starts CUDA: `pytest -n N` puts one xdist worker on each GPU

import pytest  # noqa: E402
import torch  # noqa: E402

import fuzz.profiles  # noqa: E402,F401  (registers and loads the Hypothesis profile)
from tbe.backend import INTERPRETED  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available() and not INTERPRETED:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device: compiled Triton kernels (the interpreter runs programs serially)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
