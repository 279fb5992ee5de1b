"""Bounds check: Triton kernels vs FBGEMM's CPU op and the sequential reference; fused vs standalone.

Differences from FBGEMM that are ours by design (id -1, offsets[0] > 0) are pinned by
explicit tests below and left out of the direct FBGEMM comparison.
"""

import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings

from fuzz.profiles import examples
from oracles.checks import check_forward
from oracles import fbgemm_cpu
from oracles.fbgemm_bounds import fbgemm_bounds_check
from oracles.reference_bounds import reference_bounds_check
from cases import BadBatchSpec, BadId, materialize_bad
from strategies.bad_inputs import bad_batch_specs
from tbe import BoundsCheckError, KernelConfig, TritonTBE
from tbe.backend import default_device
from tbe.bounds_check import bounds_check, copy_dtype
import tbe.forward_dispatch as dispatch
from tbe.forward_dispatch import checked_forward
from tbe.modes import BoundsCheckMode, Pooling
from tests.spies import spied

REPAIR_MODES = (BoundsCheckMode.WARNING, BoundsCheckMode.IGNORE)
SMALL_BLOCK = KernelConfig(bounds_check_block=4, dim_buckets=(8, 16, 32))  # several blocks per bag/offsets
DEV = default_device()


needs_fbgemm = pytest.mark.skipif(not fbgemm_cpu.available(), reason="fbgemm_gpu CPU ops did not load "
                                  "(fbgemm-gpu-cpu, in requirements, is the oracle these tests compare with)")


def t(values, dtype=torch.int64):
    return torch.tensor(values, dtype=dtype, device=DEV)


def on_dev(batch):
    """A copy of ``batch`` with its tensors on DEV, where the kernels run (oracles keep the CPU one)."""
    psw = batch.per_sample_weights
    return dataclasses.replace(batch, indices=batch.indices.to(DEV), offsets=batch.offsets.to(DEV),
                               per_sample_weights=None if psw is None else psw.to(DEV))


def run_kernel_check(batch, mode, config=SMALL_BLOCK):
    """(indices, offsets, warnings, error) from the standalone check of ``batch`` (on DEV), inputs unmodified."""
    idx0, off0 = batch.indices.clone(), batch.offsets.clone()
    warn = torch.zeros(1, dtype=torch.int64, device=DEV)
    err = None
    try:
        ri, ro = bounds_check(
            batch.indices, batch.offsets, t(batch.rows), batch.batch_size, mode, warn, config,
        )
    except BoundsCheckError as e:
        ri, ro, err = None, None, e
    assert torch.equal(batch.indices, idx0) and torch.equal(batch.offsets, off0), "caller's tensors modified"
    return ri, ro, int(warn[0]), err


def layout_weights(batch, dtype=torch.float32):
    g = torch.Generator().manual_seed(batch.spec.seed ^ 0x5EED)
    return (torch.rand(batch.layout.total_elements, generator=g, dtype=torch.float64) * 2 - 1).to(dtype)


# ----------------------------------------------------------------------------- oracles agree
@needs_fbgemm
@pytest.mark.fuzz
@settings(max_examples=examples(150))
@given(bad_batch_specs(max_length=6))
def test_reference_reproduces_fbgemm(spec):
    """The reference in FBGEMM-compat mode equals FBGEMM exactly: our reading of its rules is right."""
    batch = materialize_bad(spec)
    for mode in BoundsCheckMode:
        ref = reference_bounds_check(batch.rows, batch.indices, batch.offsets, mode, fbgemm_compat=True)
        fb = fbgemm_bounds_check(batch.rows, batch.indices, batch.offsets, mode, batch.per_sample_weights)
        if mode == BoundsCheckMode.FATAL:
            assert fb.fatal == ref.fatal, f"{mode}: fbgemm fatal={fb.fatal} ({fb.message}), reference {ref.fatal}\n{spec.to_json()}"
            continue
        assert fb.indices.tolist() == ref.indices.tolist(), f"{mode} indices\n{spec.to_json()}"
        assert fb.offsets.tolist() == ref.offsets.tolist(), f"{mode} offsets\n{spec.to_json()}"
        assert fb.warnings == ref.warnings, f"{mode} warnings fbgemm {fb.warnings} ref {ref.warnings}\n{spec.to_json()}"
        if batch.per_sample_weights is not None:  # FBGEMM's v1 check never touches the weights
            assert torch.equal(fb.per_sample_weights, batch.per_sample_weights)


