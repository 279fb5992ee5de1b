"""Race checks of the fused long tier (fuzz.memcheck.race_stress): the fence and the CTA barrier are both needed.

Each trial applies one exact-SGD step to a batch whose sums are exact in fp32
(strategies/race.py), so any row off by any amount lost a partial sum to a race. On a GPU:
the clean fused tier loses nothing in over 10M runs, ``no_fence`` is caught in every stress
variant within a few trials (the seconds to catch are printed), and ``no_barrier`` is caught
wherever the static check finds the compiled code without a barrier before the countdown
(elsewhere the compiler's own barrier masks it, and the stress must lose nothing there).
On CPU the same code paths run small: the batch's exact expectation against an independent
FP64 reference, and the stress finding nothing with the interpreter's in-order programs.
"""

import pytest
import torch

from fuzz.memcheck.race_stress import LOOKUPS_PER_TRIAL, VARIANTS, Variant, barrier_gap, catch, run_stress
from strategies.race import race_batch
from tbe import KernelConfig

CLEAN_RUNS = 10_000_000
gpu = pytest.mark.gpu


# ----------------------------------------------------------------------------- CPU: the harness itself
def test_race_batch_expectation_is_the_exact_sgd_step():
    rb = race_batch(rows=6, chunks_per_run=5, chunk_size=3, dim=7, batch_size=10, seed=4, device=torch.device("cpu"))
    assert rb.num_lookups == 6 * 15 and torch.bincount(rb.indices.long()).tolist() == [15] * 6
    per_bag = rb.num_lookups // rb.batch_size
    ref = rb.weights.double().view(6, 7).clone()
    for j, row in enumerate(rb.indices.tolist()):  # FP64, one lookup at a time
        ref[row] -= rb.grad_output[j // per_bag].double()
    assert torch.equal(ref.float(), rb.expected)
    assert rb.grad_output.abs().max() <= 2 and rb.weights.abs().max() <= 4


def test_race_batch_refuses_sizes_that_break_exactness():
    with pytest.raises(ValueError, match="multiple of batch_size"):
        race_batch(3, 4, 1, 8, 5, 0, torch.device("cpu"))
    with pytest.raises(ValueError, match="run length"):
        race_batch(1, 1 << 12, 1 << 9, 8, 1, 0, torch.device("cpu"))
    with pytest.raises(ValueError, match="chunk_size"):
        race_batch(1, 4, 0, 8, 1, 0, torch.device("cpu"))


def test_variants_have_tiny_chunks_many_chunks_and_one_program_per_chunk():
    assert all(1 <= v.chunk_size <= 4 and 64 <= v.chunks_per_run <= 256 for v in VARIANTS)
    assert len({(v.num_warps, v.gather, v.dim) for v in VARIANTS}) >= 4
    for v in VARIANTS:
        cfg = v.config()
        assert cfg.fused_long_tier and cfg.long_run_threshold == v.chunk_size * v.chunks_per_run
        assert cfg.long_grid_multiplier * 132 >= LOOKUPS_PER_TRIAL // v.chunk_size  # H200: 132 SMs
    assert VARIANTS[0].rows() * 160 >= CLEAN_RUNS


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the interpreter's in-order programs")
def test_interpreter_runs_the_stress_and_loses_nothing_without_weak_memory():
    small = Variant(chunk_size=2, chunks_per_run=4, num_warps=4, dim=8, gather=2)
    for faults in [(), ("no_fence",)]:
        r = run_stress(small, faults, trials=2, rows=6)
        assert r.trials == 2 and r.runs == 12 and r.lost_runs == 0 and r.seconds_to_catch is None


@pytest.mark.fuzz
def test_static_check_of_exactly_what_the_stress_runs():
    small = Variant(chunk_size=1, chunks_per_run=64, num_warps=4, dim=128, gather=1)
    gap, text = barrier_gap(small, rows=64)
    assert "_chunk_kernel" in text and "FUSED=true" in text and "BLOCK_D=128" in text and "GATHER=1" in text
    assert gap == ("no CTA barrier" in text)


# ----------------------------------------------------------------------------- GPU
@gpu
def test_clean_fused_tier_loses_no_sum_in_ten_million_runs():
    v = VARIANTS[0]
    trials = -(-CLEAN_RUNS // v.rows())
    r = run_stress(v, trials=trials)
    print(f"\nclean, {v.label}: {r.lost_runs} lost in {r.runs} runs, {r.seconds:.1f}s")
    assert r.runs >= CLEAN_RUNS and r.lost_runs == 0


@gpu
@pytest.mark.parametrize("variant", VARIANTS[1:], ids=lambda v: v.label)
def test_clean_fused_tier_loses_no_sum_in_any_variant(variant):
    r = run_stress(variant, trials=20)
    print(f"\nclean, {variant.label}: {r.lost_runs} lost in {r.runs} runs, {r.seconds:.1f}s")
    assert r.lost_runs == 0


@gpu
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.label)
def test_no_fence_is_caught_in_every_variant(variant):
    r = run_stress(variant, ("no_fence",), trials=20, stop_at_first=True)
    print(f"\nno_fence, {variant.label}: caught in trial {r.trials_to_catch}, {r.seconds_to_catch}s, "
          f"{r.lost_runs} of {r.rows} runs lost")
    assert r.lost_runs > 0


@gpu
def test_no_barrier_is_caught_where_the_compiler_left_no_barrier():
    exposed = [v for v in VARIANTS if barrier_gap(v)[0]]
    masked = [v for v in VARIANTS if v not in exposed]
    print(f"\nno_barrier: PTX without the barrier in {[v.label for v in exposed]}, masked in {[v.label for v in masked]}")
    for v in masked:  # the compiled code keeps a barrier: the stress must lose nothing
        assert run_stress(v, ("no_barrier",), trials=5).lost_runs == 0
    if exposed:
        results = catch("no_barrier", seconds=240.0, trials_per_variant=60, variants=exposed)
        print("; ".join(f"{r.variant.label}: {r.lost_runs} lost in {r.runs} runs, {r.seconds:.1f}s" for r in results))
        assert any(r.lost_runs for r in results), "no_barrier: the PTX lacks the barrier but no sum was lost"


@gpu
def test_two_kernel_tier_has_no_race():
    v = VARIANTS[0]
    cfg = KernelConfig(chunk_size=v.chunk_size, long_run_threshold=v.chunk_size * v.chunks_per_run,
                       long_grid_multiplier=v.config().long_grid_multiplier)
    assert run_stress(v, trials=3, config=cfg).lost_runs == 0


def test_race_rates_benchmark_needs_a_gpu(capsys):
    if torch.cuda.is_available():
        pytest.skip("checks the CPU refusal")
    from benchmarks.race_rates import main

    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2 and "needs a CUDA device" in capsys.readouterr().err
