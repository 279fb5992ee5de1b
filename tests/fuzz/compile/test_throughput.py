"""Throughput machinery: warm-up coverage, compile counting, the FBGEMM sample, the reference
bounds fast path, GPU pinning of xdist workers, progress and pictures.

The warm-up's coverage is checked on the CPU: ``fuzz.compile.specializations`` works out, without
running a kernel, which specializations the warm-up cases reach and which ones campaign
draws reach; every one a campaign reaches must be among the warm-up's.
"""

from __future__ import annotations

import itertools

import io

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.judge import fbgemm_sample

from fuzz.execution import gpu_pin
from cases import CaseSpec, materialize_bad, tensors
from fuzz.compile.watch import INTERPRETER_NOTE, CompileCounts, watch
from fuzz.profiles import MAX_LOOKUPS
from strategies.space import campaign_cases
from fuzz.compile.specializations import record
from strategies.tour import tour
from fuzz.compile.warmup import exercise, tour_groups, warm_groups
from oracles import fbgemm_cpu
from oracles.reference_bounds import _walk, reference_bounds_check
from strategies.bad_inputs import bad_batch_specs
from strategies.configs import NAMED
from fuzz.sut import build_module
from tbe import KernelConfig
from tbe.backend import INTERPRETED
from tbe.modes import BoundsCheckMode


def _warm_keys(config: KernelConfig) -> set:
    from strategies.config_space import campaign_configs

    with record(dry_run=True) as keys:
        for group in warm_groups(campaign_configs(config)) + tour_groups(config):
            for c in group:
                exercise(c.spec, c.config, c.backward)
    return keys


def _launch_keys(case, cfg) -> set:
    """What one case launches (``exercise`` runs it as the campaign's checks do); none if it cannot be built."""
    try:
        tensors(case, steps=False, weights=False)
    except ValueError:  # the case does not materialize under this config
        return set()
    with record(dry_run=True) as keys:
        exercise(case, cfg)
    return keys


def _campaign_keys(config: KernelConfig, examples: int) -> set:
    """The launches of a campaign's opening tour (at the CPU's budget) and of ``examples`` drawn cases."""
    from cases import split_draw

    found: set = set()
    for drawn in tour(config, MAX_LOOKUPS):
        found.update(_launch_keys(*split_draw(drawn, config)[:2]))

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(campaign_cases(config, MAX_LOOKUPS))
    def draw(drawn):
        case, cfg, _ = split_draw(drawn, config)  # with the config overrides the campaign drew
        found.update(_launch_keys(case, cfg))

    draw()
    return found


# nightly: each config dry-runs about 46,000 warm-up specializations' cases (about 4 minutes on two cores);
# test_one_and_many_bucket_layouts_find_their_short_tier_warmed keeps the newest part of it in CI
@pytest.mark.nightly
@pytest.mark.parametrize("name", ["default", "fused_bounds"])
def test_warmup_reaches_every_specialization_a_campaign_draws(name):
    config = NAMED[name]
    warm = _warm_keys(config)
    drawn = _campaign_keys(config, 40)
    missing = sorted(drawn - warm)
    assert drawn and not missing, f"{len(missing)} specializations a campaign reaches are not warmed: {missing[:3]}"


def _group_warm_keys(config: KernelConfig, w: str, o: str, idx: str) -> set:
    """The launch keys the warm-up builds for one unweighted (weights, output, index dtype) group, dry run."""
    from fuzz.compile.warmup import group_cases

    with record(dry_run=True) as warm:
        for c in group_cases(config, w, o, idx, False):
            exercise(c.spec, c.config, c.backward)
    return warm


def _input_form_keys(base: CaseSpec, config: KernelConfig) -> set:
    """The launch keys of ``base`` in the input forms a campaign draws, dry run: as it is, with a second feature
    reading its first table, and that with a batch size per feature (VBE)."""
    import dataclasses

    shared = dataclasses.replace(base, feature_table_map=(0,) + tuple(range(len(base.tables))))
    b = base.batch_size
    vbe = dataclasses.replace(shared, batch_size_per_feature=(b, 1) + (b,) * (len(base.tables) - 1))
    keys: set = set()
    for spec in (base, shared, vbe):
        with record(dry_run=True) as found:
            exercise(spec, config)
        keys |= found
    return keys


