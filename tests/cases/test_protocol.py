"""Every kind of case answers ``cases.CaseRecord`` the same way: code above ``cases`` never asks which kind it holds."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from cases import BadBatchSpec, BadId, BadIdCase, CaseKind, CaseSpec, HotRow, PackCase, case_from_dict, tensors
from tbe.modes import FloatDtype, IndexDtype

SPEC = CaseSpec(tables=((9, 4), (5, 8)), batch_size=3, max_length=4, hot_rows=(HotRow(0, 2, 5),), seed=3)
BAD = BadIdCase(CaseSpec(tables=((6, 4),), batch_size=2, max_length=3, seed=5),
                BadBatchSpec(((6, 4),), 2, max_length=3, bad_ids=(BadId("rows"),), bad_offsets=("last_short",), seed=5))
PACK = PackCase((SPEC, CaseSpec(tables=((7, 4),), batch_size=5, max_length=2, seed=8)))
KINDS = {CaseKind.SPEC: SPEC, CaseKind.BAD_IDS: BAD, CaseKind.PACK: PACK}


@pytest.mark.parametrize("kind", list(CaseKind))
def test_each_kind_round_trips_through_json_and_names_its_kind(kind):
    case = KINDS[kind]
    assert case.kind is kind and case_from_dict(case.to_dict()) == case
    assert case.to_dict().get("kind", CaseKind.SPEC.value) == kind.value


def test_size_counts_tables_bags_and_expected_lookups_of_every_part():
    assert SPEC.size() == (2, 6, 2 * 3 * 4 + 5)
    assert BAD.size() == (1, 2, 1 * 2 * 3)                          # the bad batch's own longest bag
    assert PACK.size() == (3, 3 * 5, (2 * 3 * 4 + 5) + 1 * 5 * 2)   # the largest batch over all tables
    assert [len(c.subs) for c in (SPEC, BAD, PACK)] == [1, 1, 2]
    assert SPEC.spec is SPEC and BAD.spec is BAD.spec and PACK.spec.num_tables == 3


def test_only_a_bad_id_case_has_a_bad_batch():
    assert [c.bad for c in (SPEC, PACK)] == [None, None] and BAD.bad is not None


@pytest.mark.parametrize("kind", list(CaseKind))
def test_modes_reach_every_part_that_holds_them(kind):
    moved = KINDS[kind].with_modes(weighted=True, index_dtype="int32", pooling="mean")
    assert all(s.weighted and s.index_dtype == "int32" and s.pooling == "mean" for s in moved.subs)
    if moved.bad is not None:  # the invalid batch agrees with its spec on what both hold
        assert moved.bad.weighted and moved.bad.index_dtype == "int32"
    t = tensors(moved)
    assert t.indices.dtype == torch.int32 and t.per_sample_weights is not None


@pytest.mark.parametrize("kind", list(CaseKind))
def test_reseeding_draws_every_part_afresh_and_keeps_the_shape(kind):
    case = KINDS[kind]
    moved = case.reseeded(7919)
    assert moved.kind is kind and moved.size()[:2] == case.size()[:2]
    assert [s.seed for s in moved.subs] == [s.seed + 7919 for s in case.subs]
    if case.bad is not None:
        assert moved.bad.seed == case.bad.seed + 7919
    a, b = tensors(case), tensors(moved)
    assert not torch.equal(a.grad_outputs[0], b.grad_outputs[0])
    assert case.reseeded(0) == case


def test_dtype_fields_hold_the_enums_and_refuse_a_bad_name_by_field():
    """A case's dtypes are ``tbe.modes`` members whatever name or torch dtype built them; its JSON holds the value."""
    spec = CaseSpec(tables=((4, 4),), batch_size=1, weights_dtype="float16", output_dtype=torch.bfloat16,
                    index_dtype="INT32")
    assert (spec.weights_dtype, spec.output_dtype, spec.index_dtype) == (FloatDtype.FP16, FloatDtype.BF16,
                                                                         IndexDtype.INT32)
    assert type(spec.weights_dtype) is FloatDtype and type(spec.index_dtype) is IndexDtype
    assert json.loads(json.dumps(spec.to_dict()))["weights_dtype"] == "fp16"
    assert tensors(spec).indices.dtype == torch.int32
    with pytest.raises(ValueError, match=r"CaseSpec\.weights_dtype .*'fp8'"):
        CaseSpec(tables=((4, 4),), batch_size=1, weights_dtype="fp8")
    with pytest.raises(ValueError, match=r"BadBatchSpec\.index_dtype .*'int16'"):
        dataclasses.replace(BAD.bad, index_dtype="int16")
