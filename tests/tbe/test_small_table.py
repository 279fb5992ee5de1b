"""Small-table histogram + tl.dot path: eligibility edges, path taken, and output vs generic and FP64."""

import contextlib

import pytest
import torch
from hypothesis import event, given, settings

import tbe.forward_dispatch as dispatch
from fuzz.profiles import examples
from oracles.checks import check_forward, forward_expectation
from oracles.compare import compare
from strategies.small_table import (
    SmallTableSpec, expected_small_table, materialize_small, small_table_specs,
)
from tbe import BoundsCheckError, KernelConfig, TritonTBE
from tbe.backend import default_device
from tbe.forward_small_table import eligible, ineligible_reason
from tbe.modes import BoundsCheckMode, Pooling
from tests.spies import spied

CFG = KernelConfig()
DEV = default_device()


@contextlib.contextmanager
def paths_taken():
    """The forward kernels the calls inside ran, in order: dispatch's two paths wrapped to record their names."""
    seen: list[str] = []
    with spied([(dispatch, "forward_small_table", lambda args: seen.append("small_table")),
                (dispatch, "forward_generic", lambda args: seen.append("generic"))]):
        yield seen


def run(batch, config=CFG, mode=BoundsCheckMode.WARNING, warn=None):
    """The forward of ``batch`` (CPU tensors) on DEV: (out, indices, offsets) back on the CPU, and the path."""
    spec = batch.spec
    layout = spec.layout
    lt = layout.device_tensors(DEV)
    psw = batch.per_sample_weights
    with paths_taken() as seen:
        out, ri, ro = dispatch.checked_forward(
            batch.weights.to(DEV), lt, layout.dims, layout.rows, batch.indices.to(DEV), batch.offsets.to(DEV),
            None if psw is None else psw.to(DEV),
            spec.batch_size, spec.pooling, spec.output_dtype.torch, config,
            mode, warn,
        )
    return out.cpu(), ri.cpu(), ro.cpu(), seen[-1] if seen else None


# ----------------------------------------------------------------------------- eligibility
def _reason(E=64, D=64, n=64 * 4, B=4, wd=torch.float16, od=torch.float32, weighted=False, T=1, cfg=CFG):
    dims, rows = [D] * T, [E] * T
    return ineligible_reason(dims, rows, n, B, wd, od, weighted, cfg)


@pytest.mark.parametrize("E,ok", [(1, True), (64, True), (65, False)])
def test_edge_rows(E, ok):
    assert (_reason(E=E) is None) == ok
    if not ok:
        assert "E=65" in _reason(E=E)


@pytest.mark.parametrize("D,ok", [(63, False), (64, True), (128, True), (129, False)])
def test_edge_dim(D, ok):
    assert (_reason(D=D) is None) == ok
    if not ok:
        assert f"D={D}" in _reason(D=D)


@pytest.mark.parametrize("L,ok", [(63, False), (64, True), (256, True), (257, True)])
def test_edge_mean_length(L, ok):
    assert (_reason(n=L * 4) is None) == ok


def test_edge_other_conditions():
    assert "fp16" in _reason(wd=torch.float32)
    assert "fp32" in _reason(od=torch.float16)
    assert "per-sample" in _reason(weighted=True)
    assert "2 tables" in _reason(T=2)
    assert "empty" in _reason(B=0, n=0)
    assert "small_table_path" in _reason(cfg=KernelConfig(small_table_path=False))
    assert _reason(E=100, cfg=KernelConfig(small_table_max_rows=128)) is None
    assert not eligible([64], [64], 63, 1, torch.float16, torch.float32, False, CFG)


# ----------------------------------------------------------------------------- the path, differentially
def assert_small_table_correct(spec: SmallTableSpec):
    batch = materialize_small(spec)
    out, ri, ro, path = run(batch)
    want = "small_table" if expected_small_table(spec, batch.indices.numel()) else "generic"
    assert path == want, f"took {path}, expected {want}\n{spec.to_json()}"
    event(f"path={path}")
    pooling = spec.pooling
    expected, bound = forward_expectation(
        spec.layout, batch.weights, ri, ro, batch.per_sample_weights, spec.batch_size, pooling, out.dtype,
    )
    report = compare(f"{path} vs fp64", expected, out, bound, spec.layout)
    assert report.ok, f"{report}\n{spec.to_json()}"
    if path == "small_table":
        generic, _, _, gpath = run(batch, CFG.replace(small_table_path=False))
        assert gpath == "generic"
        # both within the bound of the exact value, so within twice the bound of each other
        report = compare("small_table vs generic", generic, out, 2 * bound, spec.layout)
        assert report.ok, f"{report}\n{spec.to_json()}"


@pytest.mark.fuzz
@settings(max_examples=examples(30))
@given(small_table_specs())
def test_small_table_edges_fuzz(spec):
    assert_small_table_correct(spec)