# ----------------------------------------------------------------------------- kernels vs oracles
@needs_fbgemm
@pytest.mark.fuzz
@settings(max_examples=examples(40))
@given(bad_batch_specs(fbgemm_comparable=True))
def test_kernel_matches_fbgemm(spec):
    """Where the semantics coincide, the Triton check repairs, counts and rejects exactly as FBGEMM."""
    batch = materialize_bad(spec)
    for mode in (BoundsCheckMode.WARNING, BoundsCheckMode.IGNORE, BoundsCheckMode.FATAL):
        ri, ro, warn, err = run_kernel_check(on_dev(batch), mode)
        fb = fbgemm_bounds_check(batch.rows, batch.indices, batch.offsets, mode, batch.per_sample_weights)
        if mode == BoundsCheckMode.FATAL:
            assert (err is not None) == fb.fatal, f"ours raised {err!r}, fbgemm fatal={fb.fatal}\n{spec.to_json()}"
            continue
        assert ri.dtype == batch.indices.dtype and ro.dtype == batch.offsets.dtype
        assert ri.tolist() == fb.indices.tolist(), f"{mode} indices {ri.tolist()} vs {fb.indices.tolist()}\n{spec.to_json()}"
        assert ro.tolist() == fb.offsets.tolist(), f"{mode} offsets {ro.tolist()} vs {fb.offsets.tolist()}\n{spec.to_json()}"
        assert warn == fb.warnings, f"{mode} warnings {warn} vs fbgemm {fb.warnings}\n{spec.to_json()}"


@pytest.mark.fuzz
@settings(max_examples=examples(40))
@given(bad_batch_specs())
def test_kernel_matches_reference(spec):
    """All bad inputs, divergent ones included: the kernels equal the sequential reference of our rules."""
    batch = materialize_bad(spec)
    dbatch = on_dev(batch)
    for mode in (BoundsCheckMode.WARNING, BoundsCheckMode.IGNORE, BoundsCheckMode.FATAL):
        ref = reference_bounds_check(batch.rows, batch.indices, batch.offsets, mode)
        ri, ro, warn, err = run_kernel_check(dbatch, mode)
        if mode == BoundsCheckMode.FATAL:
            assert (err is not None) == ref.fatal, f"raised {err!r}, reference fatal={ref.fatal}\n{spec.to_json()}"
            if err is not None:
                assert (err.kind, err.position) == ref.first_bad, f"{err} vs {ref.first_bad}\n{spec.to_json()}"
            else:  # a valid batch comes back as it is
                assert ri is dbatch.indices and ro is dbatch.offsets
            continue
        assert ri.tolist() == ref.indices.tolist(), f"{mode} indices\n{spec.to_json()}"
        assert ro.tolist() == ref.offsets.tolist(), f"{mode} offsets\n{spec.to_json()}"
        assert warn == ref.warnings, f"{mode} warnings {warn} vs reference {ref.warnings}\n{spec.to_json()}"


def fused_and_standalone(batch, mode, pooling, config=SMALL_BLOCK, weights=None):
    """Run checked_forward both ways on DEV; return the CPU weights and the two (out, indices, offsets,
    warnings, error) results, moved to the CPU."""
    layout = batch.layout
    weights = layout_weights(batch) if weights is None else weights
    lt = layout.device_tensors(DEV)
    dbatch, dweights = on_dev(batch), weights.to(DEV)
    results = []
    for fused in (False, True):
        cfg = config.replace(fused_bounds_check=fused)
        idx0, off0 = dbatch.indices.clone(), dbatch.offsets.clone()
        warn = torch.zeros(1, dtype=torch.int64, device=DEV)
        try:
            out, ri, ro = checked_forward(
                dweights, lt, layout.dims, layout.rows, dbatch.indices, dbatch.offsets, dbatch.per_sample_weights,
                batch.batch_size, pooling, torch.float32, cfg, mode, warn,
            )
            results.append((out.cpu(), ri.cpu(), ro.cpu(), int(warn[0]), None))
        except BoundsCheckError as e:
            results.append((None, None, None, int(warn[0]), e))
        assert torch.equal(dbatch.indices, idx0) and torch.equal(dbatch.offsets, off0), "caller's tensors modified"
    return weights, results


