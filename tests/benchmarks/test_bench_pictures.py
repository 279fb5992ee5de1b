"""The benchmark pictures' data preparation (benchmarks.pictures): which number lands in which bar,
how a profile made with an older stage table is restaged, and where an axis is cut. Not pixels."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.pictures import (CLIP, RESULTS, axis_top, bench_rows, breakdown_rows, drawn_impls, restage,
                                 stage_order)


def test_bench_rows_put_each_time_in_its_bar_and_leave_missing_ones_empty():
    line = {"shape": "D64", "triton_forward_ms": 0.5, "fbgemm_forward_ms": 0.4, "torch_forward_ms": 0.9,
            "floor_forward_ms": 0.3, "triton_iteration_ms": 3.0, "fbgemm_iteration_ms": 2.5,
            "floor_iteration_ms": 1.2}  # PyTorch's iteration was not measured
    (row,) = bench_rows([line])
    assert row.shape == "D64"
    assert row.ms["forward"] == {"ours": 0.5, "TorchRec": None, "FBGEMM": 0.4, "PyTorch": 0.9, "byte floor": 0.3}
    assert row.ms["iteration"] == {"ours": 3.0, "TorchRec": None, "FBGEMM": 2.5, "PyTorch": None, "byte floor": 1.2}


def test_a_shape_measured_in_two_runs_is_drawn_once_from_the_first():
    lines = [{"shape": "A", "triton_forward_ms": 0.5}, {"shape": "B", "triton_forward_ms": 0.7},
             {"shape": "A", "triton_forward_ms": 0.9}]
    rows = bench_rows(lines)
    assert [r.shape for r in rows] == ["A", "B"] and rows[0].ms["forward"]["ours"] == 0.5


def test_an_implementation_gets_bars_where_any_shape_measured_it():
    lines = [{"shape": "A", "triton_forward_ms": 0.5, "torchrec_forward_ms": 0.6, "floor_forward_ms": 0.3},
             {"shape": "B", "triton_forward_ms": 0.7, "torch_iteration_ms": 9.0}]
    assert drawn_impls(bench_rows(lines)) == ["ours", "TorchRec", "PyTorch", "byte floor"]


def test_axis_is_cut_above_the_slowest_bar_other_than_pytorch():
    rows = [{"ours": 4.0, "FBGEMM": 5.0, "PyTorch": 114.0, "byte floor": 2.0}, {"ours": 7.0, "PyTorch": None}]
    assert axis_top(rows) == pytest.approx(CLIP * 7.0)


def test_restage_moves_a_kernel_counted_under_other_and_keeps_the_total():
    stages = {"other": 2.3, "forward": 0.7, "sort": 0.25}
    top = [["_short_rows_kernel", 2.2], ["_forward_kernel", 0.7], ["DeviceRadixSortOnesweepKernel", 0.2]]
    out = restage(stages, top)
    assert out["short tier"] == pytest.approx(2.2) and out["other"] == pytest.approx(0.1)
    assert out["forward"] == 0.7 and out["sort"] == 0.25  # already counted in their stages: not moved again
    assert sum(out.values()) == pytest.approx(sum(stages.values()))
    assert restage(out, top) == out  # a profile made with the current table is left as it is
    # a kernel "other" cannot hold was counted elsewhere by the older table: left where it was
    assert restage({"other": 0.1, "linearize": 2.2}, [["_short_rows_kernel", 2.2]]) == {"other": 0.1,
                                                                                       "linearize": 2.2}


def test_committed_profile_restaged_per_shape():
    profile = json.loads((RESULTS / "profile_backward_h200.json").read_text())
    rows = breakdown_rows(profile)
    assert [r.shape for r in rows] == [r["shape"] for r in profile["results"]]
    for row, raw in zip(rows, profile["results"]):
        for label, impl in (("ours", "triton"), ("FBGEMM", "fbgemm")):
            assert math.isclose(sum(row.stages[label].values()), raw[impl]["total_ms"], rel_tol=1e-9)
        kernels = dict(raw["triton"]["top_kernels_ms"])
        # the profile predates the table's name for the rows kernel: the picture files it under the short tier
        assert row.stages["ours"]["short tier"] >= kernels["_short_rows_kernel"]
        assert row.stages["ours"]["other"] < 0.05
        assert row.stages["FBGEMM"]["forward"] > 0.3  # FBGEMM's codegen forward kernel, once "other"
    order = stage_order(rows)
    assert order[0] == "short tier" and order[-1] == "other" and len(set(order)) == len(order)


def test_device_rows_read_the_kernels_time_and_keep_the_one_byte_floor():
    line = {"shape": "T8", "triton_forward_ms": 0.5, "triton_forward_device_ms": 0.3, "fbgemm_forward_ms": 0.4,
            "fbgemm_forward_device_ms": 0.35, "floor_forward_ms": 0.2, "triton_iteration_ms": 3.0,
            "floor_iteration_ms": 1.2}  # no device time of the iteration: an empty bar
    (events,), (device,) = bench_rows([line]), bench_rows([line], "device")
    assert events.ms["forward"]["ours"] == 0.5 and device.ms["forward"]["ours"] == 0.3
    assert device.ms["forward"]["FBGEMM"] == 0.35 and device.ms["forward"]["byte floor"] == 0.2
    assert device.ms["iteration"]["ours"] is None and device.ms["iteration"]["byte floor"] == 1.2
