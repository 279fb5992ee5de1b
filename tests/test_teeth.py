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
from strategies.case import CaseSpec, HotRow
from tbe import KernelConfig


def test_bands_cover_every_length_once():
    assert BANDS[0][0] == 1 and BANDS[-1][1] is None
    assert all(a[1] + 1 == b[0] for a, b in zip(BANDS, BANDS[1:]))
    assert [band_label(*b) for b in BANDS][-2:] == ["4096-2^20-1", ">= 2^20"]


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