@pytest.mark.fuzz
@settings(max_examples=examples(30))
@given(bad_batch_specs(), )
def test_fused_equals_standalone(spec):
    """Fused and standalone checks: identical repaired inputs, counts, errors and outputs (bit for bit)."""
    batch = materialize_bad(spec)
    for mode, pooling in ((BoundsCheckMode.WARNING, Pooling.SUM), (BoundsCheckMode.IGNORE, Pooling.MEAN),
                          (BoundsCheckMode.FATAL, Pooling.SUM)):
        weights, ((o1, i1, f1, w1, e1), (o2, i2, f2, w2, e2)) = fused_and_standalone(batch, mode, pooling)
        where = f"{mode} {pooling}\n{spec.to_json()}"
        assert (e1 is None) == (e2 is None), f"standalone raised {e1!r}, fused {e2!r}; {where}"
        if e1 is not None:
            assert (e1.kind, e1.position, e1.table, e1.bag) == (e2.kind, e2.position, e2.table, e2.bag), where
            continue
        assert torch.equal(i1, i2) and torch.equal(f1, f2), f"repaired inputs differ; {where}"
        assert w1 == w2, f"warnings standalone {w1} fused {w2}; {where}"
        assert torch.equal(o1, o2), f"outputs differ, max {float((o1 - o2).abs().max())}; {where}"
        report = check_forward(batch.layout, weights, i1, f1, batch.per_sample_weights, batch.batch_size, pooling, o1)
        assert report.ok, f"{report}; {where}"


# ----------------------------------------------------------------------------- documented differences
@needs_fbgemm
def test_divergence_minus_one_id():
    """FBGEMM skips id -1 (a pruned row); we repair it to 0, count it, and FATAL rejects it."""
    idx, off = torch.tensor([2, -1, 1]), torch.tensor([0, 2, 3])
    fb = fbgemm_bounds_check([4], idx, off, BoundsCheckMode.WARNING)
    assert fb.indices.tolist() == [2, -1, 1] and fb.warnings == 0
    assert not fbgemm_bounds_check([4], idx, off, BoundsCheckMode.FATAL).fatal
    batch = materialize_bad(BadBatchSpec(((4, 2),), 2))
    batch.indices, batch.offsets = idx.to(DEV), off.to(DEV)
    ri, ro, warn, _ = run_kernel_check(batch, BoundsCheckMode.WARNING)
    assert ri.tolist() == [2, 0, 1] and warn == 1
    _, _, _, err = run_kernel_check(batch, BoundsCheckMode.FATAL)
    assert err is not None and err.kind == "id" and err.position == 1 and err.value == -1


@needs_fbgemm
def test_divergence_positive_first_offset():
    """FBGEMM keeps offsets[0] > 0 (ids before it are in no bag, unchecked); we repair it to 0."""
    idx, off = torch.tensor([9, 1, 2, 3]), torch.tensor([1, 3, 4])  # id 9 is out of range, before bag 0
    fb = fbgemm_bounds_check([4], idx, off, BoundsCheckMode.WARNING)
    assert fb.offsets.tolist() == [1, 3, 4] and fb.indices.tolist() == [9, 1, 2, 3] and fb.warnings == 0
    assert not fbgemm_bounds_check([4], idx, off, BoundsCheckMode.FATAL).fatal
    batch = materialize_bad(BadBatchSpec(((4, 2),), 2))
    batch.indices, batch.offsets = idx.to(DEV), off.to(DEV)
    ri, ro, warn, _ = run_kernel_check(batch, BoundsCheckMode.WARNING)
    assert ro.tolist() == [0, 3, 4] and ri.tolist() == [0, 1, 2, 3] and warn == 2  # bag 0 + id 9
    _, _, _, err = run_kernel_check(batch, BoundsCheckMode.FATAL)
    assert err is not None and err.kind == "offsets" and err.position == 0


@needs_fbgemm
def test_fbgemm_counter_is_per_call():
    """FBGEMM zeroes its counter every WARNING call; the module's counter accumulates."""
    warn = torch.tensor([5], dtype=torch.int64)
    torch.ops.fbgemm.bounds_check_indices(torch.tensor([4]), torch.tensor([7]), torch.tensor([0, 1]), 1, warn, None)
    assert int(warn[0]) == 1
    m = TritonTBE([(4, 3)], bounds_check="warning", config=SMALL_BLOCK)
    with torch.no_grad():
        for _ in range(2):
            m(t([7, 1]), t([0, 2]))
    assert int(m.bounds_check_warnings[0]) == 2


