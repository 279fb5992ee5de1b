"""Interleaved timing of two configs in one process, for the performance gate and the tuner.

Rounds alternate A, B, A' and B, A, B' (the baseline A, the candidate B), each measurement over
``calls`` back-to-back calls between device synchronisations, after one untimed call of the same
function. With one order in every round, A would follow the previous round's A' (the same module)
while B always follows the other one; alternating, every measurement but the first follows the
other function, so any cost of a slot or of a switch falls on A and B alike. Both modules share one
weight storage, so where a table sits in memory cannot tell them apart either. A round counts its
outer function as sqrt(X * X') around the middle one, so drift linear over the round cancels; the
speedup is the median over adjacent rounds (one of each order) of their geometric mean, and
|ln(X / X')| is an A/A measurement of the noise at exactly that spacing. Wall-clock time around
synchronisations (not CUDA events) keeps the host-side cost of a call (autograd, launches) in the
measurement, as a training step pays it; the same code runs on the CPU with plain callables, which
is how its logic is tested.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
import traceback
from typing import Callable, Optional

import torch

from fuzz.gate.shapes import PerfShape, Workload, make_workload
from tbe.modes import FloatDtype

NOISE_FLOOR = 0.005  # differences below 0.5% are never called a slowdown (timer and launch jitter)
# a round holding a measurement this much slower than its function's median over all rounds was disturbed (another
# process, a clock change): it is left out of the speedup and the noise, and the report names it
DISTURBED = 1.5


@dataclasses.dataclass
class Entry:
    """One (shape, phase) measured under both configs: ms per call in every round."""

    shape: str
    phase: str                  # "forward" or "iteration"
    lookups: int = 0
    calls: int = 0              # calls per measurement
    base: list[float] = dataclasses.field(default_factory=list)   # A, ms per call
    cand: list[float] = dataclasses.field(default_factory=list)   # B
    again: list[float] = dataclasses.field(default_factory=list)  # the outer function once more: A' or B'
    flipped: list[bool] = dataclasses.field(default_factory=list)  # the round ran B, A, B' (else A, B, A')
    error: Optional[str] = None  # why it could not be measured (a crash of either config)
    detail: str = ""             # the traceback behind ``error``

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.cand)

    def _flipped(self, r: int) -> bool:
        return r < len(self.flipped) and self.flipped[r]

    def _baseline_round(self, r: int) -> float:
        return self.base[r] if self._flipped(r) else math.sqrt(self.base[r] * self.again[r])

    def _candidate_round(self, r: int) -> float:
        return math.sqrt(self.cand[r] * self.again[r]) if self._flipped(r) else self.cand[r]

    def _ratio(self, r: int) -> float:
        return self._baseline_round(r) / self._candidate_round(r)

    def _a_values(self, r: int) -> list[float]:
        return [self.base[r]] + ([] if self._flipped(r) else [self.again[r]])

    def _b_values(self, r: int) -> list[float]:
        return [self.cand[r]] + ([self.again[r]] if self._flipped(r) else [])

    @property
    def disturbed(self) -> list[int]:
        """Rounds with a measurement more than ``DISTURBED`` times its function's median over every round: both
        measurements of one function in one round can be hit alike (a B, A, B' round whose B and B' ran beside
        another process), which the A/A noise cannot see and which would otherwise sway two of the speedup's
        terms."""
        n = len(self.cand)
        med_a = statistics.median(v for r in range(n) for v in self._a_values(r))
        med_b = statistics.median(v for r in range(n) for v in self._b_values(r))
        return [r for r in range(n) if max(self._a_values(r)) > DISTURBED * med_a
                or max(self._b_values(r)) > DISTURBED * med_b]

    def _rounds(self) -> list[int]:
        """The rounds the statistics use: all but the disturbed ones, unless fewer than two would be left."""
        bad = set(self.disturbed)
        kept = [r for r in range(len(self.cand)) if r not in bad]
        return kept if len(kept) >= 2 else list(range(len(self.cand)))

    @property
    def base_ms(self) -> float:
        """Median of the baseline's times over the rounds the speedup uses."""
        return statistics.median(self._baseline_round(r) for r in self._rounds())

    @property
    def cand_ms(self) -> float:
        return statistics.median(self._candidate_round(r) for r in self._rounds())

    @property
    def speedup(self) -> float:
        """Baseline time / candidate time (> 1: the candidate is faster): the median over adjacent rounds of
        their geometric mean, so each term holds one round of either order; disturbed rounds are left out."""
        rounds = self._rounds()
        if len(rounds) == 1:
            return self._ratio(rounds[0])
        return statistics.median(math.sqrt(self._ratio(r) * self._ratio(q)) for r, q in zip(rounds, rounds[1:]))

    @property
    def noise(self) -> float:
        """Largest A/A disagreement of a round, |ln(X / X')| of its outer function, floored at NOISE_FLOOR."""
        rounds = self._rounds()
        outer = [self.cand[r] if self._flipped(r) else self.base[r] for r in rounds]
        return max([NOISE_FLOOR] + [abs(math.log(x / self.again[r])) for x, r in zip(outer, rounds)])

    @property
    def slower(self) -> bool:
        """The candidate is slower by more than this entry's measured noise."""
        return self.ok and math.log(self.speedup) < -self.noise

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        if self.ok:
            d.update(base_ms=self.base_ms, cand_ms=self.cand_ms, speedup=self.speedup, noise=self.noise,
                     slower=self.slower, disturbed=self.disturbed)
        return d


