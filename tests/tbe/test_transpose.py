"""The backward's transpose: linearization, stable sort, sync-free run-length encoding."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz.profiles import examples
from tbe import KernelConfig
from tbe.backend import default_device
from tbe.buckets import block_for_dim, device_layout
from tbe.layout import TableLayout, TableSpec
from tbe.transpose import key_dtype_for, linear_dtype_for, transpose
from tests.backward_helpers import build, make_batch, train_step

DEV = default_device()


def transpose_on_dev(layout, idx, off, psw, B, config):
    """transpose() of CPU inputs, run on DEV; its tensors come back on the CPU for the comparisons."""
    tr = transpose(layout, device_layout(layout, config, DEV), idx.to(DEV), off.to(DEV), None if psw is None else psw.to(DEV), B, config)
    moved = {f.name: getattr(tr, f.name) for f in dataclasses.fields(tr)}
    return dataclasses.replace(tr, **{k: v.cpu() for k, v in moved.items() if isinstance(v, torch.Tensor)})


def _run(specs, B, lengths, weighted=False, config=KernelConfig(), seed=0, idx_dtype=torch.int64):
    layout = TableLayout(tuple(TableSpec(e, d) for e, d in specs))
    idx, off, psw = make_batch(specs, B, lengths, idx_dtype, seed, weighted, hot=[1] * len(specs))
    return layout, idx, off, psw, transpose_on_dev(layout, idx, off, psw, B, config)


@pytest.mark.fuzz
@settings(max_examples=examples(60))
@given(st.integers(1, 3), st.integers(1, 5), st.data())
def test_runs_match_host_encoding(T, B, data):
    specs = [(data.draw(st.integers(1, 9)), data.draw(st.sampled_from([2, 8, 40]))) for _ in range(T)]
    lengths = [data.draw(st.integers(0, 7)) for _ in range(T * B)]
    layout, idx, off, psw, tr = _run(specs, B, lengths, weighted=True, seed=data.draw(st.integers(0, 99)),
                                     idx_dtype=data.draw(st.sampled_from([torch.int32, torch.int64])))
    _check_against_host(layout, idx, psw, tr, B, lengths)


def _check_against_host(layout, idx, psw, tr, B, lengths, config=KernelConfig()):
    """Every field of ``tr`` against the same encoding done on the host in plain torch: lookups sorted stably by
    (dimension bucket of their table, linear index), so that each bucket's runs are contiguous."""
    n = idx.numel()
    bag = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    table = bag // B
    lin = torch.tensor(layout.hash_size_cumsum)[table] + idx.long()
    blocks = sorted({block_for_dim(d, config) for d in layout.dims})
    bucket_of = torch.tensor([blocks.index(block_for_dim(d, config)) for d in layout.dims])
    assert torch.equal(tr.bag_of.long(), bag)
    # stable: ties keep their original order
    order = sorted(range(n), key=lambda i: (int(bucket_of[table[i]]), int(lin[i]), i))
    assert tr.perm.tolist() == order
    assert torch.equal(tr.sorted_bag.long(), bag[order])
    assert psw is None or torch.equal(tr.sorted_psw, psw[order])
    lin_sorted, counts = torch.unique_consecutive(lin[order], return_counts=True)
    r = int(tr.num_runs[0])
    assert r == lin_sorted.numel()
    assert torch.equal(tr.run_linear[:r].long(), lin_sorted) and torch.equal(tr.run_length[:r], counts)
    import tbe.transpose as tp

    assert tr.run_start.dtype == (torch.int32 if n < tp.INT32_MAX else torch.int64)
    assert torch.equal(tr.run_start[:r + 1].long(),
                       torch.cumsum(torch.cat([torch.zeros(1, dtype=torch.int64), counts]), 0))
    table_of_run = torch.searchsorted(torch.tensor(layout.hash_size_cumsum), lin_sorted, right=True) - 1
    assert tr.run_table.dtype == torch.int32 and torch.equal(tr.run_table[:r].long(), table_of_run)
    if len(set(bucket_of.tolist())) == 1:
        assert tr.run_bucket is None  # one bucket: every run is in it, nothing to write or read
    else:
        assert torch.equal(tr.run_bucket[:r], bucket_of[table_of_run].to(torch.int32))
    # the keys sort as the pairs do: one key per (table, row), in bucket order
    keys = tr.key.long()
    assert torch.equal(torch.argsort(keys, stable=True), torch.tensor(order, dtype=torch.int64))
    assert torch.unique(keys).numel() == r


