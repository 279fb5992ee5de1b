"""Bad input: every structural error raises TypeError/ValueError naming the field and the value."""

import math

import pytest
import torch

from tbe import BoundsCheckError, KernelConfig, TritonTBE
from tbe.backend import default_device
from tbe.modes import BoundsCheckMode

DEV = default_device()


def t(values, dtype=torch.int64):
    return torch.tensor(values, dtype=dtype, device=DEV)


def make(**kw):
    kw.setdefault("embedding_specs", [(10, 4), (6, 3)])
    return TritonTBE(**kw)


def batch(dtype=torch.int64):
    # T=2, B=2
    return t([1, 2, 3, 0, 5], dtype), t([0, 2, 3, 4, 5], dtype)


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        (dict(embedding_specs=[(10, 0)]), ValueError, ["embedding_specs[0]", "dim", "0"]),
        (dict(embedding_specs=[(10, 4), (5, -3)]), ValueError, ["embedding_specs[1]", "-3"]),
        (dict(embedding_specs=[(0, 4)]), ValueError, ["rows", "0"]),
        (dict(embedding_specs=[]), ValueError, ["embedding_specs"]),
        (dict(embedding_specs=[(10,)]), ValueError, ["embedding_specs[0]"]),
        (dict(embedding_specs=[(10.5, 4)]), TypeError, ["rows", "10.5"]),
        (dict(optimizer="adam"), ValueError, ["optimizer", "adam"]),
        (dict(pooling="max"), ValueError, ["pooling", "max"]),
        (dict(bounds_check="strict"), ValueError, ["bounds_check", "strict"]),
        (dict(weights_dtype=torch.float64), ValueError, ["weights_dtype", "float64"]),
        (dict(output_dtype="int8"), ValueError, ["output_dtype", "int8"]),
        (dict(learning_rate=-0.1), ValueError, ["learning_rate", "-0.1"]),
        (dict(learning_rate=math.nan), ValueError, ["learning_rate", "nan"]),
        (dict(eps=math.inf), ValueError, ["eps", "inf"]),
        (dict(eps=-1e-8), ValueError, ["eps", "-1e-08"]),
        (dict(config={"chunk_size": 4}), TypeError, ["config", "dict"]),
        (dict(device="meta"), ValueError, ["device", "meta"]),
    ],
)
def test_constructor_rejects(kwargs, exc, words):
    with pytest.raises(exc) as info:
        make(**kwargs)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_offsets_wrong_length():
    m = make()
    idx, off = batch()
    with pytest.raises(ValueError, match=r"offsets has 4 entries.*T=2"):
        m(idx, off[:-1])


def test_dtype_mismatch_between_indices_and_offsets():
    m = make()
    idx, off = batch()
    with pytest.raises(TypeError, match=r"indices torch.int32 and offsets torch.int64"):
        m(idx.to(torch.int32), off)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int16, torch.uint8])
def test_index_dtype_rejected(dtype):
    m = make()
    idx, off = batch()
    with pytest.raises(TypeError, match=rf"indices has dtype {dtype}"):
        m(idx.to(dtype), off)


def test_per_sample_weights_wrong_length():
    m = make()
    idx, off = batch()
    with pytest.raises(ValueError, match=r"per_sample_weights has 4 entries, expected one per index \(5\)"):
        m(idx, off, torch.ones(4, device=DEV))


def test_per_sample_weights_wrong_dtype():
    m = make()
    idx, off = batch()
    with pytest.raises(TypeError, match=r"per_sample_weights has dtype torch.float64"):
        m(idx, off, torch.ones(5, dtype=torch.float64, device=DEV))


def test_non_contiguous_rejected():
    m = make()
    idx, off = batch()
    strided = torch.zeros(10, dtype=torch.int64, device=DEV)[::2]
    strided.copy_(idx)
    with pytest.raises(ValueError, match=r"indices must be contiguous"):
        m(strided, off)


def test_two_dimensional_rejected():
    m = make()
    idx, off = batch()
    with pytest.raises(ValueError, match=r"offsets must be 1-D, got shape \(1, 5\)"):
        m(idx, off.view(1, -1))


def test_not_a_tensor_rejected():
    m = make()
    _, off = batch()
    with pytest.raises(TypeError, match=r"indices must be a torch.Tensor, got list"):
        m([1, 2, 3, 0, 5], off)


def test_wrong_device_rejected():
    m = make()
    idx, off = batch()
    with pytest.raises(ValueError, match=r"indices is on meta"):
        m(idx.to("meta"), off)


def test_decreasing_offsets_raise_under_fatal():
    m = make(bounds_check="fatal")
    idx = t([1, 2, 3, 0, 5])
    off = t([0, 3, 2, 4, 5])
    with pytest.raises(BoundsCheckError, match=r"offsets"):
        m(idx, off)


def test_out_of_range_id_raises_under_fatal_naming_table_and_id():
    m = make(bounds_check="fatal")
    idx = t([1, 2, 3, 0, 6])  # table 1 has 6 rows; id 6 is in its last bag
    off = t([0, 2, 3, 4, 5])
    with pytest.raises(BoundsCheckError) as info:
        m(idx, off)
    msg = str(info.value)
    assert "table 1" in msg and "6" in msg, msg


def test_inputs_are_never_modified():
    m = make(bounds_check="warning")
    idx = t([1, 99, 3, -1, 5])
    off = t([0, 2, 3, 4, 5])
    idx0, off0 = idx.clone(), off.clone()
    m(idx, off)
    assert torch.equal(idx, idx0) and torch.equal(off, off0)
    assert int(m.bounds_check_warnings.sum()) == 2


