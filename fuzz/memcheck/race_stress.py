"""Race stress of the fused long tier: exact-integer batches of tiny chunks, one program per chunk.

A trial applies one exact-SGD step (lr = 1) to a ``strategies.race`` batch; any row that
differs from the exact result lost a partial sum. On the H200 (triton 3.6) a relaxed
countdown lost sums in 0.2-19% of runs per trial with chunks of 1-4 lookups and 64-256
chunks per run, and in none with chunks of 16 or more, so every variant uses tiny chunks,
many chunks per run and ``long_grid_multiplier`` large enough for one program per chunk;
variants differ in chunk size, chunks per run, warps, width and gather width.
On a GPU the self-test runs this stress for ``no_fence`` and ``no_barrier``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Optional, Sequence

import torch

from strategies.race import race_batch
from tbe import KernelConfig, TritonTBE
from tbe.backend import INTERPRETED
from tbe.backward import backward_and_update, transpose_for

LOOKUPS_PER_TRIAL = 1 << 22  # 65,536 rows x 64 chunks of 1 lookup
BATCH = 65_536
GRID_MULTIPLIER = 65_536     # x SMs: at least one program per chunk on any GPU


@dataclasses.dataclass(frozen=True)
class Variant:
    chunk_size: int
    chunks_per_run: int
    num_warps: int
    dim: int
    gather: int

    @property
    def label(self) -> str:
        return (f"chunk {self.chunk_size} x {self.chunks_per_run}, {self.num_warps} warps, D {self.dim}, "
                f"gather {self.gather}")

    def rows(self, lookups: int = LOOKUPS_PER_TRIAL) -> int:
        return max(1, lookups // (self.chunk_size * self.chunks_per_run))

    def config(self, *faults: str) -> KernelConfig:
        run = self.chunk_size * self.chunks_per_run
        return KernelConfig(
            fused_long_tier=True, fused_long_min_lookups=0, chunk_size=self.chunk_size, long_run_threshold=run,
            bwd_long_num_warps=self.num_warps, bwd_long_gather=self.gather,
            long_grid_multiplier=GRID_MULTIPLIER, faults=tuple(faults),
        )


# the first is the clean count's variant; the rest sweep what the measured loss rates depended on
VARIANTS = (
    Variant(1, 64, 4, 128, 1),
    Variant(1, 256, 4, 128, 1),
    Variant(1, 64, 8, 256, 1),
    Variant(1, 64, 1, 128, 1),
    Variant(2, 64, 4, 128, 2),
    Variant(4, 64, 4, 128, 4),
    Variant(4, 64, 8, 128, 8),
)


@dataclasses.dataclass
class StressResult:
    variant: Variant
    faults: tuple[str, ...]
    rows: int
    trials: int = 0
    lost_runs: int = 0            # rows (runs) whose update lost a partial sum, over all trials
    seconds: float = 0.0
    seconds_to_catch: Optional[float] = None
    trials_to_catch: Optional[int] = None

    @property
    def runs(self) -> int:
        return self.rows * self.trials

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["variant"] = dataclasses.asdict(self.variant)
        d["label"] = self.variant.label
        d["runs"] = self.runs
        d["rate"] = self.lost_runs / self.runs if self.runs else None
        return d


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_stress(
    variant: Variant, faults: Sequence[str] = (), trials: int = 1, stop_at_first: bool = False,
    rows: Optional[int] = None, seconds: Optional[float] = None, seed: int = 0, batch: int = BATCH,
    device: Optional[torch.device] = None, config: Optional[KernelConfig] = None,
) -> StressResult:
    """Up to ``trials`` backward steps on fresh weights (or until ``seconds``, or the first lost sum);
    ``config`` replaces the variant's own (e.g. the two-kernel tier on the same batch)."""
    device = device or (torch.device("cpu") if INTERPRETED else torch.device("cuda"))
    rows = rows or variant.rows()
    rb = race_batch(rows, variant.chunks_per_run, variant.chunk_size, variant.dim, min(batch, rows), seed, device)
    m = TritonTBE([(rows, variant.dim)], optimizer="exact_sgd", learning_rate=1.0,
                  config=config or variant.config(*faults), bounds_check="none", device=device)
    tr = transpose_for(m, rb.indices, rb.offsets, None, rb.batch_size)
    res = StressResult(variant, tuple(faults), rows)
    _sync(device)
    t0 = time.perf_counter()
    for trial in range(1, trials + 1):
        m.weights.copy_(rb.weights)
        backward_and_update(m, rb.indices, rb.offsets, None, rb.batch_size, rb.grad_output, False, transposed=tr)
        lost = int((m.weights.view(rows, variant.dim) != rb.expected).any(dim=1).sum())  # syncs
        res.trials, res.lost_runs = trial, res.lost_runs + lost
        res.seconds = time.perf_counter() - t0
        if lost and res.seconds_to_catch is None:
            res.seconds_to_catch, res.trials_to_catch = res.seconds, trial
            if stop_at_first:
                break
        if seconds is not None and res.seconds >= seconds:
            break
    return res


def barrier_gap(variant: Variant, fault: str = "no_barrier", rows: Optional[int] = None) -> tuple[bool, str]:
    """Whether the sm_90 PTX of this variant's own fused-kernel launch lacks a barrier before the
    countdown under ``fault`` (static check of exactly what the stress runs), and the report."""
    from fuzz.compile import recording
    from fuzz.memcheck.sync_check import check_launches, hands_off

    with recording(execute=False) as launches:
        run_stress(variant, (fault,), trials=1, rows=rows)
    report = check_launches([lc for lc in launches if hands_off(lc)], variant.config(fault), "stress")
    if not report.ran:
        raise RuntimeError(report.text())
    return any("no CTA barrier" in p for _, p in report.problems), report.text()


def catch(fault: str, seconds: float, trials_per_variant: int = 20,
          variants: Sequence[Variant] = VARIANTS) -> list[StressResult]:
    """Variants in turn, each until the first lost sum, until one catches ``fault`` or time runs out."""
    out: list[StressResult] = []
    t0 = time.perf_counter()
    for v in variants:
        left = seconds - (time.perf_counter() - t0)
        if left <= 0:
            break
        out.append(run_stress(v, (fault,), trials=trials_per_variant, stop_at_first=True, seconds=left))
        if out[-1].lost_runs:
            break
    return out
