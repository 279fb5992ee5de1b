"""The teeth table (fuzz.judge.teeth): bound / |update| per segment-length band, in campaign reports."""

from __future__ import annotations

import json

import pytest
import torch

from fuzz.budgets import Budget
from fuzz.campaign import CampaignResult
from fuzz.judge import run_case
from fuzz.campaign import campaign_json, campaign_text
from fuzz.judge.teeth import BANDS, Teeth, band_label
from cases import CaseSpec, HotRow
from tbe import KernelConfig


def test_bands_cover_every_length_once():
    assert BANDS[0][0] == 1 and BANDS[-1][1] is None
    assert all(a[1] + 1 == b[0] for a, b in zip(BANDS, BANDS[1:]))
    assert [band_label(*b) for b in BANDS][-2:] == ["4096-2^20-1", ">= 2^20"]


def test_each_bands_largest_ratio_is_found_among_more_entries_than_slots():
    """Per band, the max is the largest bound / |update| of its entries, wherever it sits among thousands."""
    g = torch.Generator().manual_seed(3)
    n = 5000
    seg = torch.tensor([1, 40, 300])[torch.randint(0, 3, (n,), generator=g)]
    bound = torch.rand(n, generator=g, dtype=torch.float64)
    update = torch.rand(n, generator=g, dtype=torch.float64) + 0.5
    t = Teeth()
    t.add(seg, bound, update)
    j = t.to_json()
    for length, label in ((1, "1-3"), (40, "32-255"), (300, "256-4095")):
        m = seg == length
        assert j[label]["max"] == pytest.approx(float((bound[m] / update[m]).max()), rel=1e-12)
        assert j[label]["entries"] == int(m.sum())


def test_band_statistics():
    t = Teeth()
    seg = torch.tensor([1, 2, 300, 2 ** 20])
    bound = torch.tensor([[1e-6, 4e-6], [1e-6, 1e-6], [0.5, 0.5], [3.0, 3.0]], dtype=torch.float64)
    update = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    exact = torch.tensor([[True, True], [True, False], [False, False], [False, False]])
    t.add(seg, bound, update, exact)
    j = t.to_json()
    assert set(j) == {"1-3", "256-4095", ">= 2^20"}
    assert j["1-3"]["entries"] == 4 and j["1-3"]["exact"] == 3 and j["1-3"]["zero_update"] == 1
    assert j["1-3"]["max"] == pytest.approx(4e-6) and 1e-6 / 1.2 < j["1-3"]["median"] < 1e-6 * 1.2
    assert j[">= 2^20"]["median"] == pytest.approx(3.0, rel=0.2)
    other = Teeth()
    other.add(torch.tensor([2]), torch.tensor([[1.0]], dtype=torch.float64), torch.tensor([[1.0]], dtype=torch.float64))
    t.merge(other)
    assert t.to_json()["1-3"]["entries"] == 5 and t.to_json()["1-3"]["max"] == 1.0


@pytest.mark.fuzz
def test_an_infinite_bound_keeps_a_finite_median():
    # gamma(n) has no bound for n u >= 1: such an entry's ratio is infinite, and the report still prints
    t = Teeth()
    t.add(torch.tensor([5, 6]), torch.tensor([[float("inf")], [1e-3]], dtype=torch.float64),
          torch.tensor([[1.0], [1.0]], dtype=torch.float64))
    j = t.to_json()["4-31"]
    assert j["max"] == float("inf") and j["entries"] == 2
    assert 1e-3 <= j["median"] < float("inf")
    assert "inf" in "\n".join(t.lines())


def test_a_checked_case_reports_its_teeth_and_campaign_reports_show_them():
    """Exact-value data: bound far below the update in every band the case reaches; random data:
    no exact entries in the long run. Both end up in the campaign's text and JSON."""
    res = CampaignResult(KernelConfig(), Budget("t", 1, 1, 1, 100), 0)
    for values in ("dyadic", "random"):
        spec = CaseSpec(tables=((20, 3),), batch_size=4, max_length=2, hot_rows=(HotRow(0, 1, 40),),
                        learning_rate=0.5, values=values, seed=1)
        r = run_case(spec, KernelConfig(long_run_threshold=8, chunk_size=4))
        assert r.ok, r.text()
        bands = r.teeth.to_json()
        assert "32-255" in bands and "1-3" in bands
        if values == "dyadic":
            assert all(b["exact"] == b["entries"] and b["max"] < 1e-9 for b in bands.values()), bands
        else:
            # a run of one lookup is exact whatever its value; a run of 40 random values is not
            assert bands["32-255"]["exact"] == 0 and bands["32-255"]["median"] > 1e-6, bands
        res.record(r)
    text = campaign_text(res)
    assert "bound / |update| per segment-length band" in text and "32-255" in text
    data = json.loads(json.dumps(campaign_json(res)))
    assert data["teeth"]["32-255"]["entries"] == 6 and data["bound"] == "worst"


def test_a_band_at_or_above_1_is_explained_with_its_exact_value_count():
    u = 2.0 ** -24
    t = Teeth()
    # SL 5-7, one column: a sharp entry; a bound twice the update; an update (1e-8) under one rounding of w = 1
    t.add(torch.tensor([5, 6, 7]), torch.tensor([[1e-6], [2.0], [1e-7]], dtype=torch.float64),
          torch.tensor([[1.0], [1.0], [1e-8]], dtype=torch.float64), torch.tensor([[True], [False], [True]]),
          torch.tensor([[0.5], [0.5], [1.0]], dtype=torch.float64), u)
    j = t.to_json()["4-31"]["at_or_above_1"]
    assert j == {"entries": 2, "exact": 1, "within_one_rounding": 1, "examples": 1}
    sharp = Teeth()
    sharp.add(torch.tensor([2]), torch.tensor([[1e-6]], dtype=torch.float64),
              torch.tensor([[1.0]], dtype=torch.float64), None, torch.tensor([[1.0]], dtype=torch.float64), u)
    assert sharp.to_json()["1-3"]["at_or_above_1"]["entries"] == 0
    assert not any("is no failure" in line for line in sharp.lines())  # nothing to explain
    other = Teeth()  # a second example with one blunt entry in the same band
    other.add(torch.tensor([9]), torch.tensor([[1.0]], dtype=torch.float64), torch.tensor([[1.0]], dtype=torch.float64))
    t.merge(other)
    t.merge(sharp)
    j = t.to_json()["4-31"]["at_or_above_1"]
    assert j == {"entries": 3, "exact": 1, "within_one_rounding": 1, "examples": 2}
    text = "\n".join(t.lines())
    assert "is no failure" in text
    why = [line for line in t.lines() if line.strip().startswith("4-31:")]
    assert why and "3 entries in 2 example(s), 1 of them exact-value" in why[0]
    assert "1 because the update is within one rounding" in why[0] and "2 because the allowance exceeds" in why[0]
    assert not any(line.strip().startswith("1-3:") for line in t.lines())  # the sharp band needs no excuse
