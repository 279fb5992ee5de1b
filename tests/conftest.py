"""Suite-wide set-up: xdist workers pinned to GPUs and building each kernel once per machine, planted faults
allowed, Hypothesis profile loaded, Hypothesis tests marked ``property``, GPU tests skipped on CPU, a ``fuzz``
test that ran too few valid examples failed (``tests.min_examples``) and, with TBE_FUZZ_SANITIZE=1 (what
``make test`` sets), the interpreter sanitizer on for every ``fuzz`` test (in process here; supervised workers
read the variable themselves)."""

import os

from fuzz.execution import core_share, pin_xdist_worker  # noqa: E402

pin_xdist_worker()  # before torch starts CUDA: `pytest -n N` puts one xdist worker on each GPU

from tbe.env import ALLOW_FAULTS  # noqa: E402  (tbe imports torch: after the pin)

ALLOW_FAULTS.setdefault("1")

# xdist workers share the cores: torch's default of one intra-op thread per core in each worker (and in
# each supervised worker it starts) oversubscribes them, and the FP64 references' small ops slow down
# many times over (fuzz/cli/run.py's _one_thread_on_cpu measured 95 ms against 1 ms for one index_add_)
if os.environ.get("PYTEST_XDIST_WORKER") and "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = core_share(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))

from fuzz.compile import kernel_cache  # noqa: E402

kernel_cache.install()  # xdist workers (and the compile children they start) build each kernel once

import pytest  # noqa: E402
import torch  # noqa: E402

from fuzz import profiles  # noqa: E402
from fuzz.memcheck import sanitizer  # noqa: E402
from tbe.backend import INTERPRETED  # noqa: E402
from tests.min_examples import pytest_runtest_call  # noqa: E402,F401  (the hook, registered with this conftest)

profiles.load()  # the Hypothesis profile $HYPOTHESIS_PROFILE names, before test modules build their settings


def pytest_collection_modifyitems(config, items):
    from hypothesis import is_hypothesis_test

    for item in items:  # `-m property` selects them; under HYPOTHESIS_PROFILE=smoke each draws one example
        if is_hypothesis_test(getattr(item, "obj", None)):
            item.add_marker(pytest.mark.property)
    if torch.cuda.is_available() and not INTERPRETED:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device: compiled Triton kernels (the interpreter runs programs serially)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # a marker, not a keyword: folders' names are keywords too
            item.add_marker(skip)


def pytest_configure(config):
    from fuzz.memcheck.weak_memory import enable_from_env

    enable_from_env()  # TBE_WEAK_MEMORY=1 runs the whole session in the weak-memory mode


@pytest.fixture
def weak_memory():
    """The weak-memory interpreter mode for one test (``fuzz.memcheck.weak_memory``), seed 0."""
    from fuzz.memcheck import weak_memory as wm

    if not INTERPRETED:
        pytest.skip("the weak-memory mode runs in Triton's interpreter only")
    if wm.active() is not None:  # already on for the session
        yield wm.active()
        return
    with wm.weak_memory(seed=0) as mem:
        yield mem


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
    # the marker, not the keyword: every test under tests/fuzz/ has "fuzz" among its keywords (its folder's name)
    if mode is None or not INTERPRETED or request.node.get_closest_marker("fuzz") is None:
        yield
        return
    with sanitizer.sanitized(tables=mode == "all"):
        yield


# ----------------------------------------------------------------------------- coverage summary
_WORKER_COVERAGE: list = []  # coverage JSON of each pytest-xdist worker, gathered by the controller


def pytest_sessionfinish(session):
    """An xdist worker hands its coverage (``fuzz.execution.verdict.SESSION``) to the controller."""
    if hasattr(session.config, "workeroutput"):
        import json

        from fuzz.execution.verdict import SESSION

        session.config.workeroutput["tbe_fuzz_coverage"] = json.dumps(SESSION.to_json())


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    import json

    data = getattr(node, "workeroutput", {}).get("tbe_fuzz_coverage")
    if data:
        _WORKER_COVERAGE.append(json.loads(data))


def pytest_terminal_summary(terminalreporter):
    """The coverage matrix of the cases the fuzz tests judged (summed over xdist workers), if any."""
    from fuzz.execution.verdict import SESSION
    from fuzz.judge import coverage

    merged = coverage.merge_json([SESSION.to_json(), *_WORKER_COVERAGE])
    if merged is None:
        return
    terminalreporter.section("tbe-fuzz coverage (kernel path x edge class)")
    for line in coverage.text(merged, limit=10):
        terminalreporter.write_line(line.strip())
