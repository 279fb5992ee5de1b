"""Named KernelConfigs the adversarial strategies draw from, so every tier and path runs on CPU.

With the default thresholds (256) a long run needs 256+ lookups, which the interpreter can
afford only a few of; the ``small`` configs move threshold and chunk down so a CPU-sized
batch reaches multi-chunk runs, partial last chunks and the fused tier. Each config names
the path it forces; a planted fault is added on top (``named_config(name, faults)``).
"""

from __future__ import annotations

from hypothesis import strategies as st

from tbe import KernelConfig

BASE = KernelConfig()
SMALL = BASE.replace(long_run_threshold=8, chunk_size=4)

NAMED: dict[str, KernelConfig] = {
    "default": BASE,                                              # shipped thresholds, grad-accum long tier
    "small": SMALL,                                               # cheap long runs: grad-accum tier
    "small_fused": SMALL.replace(fused_long_tier=True),           # fused long tier (fence + countdown)
    # threshold not a multiple of the chunk; one short run per program in every bucket (the gather kernel; defaults
    # run two side by side)
    "uneven": BASE.replace(long_run_threshold=12, chunk_size=5, bwd_short_runs_per_program=1,
                           bwd_short_bucket_runs=()),
    "default_fused": BASE.replace(fused_long_tier=True),
    "one_chunk": SMALL.replace(chunk_size=16, fused_long_tier=True),  # long runs of a single chunk: countdown 1
    "narrow": SMALL.replace(dim_buckets=(4,)),                    # every row wider than its block: column loops
    "fused_bounds": SMALL.replace(fused_bounds_check=True),       # ids checked inside the forward kernel
    "hoisted": SMALL.replace(hoist_transpose=True, fused_long_tier=True),  # transpose sorted in the forward
    "short_rows": SMALL.replace(bwd_short_runs_per_program=4),    # short runs side by side in one tile
    # one program per SM (2 on the interpreter): the grid-stride loops take a second pass on a CPU-sized batch
    "strided": SMALL.replace(bwd_short_runs_per_program=4, short_grid_multiplier=1, long_grid_multiplier=1),
}


def named_config(name: str, faults: tuple[str, ...] = ()) -> KernelConfig:
    """The config called ``name``, with ``faults`` planted (refused unless faults are allowed)."""
    if name not in NAMED:
        raise ValueError(f"unknown config name {name!r} (known: {sorted(NAMED)})")
    config = NAMED[name]
    return config.replace(faults=tuple(faults)) if faults else config


def config_names(names: tuple[str, ...] = tuple(NAMED)) -> st.SearchStrategy[str]:
    """Config names, shrinking toward the first (``default``)."""
    return st.sampled_from(list(names))
