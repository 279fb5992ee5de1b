"""A planted fault must not rebuild kernels whose code it does not change, and the warm-up's dry run
counts specializations per kernel without compiling.

Launch keys come from ``fuzz.compile.dry_run.keys_by_kernel`` (no kernel runs): a few cases per config
of a campaign (every override profile, every kernel reached), under the default config and under each
fault's self-test config. ``TOUCHES`` is read off the kernel sources:
the kernels that take a fault's constexpr (or a value a fault changes).
"""

from __future__ import annotations

import json

import pytest

from fuzz.compile import keys_by_kernel as _keys_by_kernel
from fuzz.selftest import campaign_config
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
    "fwd_drop_cols_past_1024": {"_forward_kernel"},
    "hang_narrow_long_run": {"_chunk_kernel"},
    "lane_mask_narrow": {"_short_rows_kernel"},
    "momentum_low_precision": {"_short_rows_kernel"},
    "runs_per_feature": {"_count_runs_kernel", "_write_runs_kernel"},
    "vbe_last_feature_offset": {"_forward_kernel"},  # read under VBE alone, but its bit is in every launch's mask
    # the stochastic-rounding profiles' stores: the short tier's, the fused long tier's, the apply kernel's and the
    # small-table backward's
    "biased_stochastic_rounding": {"_short_kernel", "_short_rows_kernel", "_chunk_kernel", "_apply_kernel",
                                   "_small_table_apply_kernel"},
    "short_rows_one_pass": {"_short_rows_kernel"},
    "apply_drops_partial_group": {"_apply_kernel"},
    "fused_workspace_uninitialized": set(),  # host-side: the workspace is not zeroed
}

# forces int32 linear ids where a profile asks for int64: fewer variants of the backward kernels, none new
NARROWS = {"int32_linearize_past_limit"}

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


def test_warmup_dry_run_prints_the_count_per_kernel(monkeypatch, capsys):
    """``tbe-fuzz warmup --dry-run --faults --json``, on the first cases of every warm-up unit (the whole
    matrix takes minutes on a CPU)."""
    from fuzz.cli import main
    from fuzz.compile import dry_run

    whole = dry_run.unit_groups
    monkeypatch.setattr(dry_run, "unit_groups", lambda unit: [whole(unit)[0][:2]])
    assert main(["warmup", "--dry-run", "--faults", "--json", "--processes", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    counts = out["specializations"]
    assert {"_forward_kernel", "_chunk_kernel", "_short_rows_kernel"} <= set(counts)
    assert all(n > 0 for n in counts.values()) and out["total"] == sum(counts.values())
    assert out["compiled"].startswith("not run")
    bases = {b["base"]: b for b in out["bases"]}
    assert set(bases) == {"default"} | {f"default + fault {f}" for f in faults.KNOWN}
    assert bases["default"]["new"] == 0
    skip = bases["default + fault fwd_skip_last_id"]
    assert skip["new"] > 0 and set(skip["new_by_kernel"]) == {"_forward_kernel"}
    assert bases["default + fault unstable_weighted_pairing"]["new"] == 0
