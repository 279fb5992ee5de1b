"""The config gate: a cascade of four levels (static checks, correctness on shared and targeted cases,
oracle agreement, timing on perf shapes) that decides whether a candidate KernelConfig may replace the
baseline, and its report."""

from fuzz.lazy import face

__all__, __getattr__, __dir__ = face(__name__, {
    ".cascade": ("CascadeOptions", "CascadeResult", "Level", "run_cascade"),
    ".correctness": ("GateResult", "run_gate"),
    ".perf": ("DEFAULT_GAMMA", "gpu_unavailable"),
    ".shapes": ("PerfShape", "PRESETS", "load_shapes"),
    ".timing": ("BaselineCache", "time_shape"),
})