@pytest.mark.fuzz
@settings(max_examples=examples(25), deadline=None)
@given(st.sampled_from([4, 16, 64]), st.integers(1, 2), st.booleans(), st.data())
def test_runs_and_bags_across_blocks(block, T, wide_starts, data):
    """Small blocks (the kernels' block sizes patched down) so that runs, bags and empty stretches cross block
    edges: the narrowed bag search, the per-block run counts and their scan must join up exactly. With
    ``wide_starts`` the int32 limit is patched down too, so the run starts take their int64 form."""
    import tbe.transpose as tp

    B = data.draw(st.integers(1, 40))
    specs = [(data.draw(st.integers(1, 6)), 1) for _ in range(T)]
    lengths = data.draw(st.lists(st.one_of(st.just(0), st.integers(0, 3 * block)), min_size=T * B, max_size=T * B))
    saved = tp.LINEARIZE_BLOCK, tp.RUN_BLOCK, tp.INT32_MAX
    tp.LINEARIZE_BLOCK = tp.RUN_BLOCK = block
    tp.INT32_MAX = 0 if wide_starts else tp.INT32_MAX
    try:
        layout, idx, off, psw, tr = _run(specs, B, lengths, seed=data.draw(st.integers(0, 99)))
        _check_against_host(layout, idx, psw, tr, B, lengths)
    finally:
        tp.LINEARIZE_BLOCK, tp.RUN_BLOCK, tp.INT32_MAX = saved


@pytest.mark.parametrize("dims", [(8, 8), (8, 40)])
def test_tiers_read_int64_run_starts_as_int32_ones(dims):
    """The tiers take run starts in either dtype: one step with the int32 limit patched down (int64 starts and bags)
    leaves the weights and momentum bit-equal to the same step with int32 ones, short and long runs, one bucket
    and two."""
    import tbe.transpose as tp

    specs = [(50, dims[0]), (7, dims[1])]
    B, lengths = 4, [3, 90, 0, 5, 70, 1, 2, 80]
    idx, off, psw = make_batch(specs, B, lengths, seed=3, hot=[1, 2])
    after = []
    for limit in (tp.INT32_MAX, 0):
        m = build(specs, optimizer="exact_rowwise_adagrad", seed=5)
        saved, tp.INT32_MAX = tp.INT32_MAX, limit
        try:
            assert train_step(m, idx, off, psw) == []
        finally:
            tp.INT32_MAX = saved
        after.append((m.weights.detach().cpu(), m.momentum.detach().cpu()))
    assert all(torch.equal(a, b) for a, b in zip(*after))


def test_linear_dtype_choice():
    small = TableLayout((TableSpec(10, 4), TableSpec(20, 8)))
    assert linear_dtype_for(small, KernelConfig()) == torch.int32
    assert linear_dtype_for(small, KernelConfig(index_dtype="int64")) == torch.int64
    edge = TableLayout((TableSpec(2**31 - 1, 1), TableSpec(1, 1)))  # last linear index = 2^31 - 1
    assert linear_dtype_for(edge, KernelConfig()) == torch.int32
    big = TableLayout((TableSpec(2**31 - 1, 1), TableSpec(2, 1)))
    assert linear_dtype_for(big, KernelConfig()) == torch.int64
    with pytest.raises(ValueError, match="index_dtype='int32'"):
        linear_dtype_for(big, KernelConfig(index_dtype="int32"))