def test_bounds_check_mode_enum_accepted():
    m = make(bounds_check=BoundsCheckMode.IGNORE)
    assert m.bounds_check_mode == BoundsCheckMode.IGNORE


class TestKernelConfig:
    def test_json_round_trip(self, tmp_path):
        cfg = KernelConfig(long_run_threshold=128, chunk_size=64, dim_buckets=(16, 64, 256))
        path = tmp_path / "cfg.json"
        cfg.save(path)
        assert KernelConfig.load(path) == cfg
        base = KernelConfig()
        assert base.long_run_threshold != 128 and base.chunk_size != 64 and base.dim_buckets != (16, 64, 256)
        assert cfg.diff(base) == {
            "long_run_threshold": (128, base.long_run_threshold), "chunk_size": (64, base.chunk_size),
            "dim_buckets": ([16, 64, 256], list(base.dim_buckets)),
        }

    @pytest.mark.parametrize(
        "changes, exc, words",
        [
            (dict(chunk_size=0), ValueError, ["chunk_size", "0"]),
            (dict(long_run_threshold=-5), ValueError, ["long_run_threshold", "-5"]),
            (dict(fwd_gather_unweighted=6), ValueError, ["fwd_gather_unweighted", "power of two", "6"]),
            (dict(dim_buckets=(64, 32)), ValueError, ["dim_buckets", "increasing"]),
            (dict(dim_buckets=(48,)), ValueError, ["dim_buckets", "48"]),
            (dict(index_dtype="int16"), ValueError, ["index_dtype", "int16"]),
            (dict(fence="yes"), TypeError, ["fence", "yes"]),
            (dict(chunk_size=2.5), TypeError, ["chunk_size", "2.5"]),
            (dict(faults=("no_such_fault",)), ValueError, ["faults", "no_such_fault"]),
            (dict(fwd_bucket_tiles=((64, 3, 1, 1),)), ValueError, ["fwd_bucket_tiles", "(64, 3, 1, 1)"]),
            (dict(fwd_bucket_tiles=((64, 4, 1),)), ValueError, ["fwd_bucket_tiles", "(64, 4, 1)"]),
            (dict(fwd_bucket_tiles=((64, 4, 1, 1), (64, 8, 2, 2))), ValueError, ["BLOCK_D=64 twice"]),
            (dict(bwd_short_runs_per_program=3), ValueError, ["bwd_short_runs_per_program", "3"]),
            (dict(bwd_short_bucket_runs=((64, 3),)), ValueError, ["bwd_short_bucket_runs", "(64, 3)"]),
            (dict(bwd_short_bucket_runs=((64, 4, 1),)), ValueError, ["bwd_short_bucket_runs", "(64, 4, 1)"]),
            (dict(bwd_short_bucket_runs=((64, 4), (64, 2))), ValueError, ["BLOCK_D=64 twice"]),
        ],
    )
    def test_invalid_values_rejected(self, changes, exc, words):
        with pytest.raises(exc) as info:
            KernelConfig(**changes)
        for w in words:
            assert w in str(info.value), (w, str(info.value))

    def test_bucket_tiles_round_trip_and_apply_per_bucket(self, tmp_path):
        cfg = KernelConfig(fwd_bucket_tiles=((64, 8, 4, 2), (256, 4, 4, 1)))
        cfg.save(tmp_path / "cfg.json")
        assert KernelConfig.load(tmp_path / "cfg.json") == cfg
        assert cfg.forward_tile(64, weighted=False) == (8, 4, 2)
        assert cfg.forward_tile(256, weighted=True) == (4, 4, 1)
        assert cfg.forward_tile(128, weighted=True) == (cfg.fwd_gather_weighted, cfg.fwd_bags_per_program,
                                                        cfg.fwd_num_warps)

    def test_bucket_short_runs_round_trip_and_apply_per_bucket(self, tmp_path):
        cfg = KernelConfig(bwd_short_runs_per_program=2, bwd_short_bucket_runs=((16, 8), (128, 1)))
        cfg.save(tmp_path / "cfg.json")
        assert KernelConfig.load(tmp_path / "cfg.json") == cfg
        assert [cfg.short_runs(b) for b in (8, 16, 128, 256)] == [2, 8, 1, 2]
        assert cfg.most_short_runs() == 8
        assert KernelConfig(bwd_short_runs_per_program=1, bwd_short_bucket_runs=()).most_short_runs() == 1

    def test_long_bags_take_one_bag_a_program(self):
        cfg = KernelConfig(fwd_one_bag_pooling=32)
        assert cfg.forward_bags(4, num_indices=32 * 100, num_bags=100) == 1       # mean 32: one bag
        assert cfg.forward_bags(4, num_indices=32 * 100 - 1, num_bags=100) == 4   # just below: the tile's
        assert cfg.forward_bags(4, num_indices=0, num_bags=0) == 4                # no bags: the tile's
        assert KernelConfig(fwd_one_bag_pooling=0).forward_bags(8, num_indices=10**9, num_bags=1) == 8
        with pytest.raises(ValueError, match="fwd_one_bag_pooling must be >= 0"):
            KernelConfig(fwd_one_bag_pooling=-1)

    def test_unknown_json_field_rejected(self):
        with pytest.raises(ValueError, match="no field 'chunk'"):
            KernelConfig.from_json('{"chunk": 3}')

    def test_faults_refused_outside_tests(self, monkeypatch):
        monkeypatch.delenv("TBE_FUZZ_ALLOW_FAULTS", raising=False)
        with pytest.raises(ValueError, match="refused outside tests"):
            KernelConfig(faults=("fwd_skip_last_id",))
