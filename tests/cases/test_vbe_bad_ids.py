"""Bad ids and broken offsets under VBE and features sharing tables: the bad batch's record, its per-feature
layout, the bounds-check modes on our TBE in each tier, the planted off-by-one check caught there, the coverage
placements, reduction, fitting to a SUT and the strategy's gate."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, Phase, find, settings

from cases import BadBatchSpec, BadId, BadIdCase, CaseSpec, case_from_dict, materialize_bad, tensors
from fuzz.campaign.reduce import candidates
from fuzz.judge import coverage
from fuzz.judge.check import run_case
from fuzz.sut import fit_case
from fuzz.sut.protocol import get
from oracles.compare import Check
from oracles.reference_bounds import reference_bounds_check
from strategies.configs import named_config
from strategies.space import bad_id_cases
from tbe import faults
from tbe.modes import BoundsCheckMode

TABLES = ((6, 4), (5, 8))
MAP = (0, 1, 0)      # features 0 and 2 read table 0
SIZES = (3, 0, 2)    # feature 1 has no bags
IDS = (BadId("rows", "first", "middle", "last"), BadId("dtype_max", "last", "last", "first"),
       BadId("negative", "last", "first", "last"))
BAD = BadBatchSpec(TABLES, 3, max_length=3, bad_ids=IDS, seed=5, feature_table_map=MAP, batch_size_per_feature=SIZES)


def case(mode: str, bad: BadBatchSpec = BAD) -> BadIdCase:
    spec = CaseSpec(tables=TABLES, batch_size=bad.batch_size, feature_table_map=bad.feature_table_map,
                    batch_size_per_feature=bad.batch_size_per_feature, bounds_check=mode, max_length=bad.max_length,
                    optimizer="exact_rowwise_adagrad", seed=bad.seed)
    return BadIdCase(spec, bad)


def test_records_round_trip_and_fixed_records_are_unchanged():
    assert case_from_dict(json.loads(json.dumps(case("warning").to_dict()))) == case("warning")
    fixed = json.loads(BadBatchSpec(TABLES, 2, bad_ids=IDS[:1]).to_json())
    assert "feature_table_map" not in fixed and "batch_size_per_feature" not in fixed
    assert json.loads(BAD.to_json())["batch_size_per_feature"] == list(SIZES)


def test_each_features_bags_hold_its_bad_ids():
    b = materialize_bad(BAD)
    off, ids = b.offsets.tolist(), b.indices.tolist()
    assert len(off) == sum(SIZES) + 1 and b.rows == [6, 5, 6]
    assert ids[off[2] - 1] == 6                       # feature 0, middle bag (1 of 3), last id: E of table 0
    assert ids[off[4] - 1] < 0                        # feature 2's first bag (bag 3), its last id: negative ...
    assert ids[off[4]] == 2**63 - 1                   # ... and its last bag (bag 4), first id: int64's maximum
    ref = reference_bounds_check(b.rows, b.indices, b.offsets, BoundsCheckMode.WARNING, batch_size_per_feature=SIZES)
    assert ref.fatal and ref.warnings == 3


@pytest.mark.parametrize("batch,sizes,bad_ids,text", [
    (3, (3, 0, 0), (BadId("rows", "last"),),
     r"bad_ids\[0\] goes to the last feature \(2\), which has no bag \(batch_size_per_feature\[2\] = 0\)"),
    (0, None, (BadId("rows"),), r"bad_ids\[0\] goes to the first feature \(0\), which has no bag \(batch_size = 0\)"),
    (2, (3, 0, 2), (), r"batch_size=2 must be max\(batch_size_per_feature=\[3, 0, 2\]\) = 3"),
    (3, (3, 0), (), "batch_size_per_feature has 2 entries"),
])
def test_bad_layouts_are_named(batch, sizes, bad_ids, text):
    with pytest.raises(ValueError, match="BadBatchSpec." + text):
        BadBatchSpec(TABLES, batch, bad_ids=bad_ids, feature_table_map=MAP, batch_size_per_feature=sizes)


def test_spec_and_bad_batch_must_agree_on_the_layout():
    spec = case("warning").spec
    with pytest.raises(ValueError, match=r"spec.batch_size_per_feature=\[3, 0, 2\] but bad.batch_size_per_feature="
                                         r"\[3, 1, 2\]"):
        BadIdCase(spec, dataclasses.replace(BAD, batch_size_per_feature=(3, 1, 2)))
    with pytest.raises(ValueError, match=r"spec.feature_table_map=\[0, 1, 0\] but bad.feature_table_map=\[0, 0, 1\]"):
        BadIdCase(spec, dataclasses.replace(BAD, feature_table_map=(0, 0, 1)))


# our TBE under each mode, the standalone and the fused check, in the tiers a few cents of interpreter time reach
TIERS = ("default", "small", "fused_bounds", "small_fused", "short_rows")


@pytest.mark.parametrize("mode", ["warning", "ignore", "fatal"])
def test_vbe_bad_ids_pass_in_every_tier(mode):
    for tier in TIERS:
        r = run_case(case(mode), named_config(tier))
        assert r.ok, (tier, r.error, [x for x in r.reports if not x.ok])
        checks = {x.check for x in r.reports}
        assert (Check.FATAL_RAISED in checks) == (mode == "fatal"), (tier, checks)
        assert (Check.WARNINGS in checks) == (mode == "warning"), (tier, checks)


@pytest.mark.parametrize("tier", ["default", "fused_bounds"])
def test_bounds_check_off_by_one_is_caught_on_a_vbe_bad_id_case(tier):
    """Row E of table 0 is table 1's row 0 in the packed weights: the planted check reads it, in range of the
    buffer, and the forward and the warning count say so."""
    at_e = dataclasses.replace(BAD, bad_ids=(BadId("rows", "last", "last", "first"),))
    with faults.allow():
        caught = run_case(case("warning", at_e), named_config(tier, ("bounds_check_off_by_one",)))
    assert not caught.ok and {x.key for x in caught.reports if not x.ok} & {"forward vs fp64", "bounds-check warnings"}
    assert run_case(case("warning", at_e), named_config(tier)).ok


def test_placements_count_within_each_features_bags():
    one_bag = dataclasses.replace(BAD, batch_size_per_feature=(3, 0, 1), bad_ids=(BadId("rows", "last", "middle"),))
    assert coverage._placements(case("warning", one_bag)) == [("rows", "first", "first"), ("rows", "last", "first")]
    assert sorted(coverage._placements(case("warning"))) == [
        ("dtype_max", "last", "first"), ("negative", "first", "last"), ("rows", "middle", "last")]


def test_reduction_keeps_a_bag_for_every_bad_id():
    # dropping feature 0 or 2 (or table 0) would leave a bad id on a feature of batch 0: no such candidate
    maps = {c.bad.feature_table_map for c in candidates(case("warning"))}
    assert (0, 0) in maps and not maps & {(0, 1), (1, 0), ()}, maps
    cands = list(candidates(case("warning", dataclasses.replace(BAD, batch_size_per_feature=(3, 1, 2)))))
    assert any(c.bad.batch_size_per_feature is None for c in cands), "the fixed batch of max B_f"
    assert any(c.bad.feature_table_map == () and c.bad.batch_size_per_feature == (3, 1) for c in cands), "feature 2 cut"
    for c in cands:  # each is a valid pair: the halves agree, every bad id has a bag
        assert all(c.bad.batch_sizes[c.bad.feature_of(b)] > 0 for b in c.bad.bad_ids)
        assert c.spec.batch_size_per_feature == c.bad.batch_size_per_feature


def test_fitting_to_a_sut_keeps_the_layout_and_its_index_dtype():
    c = case("warning").with_modes(index_dtype="int32")
    fitted = fit_case(c, get("fbgemm-cpu").capabilities)
    assert fitted.bad.index_dtype == fitted.spec.index_dtype == "int64", "fbgemm-cpu takes int64 ids under VBE"
    assert fitted.bad.batch_size_per_feature == SIZES and fitted.bad.feature_table_map == MAP
    no_empty = dataclasses.replace(get("fbgemm-cpu").capabilities, empty_batch=False)
    assert fit_case(c, no_empty).bad.batch_size_per_feature == (3, 1, 2), "both halves get feature 1 a bag"
    no_vbe = dataclasses.replace(get("fbgemm-cpu").capabilities, vbe=False)
    assert fit_case(c, no_vbe) is None


FEW = settings(max_examples=200, phases=[Phase.generate], database=None, derandomize=True, deadline=None,
               suppress_health_check=list(HealthCheck))


def test_the_strategy_draws_the_layouts_only_when_asked():
    drawn = find(bad_id_cases(shared_tables=True, vbe=True),
                 lambda c: c.bad.vbe and c.bad.feature_table_map and 0 in c.bad.batch_sizes, settings=FEW)
    assert tensors(drawn, weights=False).offsets.numel() == sum(drawn.bad.batch_sizes) + 1
    with pytest.raises(Exception, match="No examples found"):
        find(bad_id_cases(), lambda c: c.bad.vbe or c.bad.feature_table_map, settings=FEW)
