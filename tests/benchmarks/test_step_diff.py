"""The step diff counts the entries two states differ in and by how much; NaN against NaN is no difference."""

import math

import pytest
import torch

from benchmarks.step_diff import state_diff


def test_state_diff_counts_and_measures_the_differing_entries():
    a = torch.tensor([1.0, 2.0, float("nan"), 4.0, 0.0], dtype=torch.float32)
    b = a.clone()
    assert state_diff("w", a, b) == {"w_differ": 0, "w_total": 5, "w_max_abs": 0.0, "w_max_rel": 0.0}
    b[1] = torch.nextafter(b[1], torch.tensor(3.0))  # one unit in the last place of 2.0
    b[3] = 4.5
    r = state_diff("w", a, b)
    assert r["w_differ"] == 2 and r["w_max_abs"] == 0.5 and r["w_max_rel"] == 0.125
    b[4] = 1e-3  # against zero the relative difference is huge, not a division error
    r = state_diff("w", a, b)
    assert r["w_differ"] == 3 and math.isfinite(r["w_max_rel"]) and r["w_max_rel"] > 1e300
    b[2] = 1.0  # NaN against a number differs, infinitely
    r = state_diff("w", a, b)
    assert r["w_differ"] == 4 and r["w_max_abs"] == math.inf and r["w_max_rel"] == math.inf


def test_state_diff_reads_fp16_exactly_and_refuses_other_sizes():
    a = torch.tensor([1.0, 1.0], dtype=torch.float16)
    b = torch.tensor([1.0, 1.0009765625], dtype=torch.float16)  # one fp16 unit in the last place above 1
    r = state_diff("w", a, b)
    assert r["w_differ"] == 1 and r["w_max_abs"] == 2.0 ** -10
    with pytest.raises(ValueError, match="w: 2 entries against 3"):
        state_diff("w", a, torch.ones(3, dtype=torch.float16))