@pytest.mark.parametrize("B", [1, 16, 17])
def test_uneven_bags_in_one_launch(B):
    """Bags of 0, 1, 255, 256, 257 and 600 ids in one launch (a program steps to its longest bag, the shorter ones
    masked); B=17 leaves the second program partial."""
    g = torch.Generator().manual_seed(B)
    lengths = torch.tensor([0, 1, 255, 256, 257, 600, 64, 300][:B] + [70] * max(0, B - 8))
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    ids = torch.randint(0, 50, (int(offsets[-1]),), generator=g)
    spec = SmallTableSpec(50, 96, 0, B)
    batch = materialize_small(spec)
    batch.indices, batch.offsets = ids, offsets
    for pooling in ("sum", "mean"):
        batch.spec = SmallTableSpec(50, 96, 0, B, pooling=pooling)
        out, ri, ro, path = run(batch)
        if ids.numel() >= 64 * B:
            assert path == "small_table"
        report = check_forward(batch.spec.layout, batch.weights, ri, ro, None, B, Pooling(pooling), out)
        assert report.ok, str(report)


def test_all_ids_one_row_counts_exact():
    """300 ids of one bag on one row: the count must survive fp16 exactly."""
    spec = SmallTableSpec(64, 64, 300, 3, duplicates=True, seed=1)
    batch = materialize_small(spec)
    batch.indices = torch.full_like(batch.indices, 63)
    out, ri, ro, path = run(batch)
    assert path == "small_table"
    row = batch.weights.view(64, 64)[63].double()
    assert torch.allclose(out.double(), (300 * row).expand(3, 64), rtol=1e-6, atol=0)


@pytest.mark.parametrize("length", [2048, 2051, 4099])
def test_counts_past_the_flush_stay_exact(length):
    """A bag of ``length`` ids on one row: its count reaches the tensor cores in parts of at most 2,048, each exact
    in fp16 (2,051 would round to 2,052, 4,099 to 4,100: the output would be off by a whole row)."""
    spec = SmallTableSpec(4, 64, length, 1, seed=2)
    batch = materialize_small(spec)
    batch.indices = torch.full((length,), 3, dtype=torch.int64)
    batch.offsets = torch.tensor([0, length])
    out, ri, ro, path = run(batch)
    assert path == "small_table"
    row = batch.weights.view(4, 64)[3].double()
    assert torch.allclose(out.double(), (length * row)[None, :], rtol=1e-6, atol=0)


# ----------------------------------------------------------------------------- bounds check on the path
@pytest.mark.parametrize("mode", [BoundsCheckMode.WARNING, BoundsCheckMode.IGNORE, BoundsCheckMode.FATAL])
def test_fused_check_on_small_table_path(mode):
    """The fused check inside the small-table kernel (bad ids in several counting steps) equals the standalone one."""
    spec = SmallTableSpec(40, 64, 270, 18, ragged=True, seed=7, pooling="mean")
    batch = materialize_small(spec)
    n = batch.indices.numel()
    batch.indices[[0, 5, n - 1, 280, 300]] = torch.tensor([40, -1, 2**40, -7, 41])  # early and late steps
    batch.offsets = batch.offsets.clone()
    batch.offsets[-1] = n + 3  # last offset past the end
    results = []
    for fused in (False, True):
        warn = torch.zeros(1, dtype=torch.int64, device=DEV)
        try:
            out, ri, ro, path = run(batch, CFG.replace(fused_bounds_check=fused), mode, warn)
            assert path == "small_table"
            results.append((out, ri, ro, int(warn[0]), None))
        except BoundsCheckError as e:
            results.append((None, None, None, None, (e.kind, e.position)))
    (o1, i1, f1, w1, e1), (o2, i2, f2, w2, e2) = results
    assert e1 == e2
    if mode == BoundsCheckMode.FATAL:
        assert e1 == ("offsets", spec.batch_size)
        return
    assert torch.equal(i1, i2) and torch.equal(f1, f2) and w1 == w2 and torch.equal(o1, o2)
    assert w1 == (6 if mode == BoundsCheckMode.WARNING else 0)
    report = check_forward(spec.layout, batch.weights, i1, f1, None, spec.batch_size, Pooling.MEAN, o1)
    assert report.ok, str(report)


def test_module_takes_the_path_and_records_it():
    m = TritonTBE([(64, 64)], weights_dtype="fp16", output_dtype="fp32", pooling="sum")
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 64, (2 * 64,), generator=g)
    off = torch.tensor([0, 64, 128])
    with torch.no_grad(), paths_taken() as seen:
        out = m(idx.to(DEV), off.to(DEV))
    assert seen == ["small_table"]
    report = check_forward(m.layout, m.weights.cpu(), idx, off, None, 2, Pooling.SUM, out.cpu())
    assert report.ok, str(report)
    with torch.no_grad(), paths_taken() as seen:
        m(idx.to(DEV), off.to(DEV), torch.ones(128, device=DEV))  # weighted: generic
    assert seen == ["generic"]


def test_fault_mean_wrong_length_caught_on_small_table_path():
    """The planted MEAN-length fault also lives in the small-table kernel and the check catches it."""
    spec = SmallTableSpec(64, 64, 70, 4, pooling="mean", seed=2)
    batch = materialize_small(spec)
    batch.offsets = batch.offsets.clone()
    batch.offsets[2] = batch.offsets[1] - 5  # decreasing: bag 1 is repaired to empty, bag 2 grows
    for cfg, should_pass in ((CFG, True), (CFG.replace(faults=("fwd_mean_wrong_length",)), False)):
        out, ri, ro, path = run(batch, cfg)
        assert path == "small_table"
        report = check_forward(spec.layout, batch.weights, ri, ro, None, spec.batch_size, Pooling.MEAN, out)
        assert report.ok == should_pass, str(report)
