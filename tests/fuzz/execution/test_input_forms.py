"""The campaign summary's production inputs: which sub-cases held shared tables, VBE, a feature of batch 0, bad
input or stochastic rounding (``fuzz.execution.stats.InputForm``), counted per sub-case and kept through JSON."""

from __future__ import annotations

import collections

from cases import CaseSpec, PackCase
from fuzz.execution.stats import CampaignStats, InputForm, input_forms
from fuzz.judge import CaseResult
from oracles.compare import Check, Report

PLAIN = CaseSpec(tables=((8, 4), (6, 4)), batch_size=3)
SHARED_VBE = CaseSpec(tables=((8, 4), (6, 4)), batch_size=3, feature_table_map=(0, 1, 0),
                      batch_size_per_feature=(3, 0, 2))


def result(case, reports=()) -> CaseResult:
    return CaseResult(case, list(reports), 0, frozenset(), 0.0)


def test_forms_follow_the_case_fields():
    assert input_forms(result(PLAIN)) == collections.Counter()
    assert input_forms(result(SHARED_VBE)) == collections.Counter(
        {InputForm.SHARED_TABLES: 1, InputForm.VBE: 1, InputForm.EMPTY_FEATURE: 1})
    no_empty = CaseSpec(tables=((8, 4),), batch_size=3, feature_table_map=(0, 0), batch_size_per_feature=(3, 1))
    assert input_forms(result(no_empty)) == collections.Counter({InputForm.SHARED_TABLES: 1, InputForm.VBE: 1})


def test_stochastic_rounding_counts_where_its_check_judged_the_stores():
    sr = Report("step 0 stochastic rounding", True, None, 0, 1, graded=False, check=Check.SR_NEIGHBOURS, step=0)
    other = Report("step 0 forward", True, None, 0, 1, graded=False, check=Check.FORWARD, step=0)
    assert input_forms(result(PLAIN, [other]))[InputForm.STOCHASTIC] == 0
    assert input_forms(result(PLAIN, [other, sr]))[InputForm.STOCHASTIC] == 1


def test_a_pack_counts_each_sub_case_and_json_keeps_the_counts():
    pack = PackCase((PLAIN, CaseSpec(tables=((8, 4), (6, 4)), batch_size=3, feature_table_map=(0, 1, 1), seed=1)))
    stats = CampaignStats()
    stats.record(result(pack), ratios=False)
    stats.record(result(SHARED_VBE), ratios=False)
    assert stats.inputs[InputForm.SHARED_TABLES] == 2 and stats.inputs[InputForm.VBE] == 1
    back = CampaignStats.from_state(stats.to_state())
    assert back.inputs == stats.inputs
