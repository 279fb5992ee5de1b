"""GPU race checks of the fused long tier: the fence and the CTA barrier are both needed.

Each trial applies one exact-SGD step to a batch whose sums are exact in fp32 (see
strategies/race.py), so any row off by any amount lost a partial sum to a race. The
fused tier must give zero wrong rows under every stress variant; with the planted faults
``no_fence`` (relaxed countdown) or ``no_barrier`` (no CTA barrier before the release)
some variant must show wrong rows. Variants change the gather width and warps per chunk
program: a cross-warp reduction in the gather makes the compiler put a CTA barrier of
its own before the countdown, which can hide a missing one. Rates seen on the H200 are
recorded by benchmarks/race_rates.py.
"""

import pytest
import torch

from strategies.race import race_batch
from tbe import KernelConfig, TritonTBE
from tbe.backward import backward_and_update, transpose_for

pytestmark = pytest.mark.gpu

ROWS, CHUNKS, CHUNK, DIM, BATCH = 4096, 64, 256, 128, 65536
# one program per chunk (no persistent loop): the 64 chunks of a run finish close together
GRID_MULTIPLIER = 4096
# (gather width, warps) of the chunk programs
STRESS_VARIANTS = [(8, 4), (1, 4), (1, 8), (2, 8)]


def fused_config(*faults: str, num_warps: int = 4, gather: int = 8,
                 grid_multiplier: int = GRID_MULTIPLIER) -> KernelConfig:
    return KernelConfig(
        fused_long_tier=True, fused_long_min_lookups=0, chunk_size=CHUNK, long_run_threshold=CHUNK,
        bwd_long_num_warps=num_warps, bwd_long_gather=gather, long_grid_multiplier=grid_multiplier,
        faults=faults,
    )


def wrong_rows(config: KernelConfig, trials: int, stop_at_first: bool, seed: int = 0) -> tuple[int, int]:
    """(wrong rows seen, trials run): a trial is one backward on fresh weights."""
    device = torch.device("cuda")
    rb = race_batch(ROWS, CHUNKS, CHUNK, DIM, BATCH, seed, device)
    m = TritonTBE([(ROWS, DIM)], optimizer="exact_sgd", learning_rate=1.0, config=config,
                  bounds_check="none", device=device)
    tr = transpose_for(m, rb.indices, rb.offsets, None, BATCH)
    wrong = 0
    for trial in range(1, trials + 1):
        m.weights.copy_(rb.weights)
        backward_and_update(m, rb.indices, rb.offsets, None, BATCH, rb.grad_output, False, transposed=tr)
        got = m.weights.view(ROWS, DIM)
        wrong += int((got != rb.expected).any(dim=1).sum())
        if stop_at_first and wrong:
            return wrong, trial
    return wrong, trials


@pytest.mark.parametrize("gather, warps", STRESS_VARIANTS)
def test_fused_tier_with_fence_and_barrier_has_no_race(gather, warps):
    wrong, trials = wrong_rows(fused_config(num_warps=warps, gather=gather), trials=50, stop_at_first=False)
    print(f"fused tier, fence + barrier, gather {gather}, {warps} warps: {wrong} wrong rows in {trials * ROWS} runs")
    assert wrong == 0


def test_two_kernel_tier_has_no_race():
    cfg = KernelConfig(chunk_size=CHUNK, long_run_threshold=CHUNK)
    wrong, trials = wrong_rows(cfg, trials=10, stop_at_first=False)
    assert wrong == 0


@pytest.mark.xfail(
    reason="known gap: on the H200 (triton 3.6) the fused tier lost no partial sum without its fence or "
    "its barrier in ~2.6M runs per fault across every stress variant (benchmarks/results/README.md); "
    "the race check has no demonstrated power against these faults yet",
    strict=False,
)
@pytest.mark.parametrize("fault", ["no_fence", "no_barrier"])
def test_race_check_catches_missing_synchronisation(fault):
    seen = []
    for gather, warps in STRESS_VARIANTS:
        wrong, trials = wrong_rows(fused_config(fault, num_warps=warps, gather=gather), trials=60, stop_at_first=True)
        seen.append(f"gather {gather}, {warps} warps: {wrong} wrong after {trials} trials")
        if wrong:
            break
    print(f"fault {fault}: " + "; ".join(seen))
    assert wrong > 0, f"{fault}: no wrong row under any stress variant ({'; '.join(seen)})"