# ----------------------------------------------------------------------------- modes, messages, module
def test_fatal_names_table_bag_and_id():
    rows = t([3, 5])
    idx = t([0, 1, 2, 4, 4, 5, 0])  # B = 2: bags (0,0)=[0,1] (0,1)=[2] (1,0)=[4,4,5] (1,1)=[0]
    off = t([0, 2, 3, 6, 7])
    with pytest.raises(BoundsCheckError) as ei:
        bounds_check(idx, off, rows, 2, BoundsCheckMode.FATAL)
    e = ei.value
    assert isinstance(e, ValueError)
    assert (e.kind, e.position, e.value, e.table, e.sample, e.bag) == ("id", 5, 5, 1, 0, 2)
    assert "indices[5] = 5" in str(e) and "table 1" in str(e) and "sample 0" in str(e)
    with pytest.raises(BoundsCheckError, match=r"offsets\[2\] = 1") as ei:
        bounds_check(idx, t([0, 2, 1, 6, 7]), rows, 2, BoundsCheckMode.FATAL)
    assert ei.value.kind == "offsets" and ei.value.table == 0 and ei.value.sample == 1
    with pytest.raises(BoundsCheckError, match=r"offsets\[4\] = 6 must equal len\(indices\) = 7"):
        bounds_check(idx, t([0, 2, 3, 6, 6]), rows, 2, BoundsCheckMode.FATAL)


@pytest.mark.parametrize("fused", [False, True])
def test_module_fatal_raises_and_valid_input_passes(fused):
    m = TritonTBE([(4, 3), (6, 5)], bounds_check="fatal", config=SMALL_BLOCK.replace(fused_bounds_check=fused))
    with torch.no_grad():
        out = m(t([0, 3, 5, 1], torch.int32), t([0, 2, 2, 3, 4], torch.int32))
        assert out.shape == (2, 8)
        with pytest.raises(BoundsCheckError, match="table 1"):
            m(t([0, 3, 6, 1]), t([0, 2, 2, 3, 4]))
        with pytest.raises(BoundsCheckError, match="offsets"):
            m(t([0, 3, 5, 1]), t([0, 2, 1, 3, 4]))
    assert int(m.bounds_check_warnings[0]) == 0


@pytest.mark.parametrize("fused", [False, True])
def test_module_warning_and_ignore(fused):
    cfg = SMALL_BLOCK.replace(fused_bounds_check=fused)
    idx, off = t([0, 4, -3, 1]), t([0, 2, 2, 3, 5])
    outs = []
    for mode in ("warning", "ignore"):
        m = TritonTBE([(4, 3), (6, 5)], bounds_check=mode, config=cfg)
        with torch.no_grad():
            outs.append(m(idx, off))
        # ids 4 (table 0) and -3 (table 1), and the last offset (5 != len 4)
        assert int(m.bounds_check_warnings[0]) == (3 if mode == "warning" else 0)
    assert torch.equal(outs[0], outs[1])
    assert idx.tolist() == [0, 4, -3, 1] and off.tolist() == [0, 2, 2, 3, 5]


def test_none_mode_checks_nothing():
    idx, off = t([0, 9]), t([0, 1, 2])
    warn = torch.zeros(1, dtype=torch.int64, device=DEV)
    ri, ro = bounds_check(idx, off, t([4]), 2, BoundsCheckMode.NONE, warn)
    assert ri is idx and ro is off and int(warn[0]) == 0


def test_bad_warning_counter_is_named():
    with pytest.raises(ValueError, match="warning_count"):
        bounds_check(t([0]), t([0, 1]), t([4]), 1, BoundsCheckMode.WARNING,
                     torch.zeros(1, dtype=torch.int32, device=DEV))