def interleaved(fa: Callable[[], object], fb: Callable[[], object], rounds: int, calls: int,
                sync: Callable[[], object]) -> tuple[list[float], list[float], list[float], list[bool]]:
    """(A, B, the outer function again, flipped) ms per call for each of ``rounds`` rounds of ``calls`` calls
    each; odd rounds run B, A, B'."""
    def measure(fn) -> float:
        fn()  # untimed: a measurement starts after a call of its own function
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        return (time.perf_counter() - t0) * 1e3 / calls

    a, b, again, flipped = [], [], [], []
    for r in range(rounds):
        flipped.append(r % 2 == 1)
        if flipped[-1]:
            b.append(measure(fb))
            a.append(measure(fa))
            again.append(measure(fb))
        else:
            a.append(measure(fa))
            b.append(measure(fb))
            again.append(measure(fa))
    return a, b, again, flipped


def calls_for(fn: Callable[[], object], sync: Callable[[], object], target_ms: float, cap: int = 200) -> int:
    """Calls per measurement so one measurement lasts about ``target_ms`` (one timed call decides)."""
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    ms = (time.perf_counter() - t0) * 1e3
    return max(1, min(cap, math.ceil(target_ms / max(ms, 1e-3))))


def measure_pair(shape: str, phase: str, lookups: int, fa, fb, rounds: int, target_ms: float,
                 sync: Callable[[], object]) -> Entry:
    """Warm both (compiles), size the measurement on the baseline, time interleaved; a crash is recorded."""
    entry = Entry(shape, phase, lookups)
    for who, fn in (("baseline", fa), ("candidate", fb), ("baseline", fa), ("candidate", fb)):
        try:
            fn()
        except Exception as e:  # noqa: BLE001  (a config that crashes or cannot launch is a result)
            entry.error = f"the {who} raised {_one_line(e)}"
            entry.detail = traceback.format_exc(limit=4)
            return entry
    entry.calls = calls_for(fa, sync, target_ms)
    entry.base, entry.cand, entry.again, entry.flipped = interleaved(fa, fb, rounds, entry.calls, sync)
    return entry


def _one_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return text[0][:300] if text else type(e).__name__


# ----------------------------------------------------------------------------- the TBE on a shape
def build_module(shape: PerfShape, config, device, bounds_check: str = "none"):
    """A TritonTBE for ``shape`` whose weights are drawn on the device (a CPU draw of 20M rows is slow)."""
    return build_tables(shape.specs, shape.optimizer, FloatDtype(shape.weights_dtype).torch, config, device,
                        bounds_check, output_dtype=FloatDtype(shape.output_dtype).torch)


def build_tables(tables, optimizer: str, weights_dtype: torch.dtype, config, device, bounds_check: str = "none",
                 output_dtype: torch.dtype = torch.float32):
    """A TritonTBE over ``tables`` ((rows, D) each), its weights drawn on the device as ``build_module``'s are."""
    from tbe import TritonTBE

    class _DeviceInit(TritonTBE):
        def reset_weights(self, seed: int = 0) -> None:
            with torch.no_grad():
                self.weights.uniform_(-0.01, 0.01)
                self.momentum.zero_()

    return _DeviceInit(list(tables), optimizer=optimizer, weights_dtype=weights_dtype, output_dtype=output_dtype,
                       bounds_check=bounds_check, config=config, device=device, learning_rate=0.01, eps=1e-8)


def phase_fns(module, wl: Workload) -> dict[str, Callable[[], object]]:
    """The two timed phases of a module on a workload: forward alone and a full training iteration."""
    def forward():
        with torch.no_grad():
            return module(wl.indices, wl.offsets, wl.per_sample_weights)

    def iteration():
        module(wl.indices, wl.offsets, wl.per_sample_weights).backward(wl.grad)

    return {"forward": forward, "iteration": iteration}


