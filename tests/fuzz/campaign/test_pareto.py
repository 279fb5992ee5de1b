"""A packed campaign's search keeps no Hypothesis Pareto front (``fuzz.campaign.pareto``): with an example
database, Hypothesis saves every example Pareto-optimal on the target scores and compares long choice sequences to
keep that front, a fifth of a packed CPU campaign's time."""

from __future__ import annotations

from hypothesis import Phase, given, seed, settings, target
from hypothesis import strategies as st
from hypothesis.database import InMemoryExampleDatabase
from hypothesis.internal.conjecture import engine

from fuzz.budgets import Budget
from fuzz.campaign import CampaignOptions, CampaignRunner
from fuzz.campaign.pareto import EmptyFront, without_pareto_front
from tbe import KernelConfig
from tests.passing_supervisor import PassingSupervisor



def _pareto_entries(run_inside: bool) -> int:
    """Entries Hypothesis saved under its Pareto key, for a run of two target scores with a database."""
    db = InMemoryExampleDatabase()

    # settings outermost: a seed alone would switch the database off
    @settings(max_examples=60, database=db, phases=[Phase.generate, Phase.target], deadline=None)
    @seed(5)
    @given(st.integers(0, 1000), st.integers(0, 1000))
    def scored(a, b):
        target(float(a), label="a")
        target(float(b - a), label="b - a")

    if run_inside:
        with without_pareto_front() as replaced:
            assert replaced
            scored()
    else:
        scored()
    return sum(len(v) for k, v in db.data.items() if k.endswith(b".pareto"))


def test_the_front_is_replaced_only_inside_and_saves_nothing():
    original = engine.ParetoFront
    assert _pareto_entries(run_inside=False) > 0  # Hypothesis's own front saves the scores' best examples
    assert _pareto_entries(run_inside=True) == 0
    assert engine.ParetoFront is original
    with without_pareto_front():
        with without_pareto_front():
            assert engine.ParetoFront is EmptyFront
        assert engine.ParetoFront is EmptyFront
    with without_pareto_front(False) as replaced:
        assert not replaced and engine.ParetoFront is original
    assert engine.ParetoFront is original


def test_a_packed_campaign_searches_without_the_front_and_an_unpacked_one_with_it():
    """Packs (a GPU's campaigns) drop the front for their search and restore it after; one case an example (the
    interpreter's) keeps Hypothesis's own, whose cost there is a few percent of the driver."""
    original = engine.ParetoFront
    for pack, expected in ((2, EmptyFront), (1, original)):
        seen = []

        class Recording(PassingSupervisor):
            def run(self, case, config, pending=None, **options):
                seen.append(engine.ParetoFront)
                return super().run(case, config, pending, **options)

        budget = Budget("t", seconds=3.0, shrink_seconds=0.0, max_examples=20, max_lookups=2000, pack=pack)
        res = CampaignRunner(KernelConfig(), budget, 1, CampaignOptions(
            artifacts_dir=None, supervisor=Recording(), tour_share=None, fill=False)).run()
        assert res.examples > 0 and seen and all(f is expected for f in seen), pack
        assert engine.ParetoFront is original
