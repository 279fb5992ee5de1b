"""Loop-level coverage (``tbe.loops``, ``fuzz.judge.loop_use``): a kernel's loops are classed from its launches.

The classes follow from the launch's own numbers: a run of exactly two chunks is whole, one lookup more leaves a
remainder; more runs than programs take a second grid-stride pass; a second step meets the workspace the first
one left. Each test builds the case that must land in one class and checks the real check's cells.
"""

from __future__ import annotations

import pytest
import torch

from cases import CaseSpec, HotRow
from fuzz.judge import run_case
from fuzz.judge.coverage import EDGES, LOOP_CLASS, Edge, EdgeGroup, loop_value, reachable
from tbe import KernelConfig
from tbe.backend import default_device
from tbe.grid import num_sms
from tbe.loops import CLASSES, Loop, LoopClass, LoopKind
from tbe.kernel_loops import all_loops
from tbe.routing import Path

# a long tier on the interpreter's scale: runs of 3 or more lookups are long, chunks of 2, one program per SM
LONG = dict(long_run_threshold=3, chunk_size=2, long_grid_multiplier=1, short_grid_multiplier=1)
SMS = num_sms(default_device())  # 2 under the interpreter


def loop_cells(result, path: Path, label: str) -> set[LoopClass]:
    """The classes of loop ``label`` on ``path`` that a checked case reached."""
    return {LOOP_CLASS[e] for p, e in result.cells if p == path and e in LOOP_CLASS and e.value.startswith(label + ":")}


def hot_case(count: int, steps: int = 1, tables=((400, 8),), batch_size: int = 2) -> CaseSpec:
    return CaseSpec(tables=tables, batch_size=batch_size, max_length=1, optimizer="exact_rowwise_adagrad", steps=steps,
                    seed=5, hot_rows=(HotRow(0, 0, count),))


def checked(case, **config):
    result = run_case(case, KernelConfig(**config))
    assert result.error is None and all(r.ok for r in result.reports), result.error
    return result


def test_classes_follow_extent_and_step():
    stride = Loop("k", Path.BWD_SHORT, "items", LoopKind.GRID_STRIDE, lambda a, g: [(a["n"], g[0])])
    tile = Loop("k", Path.BWD_SHORT, "items", LoopKind.TILE, lambda a, g: [(torch.tensor(a["n"]), 4)])
    assert stride.classes({"n": 8}, (8,)) == {LoopClass.ONE_PASS}
    assert stride.classes({"n": 9}, (8,)) == {LoopClass.MORE_PASSES}
    assert stride.classes({"n": 0}, (8,)) == set()  # no work, no pass
    assert tile.classes({"n": [4, 8]}, ()) == {LoopClass.WHOLE}
    assert tile.classes({"n": [4, 5]}, ()) == {LoopClass.WHOLE, LoopClass.REMAINDER}
    assert tile.classes({"n": [0, 3]}, ()) == {LoopClass.REMAINDER}


def test_every_loop_class_has_one_edge_and_the_matrix_lists_it():
    loop_edges = [e for e in EDGES if e.group == EdgeGroup.LOOP]
    assert len(loop_edges) == len(set(loop_edges)) == len(LOOP_CLASS)
    for loop in all_loops():
        for cls in CLASSES[loop.kind]:
            assert Edge(EdgeGroup.LOOP, loop_value(loop.label, cls)) in LOOP_CLASS


@pytest.mark.parametrize("fused", [False, True], ids=["two kernels", "fused"])
def test_a_run_of_whole_chunks_and_one_past_them(fused):
    path = Path.BWD_FUSED if fused else Path.BWD_LONG
    config = dict(LONG, fused_long_tier=fused, fused_long_min_lookups=0)
    whole = checked(hot_case(4), **config)          # 4 lookups: two chunks of 2
    over = checked(hot_case(5), **config)           # 5: two chunks and one of 1
    assert loop_cells(whole, path, "chunk_kernel, a long run's chunks") == {LoopClass.WHOLE}
    assert loop_cells(over, path, "chunk_kernel, a long run's chunks") == {LoopClass.REMAINDER}


def test_more_chunks_than_programs_take_a_second_pass():
    # one program per SM: as many chunks of 2 as SMs are one pass, one chunk more is two
    one = checked(hot_case(2 * SMS), **LONG)
    two = checked(hot_case(2 * SMS + 2), **LONG)
    assert loop_cells(one, Path.BWD_LONG, "chunk_kernel, chunks") == {LoopClass.ONE_PASS}
    assert loop_cells(two, Path.BWD_LONG, "chunk_kernel, chunks") == {LoopClass.MORE_PASSES}


def test_a_group_of_chunks_fills_the_apply_step_and_one_more_leaves_one_over():
    parts = KernelConfig().bwd_apply_parts  # chunks of 2 lookups: 2 * parts lookups are one whole group
    whole = checked(hot_case(2 * parts), **LONG)
    over = checked(hot_case(2 * parts + 2), **LONG)
    assert loop_cells(whole, Path.BWD_LONG, "apply_kernel, a run's chunk partials") == {LoopClass.WHOLE}
    assert loop_cells(over, Path.BWD_LONG, "apply_kernel, a run's chunk partials") == {LoopClass.REMAINDER}


def test_the_second_step_reuses_the_workspace():
    config = dict(LONG, fused_long_tier=True, fused_long_min_lookups=0)
    once = checked(hot_case(4), **config)
    twice = checked(hot_case(4, steps=2), **config)
    label = "chunk_kernel, partial sums"
    assert loop_cells(once, Path.BWD_FUSED, label) == {LoopClass.FIRST_USE}
    assert loop_cells(twice, Path.BWD_FUSED, label) == {LoopClass.FIRST_USE, LoopClass.REUSE}


def test_more_runs_than_side_by_side_lanes_take_a_second_pass():
    # runs_per_program 4 on one program per SM: a pass holds 4 x SMs runs; bags of two ids over 5 x that many rows
    # hold more distinct rows than one pass takes
    config = dict(bwd_short_runs_per_program=4, short_grid_multiplier=1)
    rows = 20 * SMS
    few = checked(CaseSpec(tables=((rows, 8),), batch_size=2, max_length=1, seed=1), **config)
    many = checked(CaseSpec(tables=((rows, 8),), batch_size=8 * SMS, max_length=2, length_profile="fixed", seed=1),
                   **config)
    assert loop_cells(few, Path.BWD_SHORT, "short_rows_kernel, runs") == {LoopClass.ONE_PASS}
    assert loop_cells(many, Path.BWD_SHORT, "short_rows_kernel, runs") == {LoopClass.MORE_PASSES}


def test_a_second_pass_is_unreachable_where_no_case_holds_more_work_than_programs():
    # the side-by-side kernel's programs: multiplier x SMs, each taking its bucket's runs a pass (at most the widest
    # bucket's); a budget of that many lookups never holds more runs
    c = KernelConfig()
    most = c.short_grid_multiplier * num_sms(default_device()) * max(c.short_runs(b) for b in c.dim_buckets)
    cell = (Path.BWD_SHORT, Edge(EdgeGroup.LOOP, loop_value("short_rows_kernel, runs", LoopClass.MORE_PASSES)))
    assert cell not in reachable(c, False, max_lookups=most)
    assert cell in reachable(c, False, max_lookups=most + 1)