def device_sync(device) -> Callable[[], object]:
    device = torch.device(device)
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


class BaselineCache:
    """Keeps each shape's workload and baseline module between trials (the tuner times many candidates)."""

    def __init__(self, config, device) -> None:
        self.config, self.device = config, device
        self._items: dict[str, tuple[Workload, object]] = {}

    def get(self, shape: PerfShape):
        if shape.name not in self._items:
            wl = make_workload(shape, self.device)
            self._items[shape.name] = (wl, build_module(shape, self.config, self.device))
        return self._items[shape.name]

    def clear(self) -> None:
        self._items.clear()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def time_shape(shape: PerfShape, baseline, candidate, device, rounds: int, target_ms: float,
               cache: Optional[BaselineCache] = None, phases=("forward", "iteration")) -> list[Entry]:
    """Entries for ``phases`` of one shape, candidate against baseline, on the same batch and the same weight
    storage (the candidate's module reads and updates the baseline's table and optimizer state)."""
    sync = device_sync(device)
    if cache is not None:
        wl, base = cache.get(shape)
    else:
        wl, base = make_workload(shape, device), build_module(shape, baseline, device)
    try:
        cand = build_module(shape, candidate, device)
    except Exception as e:  # noqa: BLE001
        return [Entry(shape.name, p, shape.lookups, error=f"the candidate's module failed to build: {_one_line(e)}")
                for p in phases]
    cand.weights, cand.momentum = base.weights, base.momentum  # one storage: its placement is no difference
    fa, fb = phase_fns(base, wl), phase_fns(cand, wl)
    out = [measure_pair(shape.name, p, shape.lookups, fa[p], fb[p], rounds, target_ms, sync) for p in phases]
    del cand
    if cache is None:
        del base, wl
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return out


# ----------------------------------------------------------------------------- another SUT on a shape
def sut_instance(sut: str, shape: PerfShape, config, device, bounds_check: str = "none"):
    """An instance of ``sut`` (an address) for ``shape``, its tables drawn on the device as ``build_module``'s are."""
    return sut_tables(sut, shape.specs, shape.optimizer, FloatDtype(shape.weights_dtype).torch, config, bounds_check,
                      output_dtype=FloatDtype(shape.output_dtype).torch)


def sut_tables(sut: str, tables, optimizer: str, weights_dtype: torch.dtype, config, bounds_check: str = "none",
               output_dtype: torch.dtype = torch.float32):
    """An instance of ``sut`` over ``tables`` ((rows, D) each), its weights drawn on its device as
    ``build_tables``' are."""
    from fuzz.sut import TBEParams, get
    from tbe.modes import BoundsCheckMode, Optimizer, Pooling

    params = TBEParams(tuple(tables), Optimizer(optimizer), 0.01, 1e-8, weights_dtype, output_dtype, Pooling.SUM,
                       BoundsCheckMode(bounds_check), config=config if get(sut).capabilities.kernel_config else None)
    instance = get(sut).build(params)
    with torch.no_grad():
        weights = instance.packed_weights() if hasattr(instance, "packed_weights") else None
        if weights is not None:
            weights.uniform_(-0.01, 0.01)
    return instance


def instance_fns(instance, wl: Workload) -> dict[str, Callable[[], object]]:
    """The two timed phases of a SUT instance: forward alone, and forward with its backward (the update)."""
    def forward():
        with torch.no_grad():
            return instance.forward(wl.indices, wl.offsets, wl.per_sample_weights)

    def iteration():
        instance.forward(wl.indices, wl.offsets, wl.per_sample_weights)
        instance.backward(wl.grad)

    return {"forward": forward, "iteration": iteration}


def time_shape_suts(shape: PerfShape, suts: tuple[str, str], configs: tuple, device, rounds: int, target_ms: float,
                    phases=("forward", "iteration")) -> list[Entry]:
    """``time_shape`` for two SUT addresses (two sources of one SUT, or one SUT under two configs): each side
    owns its table (a SUT's weights live where it keeps them), drawn alike, on the same batch."""
    sync = device_sync(device)
    wl = make_workload(shape, device)
    built = []
    for who, sut, config in zip(("baseline", "candidate"), suts, configs):
        try:
            built.append(sut_instance(sut, shape, config, device))
        except Exception as e:  # noqa: BLE001  (a side that cannot build is a result)
            return [Entry(shape.name, p, shape.lookups, error=f"the {who}'s instance failed to build: {_one_line(e)}")
                    for p in phases]
    fa, fb = (instance_fns(i, wl) for i in built)
    out = [measure_pair(shape.name, p, shape.lookups, fa[p], fb[p], rounds, target_ms, sync) for p in phases]
    del built, wl
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out