def _extremes(dtype):
    """int32/int64 extremes in ids, offsets decreasing and past the end, checked in blocks of 2."""
    info = torch.iinfo(dtype)
    idx = torch.tensor([info.max, 0, info.min, 3, 4, 2, 5, 1, 0, 3], dtype=dtype)
    off = torch.tensor([0, 1, 3, 2, 12, 6, 7, 7, 9, 10], dtype=dtype)  # decreasing, past the end
    batch = materialize_bad(BadBatchSpec(((4, 2), (6, 3), (5, 1)), 3))
    batch.indices, batch.offsets = idx.to(DEV), off.to(DEV)
    ri, ro, warn, _ = run_kernel_check(batch, BoundsCheckMode.WARNING, KernelConfig(bounds_check_block=2))
    return batch.rows, idx, off, (ri.tolist(), ro.tolist(), warn)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_dtype_extremes_and_many_blocks(dtype):
    """The kernel's repair of extreme ids and offsets, walked in several blocks, is exactly the reference's."""
    rows, idx, off, ours = _extremes(dtype)
    ref = reference_bounds_check(rows, idx, off, BoundsCheckMode.WARNING)
    assert ours == (ref.indices.tolist(), ref.offsets.tolist(), ref.warnings)


@needs_fbgemm
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_dtype_extremes_match_fbgemm(dtype):
    """FBGEMM repairs the same extremes the same way."""
    rows, idx, off, ours = _extremes(dtype)
    fb = fbgemm_bounds_check(rows, idx, off, BoundsCheckMode.WARNING)
    assert ours == (fb.indices.tolist(), fb.offsets.tolist(), fb.warnings)


# ----------------------------------------------------------------------------- planted fault
def _mean_after_repair(spec, config):
    batch = materialize_bad(spec)
    weights, ((o1, i1, f1, *_), (o2, *_)) = fused_and_standalone(batch, BoundsCheckMode.WARNING, Pooling.MEAN, config)
    for out in (o1, o2):
        report = check_forward(batch.layout, weights, i1, f1, batch.per_sample_weights, batch.batch_size,
                               Pooling.MEAN, out)
        assert report.ok, f"{report}\n{spec.to_json()}"


def test_fault_mean_wrong_length_is_caught():
    """The planted fault (MEAN divides by the unrepaired bag length) fails the MEAN differential check."""
    fault_cfg = SMALL_BLOCK.replace(faults=("fwd_mean_wrong_length",))

    @settings(max_examples=60, phases=[Phase.generate], database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), deadline=None)
    @given(bad_batch_specs(allow_empty_batch=False))
    def run(spec):
        _mean_after_repair(spec, fault_cfg)

    with pytest.raises(AssertionError, match="forward vs fp64"):
        run()
    # and the same check passes without the fault on a batch the fault breaks
    spec = BadBatchSpec(((5, 3),), 2, max_length=3, bad_offsets=("decreasing", "last_long"), seed=3)
    _mean_after_repair(spec, SMALL_BLOCK)
    with pytest.raises(AssertionError):
        _mean_after_repair(spec, fault_cfg)