def test_key_dtype_is_the_narrowest_holding_every_key():
    def layout(*rows):
        return TableLayout(tuple(TableSpec(r, 4) for r in rows))

    assert key_dtype_for(layout(200, 56), KernelConfig()) == torch.uint8      # keys 0..255
    assert key_dtype_for(layout(200, 57), KernelConfig()) == torch.int16      # key 256
    assert key_dtype_for(layout(2**15), KernelConfig()) == torch.int16        # keys up to 32767
    assert key_dtype_for(layout(2**15 + 1), KernelConfig()) == torch.int32
    # a forced index dtype is the keys' dtype too (the knob that exercises the int32 and int64 paths)
    assert key_dtype_for(layout(10), KernelConfig(index_dtype="int64")) == torch.int64
    assert key_dtype_for(layout(10), KernelConfig(index_dtype="int32")) == torch.int32


@pytest.mark.parametrize("rows", [(255, 1), (256, 1), (200, 57), (2**15 - 1, 1), (2**15 - 3, 4)])
def test_keys_at_the_top_of_a_narrow_dtype(rows):
    """Ids at the last rows, where a key one past the dtype would wrap or turn negative: runs, rows and the
    sort order match the host encoding; the mixed D puts the two tables in two buckets (keys by bucket)."""
    specs = [(rows[0], 8), (rows[1], 40)]
    layout = TableLayout(tuple(TableSpec(e, d) for e, d in specs))
    B, lengths = 3, [3, 0, 2, 1, 2, 2]
    top = [rows[0] - 1, rows[0] - 2, 0, rows[0] - 1, rows[0] - 1, rows[1] - 1, 0, rows[1] - 1, rows[1] - 1, 0]
    idx = torch.tensor(top, dtype=torch.int64)
    off = torch.cumsum(torch.tensor([0] + lengths), 0)
    tr = transpose_on_dev(layout, idx, off, None, B, KernelConfig())
    assert tr.key.dtype == key_dtype_for(layout, KernelConfig()) and tr.run_linear.dtype == torch.int32
    _check_against_host(layout, idx, None, tr, B, lengths)


def _past_limit(config):
    """A layout whose rows cross 2^31 (never materialized): ids near the end of table 1."""
    layout = TableLayout((TableSpec(2**31 - 8, 1), TableSpec(2**31, 1)))
    hcs = torch.tensor(layout.hash_size_cumsum)
    idx = torch.tensor([5, 2**31 - 9, 2**31 - 1, 7, 2**31 - 1])
    off = torch.tensor([0, 2, 5])
    return layout, hcs, idx, off, transpose_on_dev(layout, idx, off, None, 1, config)


def test_linear_indices_past_int32_do_not_wrap():
    layout, hcs, idx, off, tr = _past_limit(KernelConfig())
    expect = torch.tensor([5, 2**31 - 9, hcs[1] + 2**31 - 1, hcs[1] + 7, hcs[1] + 2**31 - 1])
    assert tr.linear_dtype == torch.int64 and torch.equal(tr.key, expect)
    assert int(tr.num_runs[0]) == 4 and tr.run_linear[:4].tolist() == sorted(set(expect.tolist()))


def test_int32_fault_wraps_and_is_caught():
    _, hcs, idx, off, tr = _past_limit(KernelConfig(faults=("int32_linearize_past_limit",)))
    expect = hcs[tr.bag_of] + idx
    assert tr.linear_dtype == torch.int32
    assert not torch.equal(tr.key.long(), expect), "the int32 fault must corrupt linear indices"


def test_unstable_pairing_fault_mismatches_duplicates():
    specs = [(3, 2)]
    layout, idx, off, psw, good = _run(specs, 2, [6, 5], weighted=True)
    bad = transpose_on_dev(layout, idx, off, psw, 2,
                           KernelConfig(faults=("unstable_weighted_pairing",)))
    assert torch.equal(good.sorted_psw, psw[good.perm])
    assert torch.equal(bad.sorted_key, good.sorted_key)
    assert not torch.equal(bad.sorted_psw, psw[bad.perm]), "duplicates must get mismatched weights"


def test_empty_batch():
    layout, idx, off, psw, tr = _run([(4, 2)], 3, [0, 0, 0])
    assert tr.n == 0 and int(tr.num_runs[0]) == 0