def test_one_and_many_bucket_layouts_find_their_short_tier_warmed():
    """Layouts as a campaign draws them (other rows, batch and lengths than the warm-up's) with one dimension bucket
    (each bucket, rows aligned to 16-byte vectors and not, the wide row) and with several, under each pooling,
    optimizer and input form: the short-tier kernels they launch are among those the warm-up of their dtype group
    builds. A one-bucket module skips the search for its bucket's runs (a constexpr), so both kinds need a build."""
    from tbe.modes import Optimizer, Pooling

    config = KernelConfig()
    warm = _group_warm_keys(config, "fp16", "fp32", "int32")
    buckets = [b for b in config.dim_buckets if b >= 4]
    layouts = ([((9, b),) for b in buckets] + [((9, b // 2 + 1),) for b in buckets]
               + [((9, buckets[-1] + 3),), ((9, buckets[0] // 2 + 1), (7, buckets[-1]))])
    short = set()
    for tables, pooling, opt in itertools.product(layouts, Pooling, Optimizer):
        base = CaseSpec(tables=tables, batch_size=3, pooling=pooling, optimizer=opt, weights_dtype="fp16",
                        output_dtype="fp32", index_dtype="int32", max_length=3, seed=5)
        short |= {k for k in _input_form_keys(base, config) if k[0].startswith("_short")}
    assert short and not short - warm, f"short-tier builds the warm-up misses: {sorted(short - warm)[:2]}"


def test_layouts_past_each_narrow_key_find_their_transpose_warmed():
    """Layouts as a campaign draws them whose rows in all fit uint8 sort keys, pass 256 (int16 keys) and pass
    32,768 (int32), under each index dtype and input form: the transpose kernels they launch are among those the
    warm-up of their dtype group builds (its matrix is tiny tables, whose keys are all uint8)."""
    config = KernelConfig()
    kernels = ("_linearize_kernel", "_count_runs_kernel", "_write_runs_kernel")
    for idx in ("int32", "int64"):
        warm = _group_warm_keys(config, "fp32", "fp32", idx)
        drawn = set()
        for tables in (((9, 8),), ((200, 8), (57, 16)), ((300, 4),), ((30000, 8), (2769, 32)), ((70000, 16),)):
            base = CaseSpec(tables=tables, batch_size=3, index_dtype=idx, max_length=3, seed=5)
            drawn |= {k for k in _input_form_keys(base, config) if k[0] in kernels}
        key_dtypes = {dict(k[1]).get("key_ptr", dict(k[1]).get("sorted_ptr"))[1] for k in drawn}
        assert key_dtypes == {"torch.uint8", "torch.int16", "torch.int32"}, key_dtypes
        assert not drawn - warm, f"transpose builds the warm-up misses ({idx} ids): {sorted(drawn - warm)[:2]}"


def test_warmup_misses_are_seen():
    """The coverage check can fail: a warm-up without the bf16 groups misses bf16 launches."""
    config = KernelConfig()
    with record(dry_run=True) as warm:
        for group in warm_groups([config]):
            for c in group[:3]:
                if c.spec.weights_dtype == "fp32" and c.spec.output_dtype == "fp32":
                    exercise(c.spec, c.config, c.backward)
    spec = CaseSpec(tables=((9, 16),), batch_size=2, weights_dtype="bf16", max_length=3)
    with record(dry_run=True) as drawn:
        exercise(spec, config)
    assert drawn - warm


def test_sizes_do_not_make_new_specializations():
    """Batch size, lookups and row counts are run-time values: two shapes, one set of kernels."""
    a = CaseSpec(tables=((9, 16), (50, 40)), batch_size=1, max_length=1, weighted=True, pooling="mean")
    b = CaseSpec(tables=((33, 16), (7, 40)), batch_size=32, max_length=17, weighted=True, pooling="mean", seed=5)
    keys = []
    for spec in (a, b):
        with record(dry_run=True) as k:
            exercise(spec, KernelConfig())
        keys.append(k)
    assert keys[0] == keys[1]


def test_compile_watch_on_the_interpreter_reports_no_number():
    with watch() as counts:
        exercise(CaseSpec(tables=((5, 8),), batch_size=2, max_length=2), KernelConfig())
    if INTERPRETED:
        assert counts.text() == INTERPRETER_NOTE and counts.to_dict()["interpreted"] is True
    c = CompileCounts(compiled=2, loaded=5, interpreted=False)
    c.by_kernel["_forward_kernel"] = 2
    assert "2 compiled, 5 loaded" in c.text() and "_forward_kernel x2" in c.text()


# ----------------------------------------------------------------------------- oracles
@settings(max_examples=60, derandomize=True, database=None, deadline=None)
@given(bad_batch_specs(), st.sampled_from(list(BoundsCheckMode)), st.booleans())
def test_reference_bounds_fast_path_equals_the_walk(bad, mode, compat):
    b = materialize_bad(bad)
    rows = [e for e, _ in bad.tables]
    fast = reference_bounds_check(rows, b.indices, b.offsets, mode, compat)
    slow = _walk(rows, b.indices, b.offsets, mode, compat, [(b.offsets.numel() - 1) // len(rows)] * len(rows))
    assert torch.equal(fast.indices, slow.indices) and torch.equal(fast.offsets, slow.offsets)
    assert (fast.warnings, fast.fatal, fast.first_bad) == (slow.warnings, slow.fatal, slow.first_bad)


def _sampled_spec(**kw) -> CaseSpec:
    for seed in range(100):
        spec = CaseSpec(seed=seed, **kw)
        if fbgemm_sample.sampled(spec):
            return spec
    raise AssertionError("no sampled seed in 100")


@pytest.mark.skipif(not fbgemm_cpu.available(), reason="fbgemm_gpu CPU ops did not load")
def test_fbgemm_sample_checks_and_catches_a_disagreement(monkeypatch):
    spec = _sampled_spec(tables=((20, 8), (9, 4)), batch_size=3, max_length=4, weighted=True,
                         optimizer="exact_rowwise_adagrad", learning_rate=0.5)
    t = tensors(spec)
    status, reports = fbgemm_sample.check(spec, t)
    assert status == fbgemm_sample.CHECKED and reports and all(r.ok for r in reports), [str(r) for r in reports]
    original = fbgemm_cpu.FbgemmTBE.step
    monkeypatch.setattr(fbgemm_cpu.FbgemmTBE, "step",
                        lambda self, *a: (lambda o: (o[0] + 1e-3, o[1]))(original(self, *a)))
    _, reports = fbgemm_sample.check(spec, t)
    assert any(not r.ok and "fbgemm forward" in r.what for r in reports)


def test_fbgemm_sample_rate_and_applicability():
    specs = [CaseSpec(tables=((5, 8),), batch_size=2, seed=s) for s in range(400)]
    rate = sum(map(fbgemm_sample.sampled, specs)) / len(specs)
    assert abs(rate - 1 / fbgemm_sample.SAMPLE) < 0.07
    assert fbgemm_sample.not_applicable(CaseSpec(tables=((5, 6),), batch_size=2), 10) == "n/a: dtype or D"
    assert fbgemm_sample.not_applicable(CaseSpec(tables=((5, 8),), batch_size=2, weights_dtype="bf16"), 10)


def test_fbgemm_sample_is_bounded_by_the_columns_its_cpu_check_covers(monkeypatch):
    """The sample's size cap counts lookups x the widest D x steps (what FBGEMM's FP64 check on the CPU costs):
    two steps of 10 lookups on a 16-wide table are 320 columns, one past it is too many."""
    spec = CaseSpec(tables=((10, 8), (10, 16)), batch_size=2, steps=2)
    monkeypatch.setattr(fbgemm_sample, "MAX_COLUMNS", 320)
    assert fbgemm_sample.not_applicable(spec, 10) is None
    assert fbgemm_sample.not_applicable(spec, 11) == fbgemm_sample.TOO_LARGE
    assert fbgemm_sample.not_applicable(CaseSpec(tables=((10, 8), (10, 16)), batch_size=2), 20) is None


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(campaign_cases(KernelConfig(), 4000))
def test_every_cpu_campaign_draw_fits_fbgemms_sample_cap(drawn):
    """A CPU campaign (cases of <= 4,000 lookups) keeps FBGEMM's sample on every draw it applies to: the cap
    only takes it off the GPU's large cases, whose CPU check took seconds."""
    case = drawn.case
    n = int(tensors(case, weights=False).indices.numel())
    assert fbgemm_sample.columns(case, n) <= fbgemm_sample.MAX_COLUMNS


# ----------------------------------------------------------------------------- pinning, progress, pictures
def test_xdist_workers_are_pinned_round_robin():
    assert gpu_pin.pick("gw0", ["0", "1"]) == "0" and gpu_pin.pick("gw3", ["0", "1"]) == "1"
    assert gpu_pin.pick(None, ["0"]) is None and gpu_pin.pick("gw1", []) is None
    env = {"PYTEST_XDIST_WORKER": "gw2", "CUDA_VISIBLE_DEVICES": "4,5,6"}
    assert gpu_pin.pin_xdist_worker(env) == "6" and env["CUDA_VISIBLE_DEVICES"] == "6"
    env = {"CUDA_VISIBLE_DEVICES": "4,5"}
    assert gpu_pin.pin_xdist_worker(env) is None and env["CUDA_VISIBLE_DEVICES"] == "4,5"


def test_progress_line_draws_only_when_asked():
    from fuzz.campaign import CampaignResult
    from fuzz.budgets import get
    from fuzz.campaign import LiveProgress

    res = CampaignResult(KernelConfig(), get("quick"), 0, examples=3, lookups=300)
    res.max_ratio["forward vs fp64"] = 0.5
    quiet = io.StringIO()
    LiveProgress(10, stream=quiet)(res, None)  # not a terminal, not asked: nothing drawn
    assert quiet.getvalue() == ""
    shown = io.StringIO()
    live = LiveProgress(10, enabled=True, stream=shown)
    live(res, None)
    live.close()
    assert "3 examples" in shown.getvalue() and "worst ratio 0.5" in shown.getvalue()


def test_pictures_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    from fuzz.campaign import pictures
    from fuzz.judge import run_case

    col = pictures.Collector()
    spec = CaseSpec(tables=((20, 8),), batch_size=2, max_length=3, hot_rows=())
    result = run_case(spec, NAMED["small"])
    col(None, result)
    written, why = pictures.write(col, NAMED["small"], tmp_path)
    assert why is None and [p.name for p in written] == list(pictures.FILES)
    assert all(p.stat().st_size > 5000 and p.read_bytes()[:4] == b"\x89PNG" for p in written)


# ----------------------------------------------------------------------------- GPU only
@pytest.mark.gpu
def test_gpu_reference_runs_on_the_device_and_matches_the_cpu():
    """float64 on CUDA agrees with float64 on the CPU far below every bound (2^-45 slack)."""
    from oracles.reference_backward import reference_backward
    from cases import materialize

    spec = CaseSpec(tables=((50, 12), (9, 33)), batch_size=8, max_length=9, weighted=True, pooling="mean",
                    optimizer="exact_rowwise_adagrad", seed=3)
    case = materialize(spec)
    m = build_module(spec)
    args = (m.layout, m.weights.detach(), m.momentum.detach(), case.indices, case.offsets, case.per_sample_weights,
            spec.batch_size, m.pooling, m.optimizer, 0.5, 1e-4, case.grad_outputs[0])
    on_gpu = reference_backward(*[a.cuda() if isinstance(a, torch.Tensor) else a for a in args])
    on_cpu = reference_backward(*[a.cpu() if isinstance(a, torch.Tensor) else a for a in args])
    for g, c in zip(on_gpu.tables, on_cpu.tables):
        assert g.w_new.device.type == "cuda"
        assert torch.allclose(g.w_new.cpu(), c.w_new, rtol=2.0**-45, atol=2.0**-60)


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_search_compiles_nothing_after_warmup():
    from fuzz.budgets import Budget
    from fuzz.campaign import CampaignOptions, CampaignRunner
    from fuzz.compile import warm_campaigns

    warm = warm_campaigns([KernelConfig()])  # what `tbe-fuzz run` warms: the config and its profiles
    assert not warm.errors, warm.errors[:3]
    res = CampaignRunner(KernelConfig(), Budget("g", 20.0, 0.0, 10**6, 10_000), 1, CampaignOptions(
        artifacts_dir=None)).run()
    assert res.ok and res.examples > 0
    assert res.compiles.compiled == 0, res.compiles.text()
