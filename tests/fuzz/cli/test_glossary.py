"""Every term a summary points at has its heading in docs/concepts.md, and the summaries point at them."""

from __future__ import annotations

from fuzz.glossary import PAGE, Term, see
from tests.test_docs import REPO, _anchors


def test_every_term_is_a_heading_of_the_concepts_page():
    anchors = _anchors(REPO / PAGE)
    assert [t for t in Term if t.value not in anchors] == []


def test_see_names_the_page_and_the_anchors():
    assert see(Term.TEETH, Term.ONE_ROUNDING) == "see docs/concepts.md#teeth, #within-one-rounding-uw"


def test_the_summarys_terms_point_at_the_glossary():
    from fuzz.budgets import get as get_budget
    from fuzz.campaign import campaign_text
    from fuzz.campaign.search import CampaignResult
    from fuzz.judge import check
    from cases import CaseSpec, tensors
    from tbe import KernelConfig

    spec = CaseSpec(tables=((10, 3),), batch_size=2, max_length=3)
    res = CampaignResult(KernelConfig(), get_budget("quick"), 0, search_config=False)
    res.record(check.case_result(spec, tensors(spec, weights=False), KernelConfig(), 0.0, None, None))
    text = campaign_text(res)
    heads = ("  tiers exercised", "  opening tour", "  max error/bound ratio", "  passing checks", "  coverage:")
    lines = [line for line in text.splitlines() if line.startswith(heads)]
    assert len(lines) >= 4 and all(f"see {PAGE}#" in line for line in lines), "\n".join(lines)
