"""The GPU benchmarks' wiring, run on a tiny shape on any machine: ``bench_tbe``, ``config_sweep`` and
``profile_backward`` build the gate's workload and module for a shape, and the TBE they time agrees with
PyTorch's ops on that batch. Only the device timers are stood in for (they need CUDA events)."""

from __future__ import annotations

import pytest
import torch

from benchmarks import bench_tbe, config_sweep, profile_backward
from fuzz.gate.shapes import PRESETS, PerfShape
from tbe import KernelConfig
from tbe.backend import default_device
from tests.spies import spied

TINY = [PerfShape("tiny-uniform", 50, 8, bags=6, pooling=3),
        PerfShape("tiny-zipf-weighted-sgd", 40, 4, bags=5, pooling=2, skew=1.1, weighted=True, optimizer="exact_sgd"),
        # production forms: several tables of mixed D, variable bag lengths
        PerfShape("tiny-tables-mixed-d-variable", 30, 8, bags=4, pooling=3, tables=3, dims=(4, 8),
                  lengths="variable", weighted=True)]


@pytest.fixture
def untimed(monkeypatch):
    """Each timer runs its step once and reports 1 ms; the profiler's reports one kernel."""
    def once(fn, *args, **kwargs):
        fn()
        return 1.0

    def kernels(step, iters):
        step()
        return {"_forward_kernel": 1.0}

    for module in (bench_tbe, config_sweep):
        monkeypatch.setattr(module, "time_ms", once)
    for module in (config_sweep, profile_backward):
        monkeypatch.setattr(module, "kernel_times", kernels)
    monkeypatch.setattr(bench_tbe, "kernel_profile", lambda step, iters: {"_forward_kernel": (kernels(step, iters)[
        "_forward_kernel"], 1.0)})


def test_the_benchmarks_time_the_gates_bench_shapes():
    assert bench_tbe.SHAPES is PRESETS["bench"]
    assert [s.name for s in bench_tbe.SHAPES] == ["D128-fp32-uniform", "D64-fp32-uniform", "D256-fp16-uniform",
                                                  "D128-fp32-zipf1.1", "D128-fp32-weighted", "D128-fp32-sgd"]


@pytest.mark.parametrize("shape", TINY, ids=lambda s: s.name)
def test_bench_shape_times_ours_beside_torch_on_one_batch(untimed, shape):
    r = bench_tbe.bench_shape(shape, default_device(), KernelConfig(), copy_gbps=1.0, impls=("triton", "torch"))
    assert (r["shape"], r["lookups"], r["weighted"], r["optimizer"]) == (shape.name, shape.lookups, shape.weighted,
                                                                         shape.optimizer)
    assert r["triton_forward_ms"] == r["torch_forward_ms"] == 1.0 and "fbgemm_forward_ms" not in r
    assert r["triton_iteration_device_ms"] == r["torch_forward_device_ms"] == 1.0
    events, device = bench_tbe.table_line(r).splitlines()
    assert events.split()[1:5] == ["events", "fwd", "ours", "1.00"] and device.split()[1] == "device"
    assert r["forward_max_abs_diff_vs_torch"] < 1e-5  # the same weights and batch through both
    assert 1 <= r["distinct_rows"] <= shape.rows and r["floor_iteration_ms"] > r["floor_forward_ms"] > 0


@pytest.mark.parametrize("shape", TINY[1:], ids=lambda s: s.name)
def test_bench_shape_hands_every_implementation_int32_ids_when_asked(untimed, shape):
    seen = set()
    with spied([(bench_tbe, "torch_forward", lambda args: seen.add((args[1].dtype, args[2].dtype)))]):  # ids, offsets
        r = bench_tbe.bench_shape(shape, default_device(), KernelConfig(), copy_gbps=1.0, impls=("triton", "torch"),
                                  ids_dtype="int32")
    assert r["ids"] == "int32" and seen == {(torch.int32, torch.int32)}
    assert r["forward_max_abs_diff_vs_torch"] < 1e-5  # ours, on the same int32 batch, agrees


def test_config_sweep_gives_equal_digests_for_configs_that_differ_only_in_launch_settings(untimed):
    shape = TINY[0]
    lines = list(config_sweep.sweep_shape(shape, [{}, {"fwd_num_warps": 2}], "t", default_device()))
    assert [ln["shape"] for ln in lines] == [shape.name] * 2 and lines[0]["digest"] == lines[1]["digest"]


def test_profile_shape_summarises_our_kernels(untimed):
    r = profile_backward.profile_shape(TINY[1], KernelConfig(), iters=1, device=default_device())
    assert r["shape"] == TINY[1].name and r["triton"]["stages_ms"] == {"forward": 1.0}


def test_the_multi_table_probe_folds_the_same_ids_into_one_table():
    from benchmarks.multi_table_probe import workload

    ids, offsets, folded, grad = workload(tables=3, rows=5, batch=2, pooling=4, dim=8, device="cpu")
    assert ids.numel() == folded.numel() == 3 * 2 * 4 and offsets.tolist() == list(range(0, 25, 4))
    table = torch.arange(3).repeat_interleave(2 * 4)
    assert torch.equal(folded, ids + table * 5) and int(ids.max()) < 5 and grad.shape == (2, 3 * 8)


def test_the_host_profile_names_each_function_with_its_calls_and_time_per_call():
    from benchmarks.profile_host import top_functions

    def inner():
        return sum(range(2000))

    def outer():
        return inner() + inner()

    top = top_functions(outer, calls=4, limit=50)
    rows = {r["function"].rsplit(":", 1)[-1]: r for r in top["cumulative"]}
    assert rows["outer"]["calls"] == 1 and rows["inner"]["calls"] == 2
    assert rows["outer"]["cum_ms"] >= rows["inner"]["cum_ms"] > 0
    assert [r["own_ms"] for r in top["own"]] == sorted((r["own_ms"] for r in top["own"]), reverse=True)


def test_the_shape_options_select_in_the_sets_order_and_name_an_unknown_shape():
    import argparse

    from benchmarks.shape_args import add_shape_args, chosen_shapes

    p = argparse.ArgumentParser()
    add_shape_args(p, "production")
    picked = [s.name for s in chosen_shapes(p.parse_args(["--shapes", "T8-D128-L1,T8-D128-L40"]))]
    assert picked == ["T8-D128-L40", "T8-D128-L1"]
    assert len(list(chosen_shapes(p.parse_args([])))) == len(PRESETS["production"])
    with pytest.raises(SystemExit, match="'T9' is not a shape of 'production'"):
        list(chosen_shapes(p.parse_args(["--shapes", "T9"])))


def test_profile_shape_runs_torchrecs_iteration_beside_ours(untimed):
    """TorchRec's Triton TBE (the newest snapshot) is profiled through its SUT adapter on the same workload."""
    from benchmarks.baselines import torchrec_target

    target, note = torchrec_target(None)
    if target is None:
        pytest.skip(f"TorchRec's Triton TBE cannot run here: {note}")
    r = profile_backward.profile_shape(TINY[0], KernelConfig(), iters=1, device=default_device(), torchrec=target)
    assert r["torchrec"]["stages_ms"] == {"forward": 1.0} and r["triton"]["total_ms"] == 1.0
