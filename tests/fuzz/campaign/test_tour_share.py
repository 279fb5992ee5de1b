"""The opening tour split among campaigns (``--workers N``, ``--tour-share I/N``) and left out (``--no-tour``).

Campaigns here run against a stand-in supervisor that passes every case at once (its tiers come
from the materialized case, as a real run's do), so only the driver's bookkeeping is under test.
"""

from __future__ import annotations

import collections

import pytest

from fuzz.budgets import Budget
from fuzz.campaign.search import CampaignOptions, CampaignRunner
from fuzz.cli.parser import build_parser
from fuzz.cli.run import tour_share
from fuzz.execution import workers
from cases import split_draw
from strategies.tour import ALL, TourShare, tour
from tbe import KernelConfig
from tests.passing_supervisor import PassingSupervisor

BUDGET = Budget("t", seconds=600.0, shrink_seconds=0.0, max_examples=2, max_lookups=4000)


def _campaign(share, fill=False):
    sup, tiers = PassingSupervisor(), []
    res = CampaignRunner(KernelConfig(), BUDGET, 1, CampaignOptions(
        artifacts_dir=None, supervisor=sup, tour_share=share, observe=lambda r, result: tiers.append(result.tiers),
        fill=fill)).run()
    return res, sup.cases[:res.tour_examples], collections.Counter(t for ts in tiers[:res.tour_examples] for t in ts)


def test_shares_partition_the_tour_and_their_tier_counts_add_up_to_one_tour():
    full, full_cases, full_tiers = _campaign(ALL)
    expected = [split_draw(d, KernelConfig())[:2] for d in tour(KernelConfig(), BUDGET.max_lookups)]
    assert full.tour_examples == len(expected) and full_cases == expected
    parts = [_campaign(TourShare(i, 2)) for i in range(2)]
    assert sorted(map(repr, parts[0][1] + parts[1][1])) == sorted(map(repr, full_cases))
    assert not set(map(repr, parts[0][1])) & set(map(repr, parts[1][1]))
    assert parts[0][2] + parts[1][2] == full_tiers  # one tour between them: no tier counted twice
    assert [p[0].tour for p in parts] == [TourShare(0, 2), TourShare(1, 2)]


def test_no_tour_runs_the_search_alone():
    res, cases, _ = _campaign(None)
    assert res.tour is None and res.tour_examples == 0 and not cases and res.examples == BUDGET.max_examples


@pytest.mark.parametrize("text, share", [("0/1", ALL), ("1/3", TourShare(1, 3))])
def test_tour_share_parses(text, share):
    assert TourShare.parse(text) == share and str(share) == text


@pytest.mark.parametrize("text", ["2/2", "-1/2", "1", "a/b", "0/0"])
def test_bad_tour_share_is_refused_naming_it(text, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["run", "--tour-share", text])
    assert exc.value.code == 2 and "--tour-share" in capsys.readouterr().err


def test_options_reach_the_campaign_and_the_worker_commands(monkeypatch, tmp_path):
    parser = build_parser()
    assert tour_share(parser.parse_args(["run"])) == ALL
    assert tour_share(parser.parse_args(["run", "--no-tour"])) is None
    assert tour_share(parser.parse_args(["run", "--tour-share", "1/2"])) == TourShare(1, 2)
    assert tour_share(parser.parse_args(["selftest", "--no-tour"])) is None
    launched = []

    class _Proc:
        returncode = 0

        def __init__(self, argv, **kw):
            launched.append(argv)

        def communicate(self):
            return "not json", None

    monkeypatch.setattr(workers.subprocess, "Popen", _Proc)
    for extra, want in (([], [["--tour-share", "0/2"], ["--tour-share", "1/2"]]), (["--no-tour"], [["--no-tour"]] * 2)):
        launched.clear()
        args = parser.parse_args(["run", "--artifacts", str(tmp_path), *extra])
        workers.run_workers(args, 2)
        for argv, w in zip(launched, want):
            assert argv[-len(w):] == w or " ".join(w) in " ".join(argv), argv
        assert all(("--tour-share" in a) != bool(extra) for a in launched)
