"""A seed repeats: the ``--repeat`` counts a time-bound campaign prints run its examples again, whatever the
example database holds (``fuzz.campaign.repeat``); the database is read only when asked (``--continue``)."""

from __future__ import annotations

import json

import pytest

from fuzz.budgets import Budget
from fuzz.campaign import fill, repeat
from fuzz.campaign.search import CampaignOptions, CampaignRunner
from tbe import KernelConfig
from tests.passing_supervisor import PassingSupervisor

TIMED = Budget("t", seconds=12.0, shrink_seconds=0.0, max_examples=100_000, max_lookups=4000)


def _examples(budget, tmp_path, **options):
    """The campaign's checked examples in order (case and config), and its result."""
    sup = PassingSupervisor()
    res = CampaignRunner(KernelConfig(), budget, 3, CampaignOptions(
        artifacts_dir=tmp_path, supervisor=sup, **options)).run()
    return [json.dumps(c.to_dict(), sort_keys=True) + c_fg.to_json() for c, c_fg in sup.cases], res


@pytest.fixture
def aimed_half(monkeypatch):
    """Half the time to the aimed cases (draws here are instant, a fifth would aim at few cells)."""
    monkeypatch.setattr(fill, "FILL_SHARE", 0.5)


def test_the_repeat_counts_run_a_timed_campaign_again_with_a_database_present(tmp_path, aimed_half):
    _examples(TIMED, tmp_path, reuse=True)  # a run that writes the database (and would read it)
    assert any((tmp_path / ".hypothesis").rglob("*")), "the first run saved nothing to the example database"
    timed, res = _examples(TIMED, tmp_path)
    counts = repeat.of(res)
    assert res.fill_examples > 0 and res.resumed and counts.after > 0, "every phase should have run"
    again, res2 = _examples(dataclass_inf(TIMED), tmp_path, repeat=counts)
    assert again == timed
    assert repeat.of(res2) == counts


def test_a_campaign_that_reads_the_database_says_it_does_not_repeat(tmp_path):
    from fuzz.campaign.report import campaign_text

    few = Budget("few", seconds=3.0, shrink_seconds=0.0, max_examples=100_000, max_lookups=4000)
    _, first = _examples(few, tmp_path, reuse=True, tour_share=None)
    _, res = _examples(few, tmp_path, reuse=True, tour_share=None)
    assert res.reused
    text = campaign_text(res)
    assert "not from the seed alone" in text and repeat.of(res).option in text
    _, fresh = _examples(few, tmp_path, tour_share=None)
    assert not fresh.reused and f"with {repeat.of(fresh).option} runs these examples again" in campaign_text(fresh)


@pytest.mark.parametrize("text, want", [("40", repeat.Repeat(40)), ("40,3", repeat.Repeat(40, 3)),
                                        ("40, 3, 9", repeat.Repeat(40, 3, 9))])
def test_repeat_counts_read_back_from_their_option(text, want):
    assert repeat.Repeat.parse(text) == want
    assert repeat.Repeat.parse(want.option.split()[1]) == want


@pytest.mark.parametrize("text, names", [("x", "DRAWN"), ("1,-2", "AIMED"), ("1,2,3,4", "DRAWN[,AIMED")])
def test_bad_repeat_counts_name_the_part(text, names):
    with pytest.raises(ValueError, match=names.replace("[", r"\[")):
        repeat.Repeat.parse(text)


def dataclass_inf(budget: Budget) -> Budget:
    return budget.with_overrides(seconds=float("inf"))


def test_the_summarys_repeat_line_reruns_a_timed_cli_campaign(tmp_path):
    """End to end through the CLI, with the example database the first run wrote present (the fast torch SUT)."""
    import subprocess
    import sys

    def run(*extra):
        out = subprocess.run([sys.executable, "-m", "fuzz", "run", "--sut", "torch", "--artifacts", str(tmp_path),
                              "--json", *extra], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout)

    timed = run("--time", "10")  # start-up counts against it: under load it takes seconds of the 10
    counts = repeat.Repeat(**{**timed["repeat"], "skipped": tuple(timed["repeat"]["skipped"])})
    again = run(*counts.option.split())
    assert (again["examples"], again["lookups"]) == (timed["examples"], timed["lookups"])
    assert not timed["read_database"] and not again["read_database"]
