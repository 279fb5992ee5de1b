"""A planted fault must not rebuild kernels whose code it does not change, and the warm-up's dry run
counts specializations per kernel without compiling.

Launch keys come from ``fuzz.compile.specializations.record(dry_run=True)`` (no kernel runs), over a
few cases per config of a campaign (every override profile, every kernel reached), under the
default config and under each fault's self-test config. ``TOUCHES`` is read off the kernel sources:
the kernels that take a fault's constexpr (or a value a fault changes).
"""

from __future__ import annotations

import json

import pytest

from fuzz.compile.specializations import record
from fuzz.compile.warmup import exercise
from fuzz.selftest.detectors import campaign_config
from strategies.case import CaseSpec, HotRow
from strategies.config_space import campaign_configs
from tbe import KernelConfig, faults

TOUCHES = {
    "fwd_skip_last_id": {"_forward_kernel"},
    "fwd_mean_wrong_length": {"_forward_kernel", "_small_table_kernel"},
    "unstable_weighted_pairing": set(),  # host-side: the order of the per-sample weights
    "int32_linearize_past_limit": set(),  # host-side: int32 linear ids, which small layouts use anyway
    "long_threshold_off_by_one": {"_classify_kernel"},
    "skip_last_chunk_update": {"_chunk_kernel"},
    "accumulate_in_weight_dtype": {"_chunk_kernel", "_short_kernel", "_short_rows_kernel"},
    "no_fence": {"_chunk_kernel"},
    "no_barrier": {"_chunk_kernel"},
    "drop_chunk_past_4096": {"_chunk_kernel"},
    "zero_update_past_2p20": {"_chunk_kernel"},
    "bounds_check_off_by_one": {"_check_ids_kernel", "_forward_kernel", "_small_table_kernel"},  # fused check
}

# forces int32 linear ids where a profile asks for int64: fewer variants of the backward kernels, none new
NARROWS = {"int32_linearize_past_limit"}

# (weights, output, index dtype, weighted, pooling, optimizer, bounds check)
_VARIANTS = (
    ("fp32", "fp32", "int64", False, "sum", "exact_sgd", "warning"),
    ("fp16", "fp32", "int32", True, "mean", "exact_rowwise_adagrad", "fatal"),
    ("bf16", "fp16", "int64", True, "mean", "exact_sgd", "ignore"),
)


def _cases(config: KernelConfig) -> list[CaseSpec]:
    """A few cases of ``config`` that reach each of its kernels: every dimension bucket and a wider row, a
    hot row long enough for its long tiers, and (where the config has it) a small table."""
    tables = tuple((4, b) for b in config.dim_buckets) + ((4, config.dim_buckets[-1] + 1),)
    hot = (HotRow(0, 0, max(config.long_run_threshold, config.fused_long_min_lookups)),)
    out = [CaseSpec(tables=tables, batch_size=2, weights_dtype=w, output_dtype=o, index_dtype=i, weighted=wt,
                    pooling=p, optimizer=opt, bounds_check=mode, length_profile="fixed", max_length=2, seed=1,
                    hot_rows=hot) for w, o, i, wt, p, opt, mode in _VARIANTS]
    if config.small_table_path:
        out += [CaseSpec(tables=((config.small_table_max_rows, config.small_table_max_dim),), batch_size=1,
                         pooling=p, weights_dtype="fp16", output_dtype="fp32", length_profile="fixed",
                         max_length=max(1, config.small_table_min_pooling), seed=1) for p in ("sum", "mean")]
    return out


def _keys_by_kernel(base: KernelConfig) -> dict[str, set]:
    with faults.allow(), record(dry_run=True) as keys:
        for config in campaign_configs(base):
            for spec in _cases(config):
                exercise(spec, config)
    out: dict[str, set] = {}
    for name, key in keys:
        out.setdefault(name, set()).add(key)
    return out


@pytest.fixture(scope="module")
def default_keys() -> dict[str, set]:
    return _keys_by_kernel(KernelConfig())


def test_the_table_names_every_fault():
    assert set(TOUCHES) == set(faults.KNOWN)


@pytest.mark.parametrize("fault", sorted(faults.KNOWN))
def test_a_fault_config_rebuilds_only_the_kernels_it_changes(fault, default_keys):
    with faults.allow():
        keys = _keys_by_kernel(campaign_config(fault))
    assert set(keys) == set(default_keys), "the fault config reaches other kernels"
    rebuilt = {name for name in keys if keys[name] - default_keys[name]}
    assert rebuilt == TOUCHES[fault], f"{fault}: new specializations of {sorted(rebuilt)}"
    for name in set(keys) - TOUCHES[fault]:  # every other kernel: the very same specializations
        if fault in NARROWS:
            assert keys[name] <= default_keys[name], name
        else:
            assert keys[name] == default_keys[name], name


def test_a_changed_constexpr_is_seen(default_keys):
    """The comparison can fail: a config whose backward gathers differ rebuilds the backward kernels."""
    keys = _keys_by_kernel(KernelConfig(bwd_long_gather=4, bwd_short_gather_weighted=8))
    assert keys["_chunk_kernel"] - default_keys["_chunk_kernel"]
    assert keys["_forward_kernel"] == default_keys["_forward_kernel"]