@pytest.mark.parametrize("entries", [9, 64, 200], ids=["one block of maxima", "folded, four blocks", "scanned"])
def test_offsets_repair_takes_the_carry_both_ways(entries):
    """Blocks of 4: up to FOLD_BLOCKS x 4 blocks each repair program takes its carry from the block maxima itself,
    past that a scan launch makes it; either way the repair equals the sequential reference's prefix maximum."""
    from tbe.bounds_check import FOLD_BLOCKS, new_state, repair_offsets

    g = torch.Generator().manual_seed(entries)
    n = 3 * entries
    off = torch.randint(-5, n + 6, (entries,), generator=g)  # out of order, negative, past the end
    idx = torch.zeros(n, dtype=torch.int64)
    blocks = -(-entries // 4)
    assert (blocks <= FOLD_BLOCKS * 4) == (entries <= 64)
    ref = reference_bounds_check([1], idx, off, BoundsCheckMode.WARNING)
    idx, off = idx.to(DEV), off.to(DEV)
    fixed = repair_offsets(idx, off, new_state(BoundsCheckMode.WARNING, idx, off, None), KernelConfig(bounds_check_block=4))
    assert fixed.cpu().tolist() == ref.offsets.tolist()


@pytest.mark.parametrize("entries", [3, 9, 64, 200], ids=["one block", "one block of maxima", "folded", "scanned"])
@pytest.mark.parametrize("mode", [BoundsCheckMode.WARNING, BoundsCheckMode.IGNORE, BoundsCheckMode.FATAL])
def test_one_table_check_takes_the_block_maxima_with_the_ids(entries, mode, monkeypatch):
    """On one table the id check's launch also takes the offsets' block maxima (no launch of their own), and the
    repaired ids, offsets, count and first offender are still the sequential reference's in every carry regime."""
    import tbe.bounds_check as bc

    class NoLaunch:
        def __getitem__(self, grid):
            raise AssertionError("a one-table check launched the block maxima on their own")
    monkeypatch.setattr(bc, "_offsets_block_max_kernel", NoLaunch())
    g = torch.Generator().manual_seed(entries)
    n, rows = 3 * entries, 7
    off = torch.randint(-5, n + 6, (entries,), generator=g)
    idx = torch.randint(-2, rows + 2, (n,), generator=g)
    ref = reference_bounds_check([rows], idx, off, mode)
    cfg = KernelConfig(bounds_check_block=4)
    warn = torch.zeros(1, dtype=torch.int64, device=DEV)
    try:
        ri, ro = bc.bounds_check(idx.to(DEV), off.to(DEV), torch.tensor([rows], device=DEV), entries - 1, mode, warn,
                                 cfg)
    except BoundsCheckError as err:
        assert mode == BoundsCheckMode.FATAL and ref.fatal and (err.kind, err.position) == ref.first_bad
        return
    assert not (mode == BoundsCheckMode.FATAL and ref.fatal), "FATAL let a bad batch through"
    if mode != BoundsCheckMode.FATAL:
        assert (ri.cpu().tolist(), ro.cpu().tolist(), int(warn[0])) == (
            ref.indices.tolist(), ref.offsets.tolist(), ref.warnings if mode == BoundsCheckMode.WARNING else 0)


@pytest.mark.parametrize("block", [1, 4, 8])
@pytest.mark.parametrize("sizes", [None, (2, 0, 3, 0, 0, 1, 2)], ids=["fixed batch", "VBE, empty features"])
def test_id_check_finds_each_ids_feature(block, sizes):
    """The id check finds each id's feature from its position alone (blocks of ids straddle features, features
    with no bag or only empty bags sit between): every id is its own table's row count or one below it, and
    neighbouring tables differ in rows, so an id judged against a neighbour's table is repaired or kept wrongly."""
    from tbe.layout import VariableBatch
    from tbe.vbe import vbe_tensors

    rows = [4, 7, 1, 10, 2, 5, 3]
    bags = [2] * len(rows) if sizes is None else list(sizes)
    lengths = [3, 0, 2, 1, 0, 0, 4, 2, 1, 0, 3, 2, 1, 1, 5, 2]
    off, ids, k = [0], [], 0
    for f, nb in enumerate(bags):
        for _ in range(nb):
            n = lengths[k % len(lengths)]
            ids += [rows[f] - (k + j) % 2 for j in range(n)]  # E_f (bad) and E_f - 1 (good) in turn
            off.append(off[-1] + n)
            k += 1
    idx, offsets = t(ids), t(off)
    vbe = None if sizes is None else vbe_tensors(VariableBatch(sizes, (8,) * len(rows)), DEV)
    ref = reference_bounds_check(rows, idx.cpu(), offsets.cpu(), BoundsCheckMode.WARNING, batch_size_per_feature=sizes)
    warn = torch.zeros(1, dtype=torch.int64, device=DEV)
    ri, ro = bounds_check(idx, offsets, t(rows), max(bags), BoundsCheckMode.WARNING, warn,
                          KernelConfig(bounds_check_block=block), vbe)
    assert ri.tolist() == ref.indices.tolist() and ro.tolist() == ref.offsets.tolist()
    assert int(warn[0]) == ref.warnings > 0


# ----------------------------------------------------------------------------- int32 copies
def test_copy_dtype_narrows_only_where_every_value_fits():
    ids = t([0, 1])
    assert copy_dtype(ids, 6) == torch.int32
    assert copy_dtype(ids, None) == torch.int64           # the caller did not say how large the tables are
    assert copy_dtype(ids, 2 ** 31) == torch.int32        # ids up to 2^31 - 1
    assert copy_dtype(ids, 2 ** 31 + 1) == torch.int64    # an id of 2^31 would wrap
    assert copy_dtype(t([0, 1], torch.int32), 6) == torch.int32


@pytest.mark.parametrize("mode", [BoundsCheckMode.WARNING, BoundsCheckMode.IGNORE])
def test_int32_copies_hold_the_same_repairs(mode):
    """int64 extremes repaired into int32 copies: the same values, counts and warnings as int64 copies."""
    info = torch.iinfo(torch.int64)
    idx = t([info.max, 0, info.min, 3, 4, 2, 5, 1, 0, 3])
    off = t([0, 1, 3, 2, 12, 6, 7, 7, 9, 10])
    rows, cfg = t([4, 6, 5]), KernelConfig(bounds_check_block=2)
    results = []
    for max_rows in (None, 6):
        warn = torch.zeros(1, dtype=torch.int64, device=DEV)
        ri, ro = bounds_check(idx, off, rows, 3, mode, warn, cfg, max_rows=max_rows)
        results.append((ri.dtype, ro.dtype, ri.tolist(), ro.tolist(), int(warn[0])))
    (wd, wo, *wide), (nd, no, *narrow) = results
    assert (wd, wo, nd, no) == (torch.int64, torch.int64, torch.int32, torch.int32)
    assert narrow == wide and (mode == BoundsCheckMode.IGNORE or wide[2] > 0)


def test_fatal_returns_the_inputs_whatever_the_tables():
    idx, off = t([0, 3, 1]), t([0, 1, 2, 3])
    ri, ro = bounds_check(idx, off, t([4, 6, 5]), 1, BoundsCheckMode.FATAL, None, SMALL_BLOCK, max_rows=6)
    assert ri is idx and ro is off


@pytest.mark.parametrize("mode", ["warning", "ignore"])
def test_module_int64_batch_steps_as_its_int32_twin(mode):
    """Under a repairing mode the module works on int32 copies: an int64 batch gives the int32 batch's output and
    updates bit for bit (a bad id and a bad offset included)."""
    idx, off = [0, 4, -3, 1, 2, 5, 0], [0, 2, 2, 3, 8]  # id 4 of table 0, id -3 of table 1, the last offset past 7
    runs = []
    for dtype in (torch.int64, torch.int32):
        m = TritonTBE([(4, 3), (6, 5)], optimizer="exact_rowwise_adagrad", bounds_check=mode, config=SMALL_BLOCK,
                      device=DEV)
        out = m(t(idx, dtype), t(off, dtype))
        out.backward(torch.linspace(-1, 1, out.numel(), device=DEV).view(out.shape))
        runs.append((out.detach().cpu(), m.weights.cpu(), m.momentum.cpu(), int(m.bounds_check_warnings[0])))
    (o1, w1, m1, c1), (o2, w2, m2, c2) = runs
    assert torch.equal(o1, o2) and torch.equal(w1, w2) and torch.equal(m1, m2) and c1 == c2
    assert mode == "ignore" or c1 > 0


def test_module_copies_narrow_only_off_the_small_table_path():
    """An int64 batch under WARNING: the generic forward reads int32 copies, the small-table kernels (slower on int32
    ids) int64 ones, and so does a weighted batch of a small table, which the generic forward takes; the outputs
    repair the bad id alike."""
    seen = []

    def note(name):
        return lambda args: seen.append((name, args[3].dtype, args[4].dtype))  # (weights, ..., indices, offsets, ...)

    cfg = KernelConfig(small_table_min_pooling=2)
    idx, off = t([0, 15, 16, 3, 1, 2, 2, 7]), t([0, 4, 8])  # id 16 is past the table's 16 rows
    outs = []
    with spied([(dispatch, "forward_small_table", note("small_table")),
                (dispatch, "forward_generic", note("generic"))]):
        for weights in ("fp16", "fp32"):  # fp32 weights leave the small-table path
            m = TritonTBE([(16, 64)], weights_dtype=weights, output_dtype="fp32", bounds_check="warning", config=cfg,
                          device=DEV)
            with torch.no_grad():
                m.weights.copy_(torch.linspace(-1, 1, m.weights.numel(), device=DEV).to(m.weights.dtype))
            outs.append(m(idx, off).cpu())
        outs.append(m(idx, off, torch.ones(idx.numel(), device=DEV)).cpu())  # the fp32 module: generic again
        small = TritonTBE([(16, 64)], weights_dtype="fp16", output_dtype="fp32", bounds_check="warning", config=cfg,
                          device=DEV)
        small(idx, off, torch.ones(idx.numel(), device=DEV))  # weighted: the generic forward, the copies stay int64
    assert seen == [("small_table", torch.int64, torch.int64), ("generic", torch.int32, torch.int32),
                    ("generic", torch.int32, torch.int32), ("generic", torch.int64, torch.int64)]
    assert torch.allclose(outs[0], outs[1], atol=1e-2) and torch.equal(outs[1], outs[2])
