"""Suite-wide set-up: planted faults allowed, Hypothesis profile loaded, GPU tests skipped on CPU,
and, with TBE_FUZZ_SANITIZE=1 (what ``make test`` sets), the interpreter sanitizer on for every
``fuzz`` test (in process here; supervised workers read the variable themselves)."""

import os

os.environ.setdefault("TBE_FUZZ_ALLOW_FAULTS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import fuzz.profiles  # noqa: E402,F401  (registers and loads the Hypothesis profile)
from fuzz import sanitizer  # noqa: E402
from tbe.backend import INTERPRETED  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available() and not INTERPRETED:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device: compiled Triton kernels (the interpreter runs programs serially)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def sanitized():
    """The interpreter sanitizer on for this test (in this process)."""
    if not INTERPRETED:
        pytest.skip("the sanitizer checks the Triton interpreter; kernels here are compiled")
    with sanitizer.sanitized():
        yield


@pytest.fixture(autouse=True)
def _sanitize_fuzz_tests(request):
    mode = sanitizer.requested()
    if mode is None or not INTERPRETED or "fuzz" not in request.keywords:
        yield
        return
    with sanitizer.sanitized(tables=mode == "all"):
        yield
