"""How big a campaign's examples may be, per kind of execution (``fuzz.profiles.LIMITS``): a SUT that runs natively
on the CPU draws far larger batches than the project's kernels under the interpreter, so a bug that only a large
batch shows is found on the CPU too."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from fuzz.budgets import get
from fuzz.cli import main
from fuzz.execution import limits
from fuzz.profiles import LIMITS, PROJECT, Execution
from cases import case_from_dict, tensors
from strategies.tour import size_edges

POSITIONS = 2**15  # the planted SUT reads a batch's ids at positions modulo 2^15, like a 15-bit position counter


def short_positions_sut():
    """``module:factory`` for the test below: PyTorch's TBE, except that the lookup at position p reads the id at
    position p mod 2^15, as a TBE whose position counter wraps at 2^15 would."""
    from fuzz.sut.torch_tbe import TorchInstance, factory

    class ShortPositions(TorchInstance):
        def forward(self, indices, offsets, per_sample_weights=None, batch_size_per_feature=None):
            if indices.numel() > POSITIONS:
                indices = indices[torch.arange(indices.numel(), device=indices.device) % POSITIONS]
            return super().forward(indices, offsets, per_sample_weights, batch_size_per_feature)

    return dataclasses.replace(factory(), name="short-positions", build=ShortPositions)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU's limits: on a GPU the torch SUT runs there")
def test_a_native_cpu_sut_is_fitted_to_the_cpus_limits_and_the_project_to_its_own():
    assert limits("torch") == LIMITS[Execution.CPU]
    assert limits() == PROJECT
    quick = get("quick", limits("torch"))
    assert quick.max_lookups > get("quick").max_lookups and quick.max_lookups > 4 * POSITIONS


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU's limits: on a GPU the torch SUT runs there")
def test_a_cpu_sut_whose_bug_needs_more_than_2p15_lookups_fails_its_campaign(tmp_path, capsys):
    """Under the interpreter's 4,000 lookups, which every SUT on the CPU drew before, no batch reaches the bug. The
    opening tour's batch past 2^16 positions finds it, and the reducer cuts it to the edge: one bag of 16 past 2^15."""
    code = main(["run", "--sut", "tests.fuzz.execution.test_limits:short_positions_sut", "--seed", "1", "--time", "20",
                 "--artifacts", str(tmp_path), "--json"])
    failure = json.loads(capsys.readouterr().out)["failure"]
    assert code == 1 and failure["kind"] == "mismatch", failure
    assert "forward vs fp64: MISMATCH" in " ".join(failure["reports"]), failure["reports"]
    assert tensors(case_from_dict(failure["case"]), steps=False).indices.numel() > POSITIONS, failure["case"]
    case = failure["case"]
    bags, length = len(case["tables"]) * case["batch_size"], case["max_length"]
    assert case["length_profile"] == "fixed" and (bags - 1) * length <= POSITIONS < bags * length, case


def test_size_edges_pass_16_bit_positions_where_the_budget_affords_them():
    edges = size_edges(LIMITS[Execution.CPU].max_lookups)
    assert len(edges) == 2 and all(c.expected_lookups() > 2**16 for c in edges)
    assert max(c.batch_size for c in edges) > 2**12 and max(h.count for c in edges for h in c.hot_rows) > 2**16
    assert size_edges(LIMITS[Execution.INTERPRETER].max_lookups) == []
