"""Forward differential tests: the Triton forward against the FP64 reference and FBGEMM's CPU TBE."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz.profiles import MAX_LOOKUPS, examples
from oracles import fbgemm_cpu
from oracles.checks import check_forward
from oracles.findings import fbgemm_forward_difference
from cases import CaseSpec, materialize
from fuzz.sut import build_module, device_batch
from strategies.specs import case_specs
from tbe import KernelConfig
from tbe.modes import Optimizer, Pooling

pytestmark = pytest.mark.fuzz


def run_forward(spec: CaseSpec, config: KernelConfig | None = None):
    case = materialize(spec)
    module = build_module(spec, config)
    indices, offsets, psw = device_batch(case, module.device)
    with torch.no_grad():
        out = module(indices, offsets, psw)
    return case, module, (indices, offsets, psw), out


def assert_matches_reference(spec: CaseSpec, config: KernelConfig | None = None):
    case, module, (indices, offsets, psw), out = run_forward(spec, config)
    assert out.shape == (spec.batch_size, sum(d for _, d in spec.tables))
    assert out.dtype == spec.output_dtype.torch
    report = check_forward(module.layout, module.weights, indices, offsets, psw, spec.batch_size, module.pooling, out)
    assert report.ok, f"{report}\nspec: {spec.to_json()}"
    return case, module, out


@settings(max_examples=examples(300))
@given(case_specs(max_lookups=min(MAX_LOOKUPS, 3000)))
def test_forward_matches_fp64_reference(spec):
    assert_matches_reference(spec)


@settings(max_examples=examples(40))
@given(case_specs(max_lookups=min(MAX_LOOKUPS, 3000), max_tables=3),
       st.sampled_from([((8, 1, 1, 1), (16, 2, 8, 2)), ((32, 16, 2, 1), (64, 4, 1, 2), (128, 2, 4, 1))]))
def test_forward_per_bucket_tiles_match_fp64(spec, tiles):
    """Buckets with their own gather width, bags per program and warps."""
    assert_matches_reference(spec, KernelConfig(fwd_bucket_tiles=tiles))


@settings(max_examples=examples(30))
@given(case_specs(max_lookups=min(MAX_LOOKUPS, 3000), max_tables=3))
def test_one_bag_a_program_pools_every_bag_as_the_tile_does(spec):
    """A batch past ``fwd_one_bag_pooling`` runs the tile's specialization one bag a program: every bag's sum is
    the same bits as with the tile's bags, and matches the reference."""
    _, _, one = assert_matches_reference(spec, KernelConfig(fwd_one_bag_pooling=1))  # every batch: one bag
    _, _, _, tiled = run_forward(spec, KernelConfig(fwd_one_bag_pooling=0))          # never
    assert torch.equal(one, tiled), f"spec: {spec.to_json()}"


@settings(max_examples=examples(40))
@given(case_specs(max_lookups=min(MAX_LOOKUPS, 3000), max_dim=700, max_tables=2, max_batch=4))
def test_forward_wide_rows_loop_over_column_blocks(spec):
    """D beyond the largest bucket (256) loops over column blocks."""
    assert_matches_reference(spec)


@pytest.mark.skipif(not fbgemm_cpu.available(), reason="fbgemm_gpu CPU ops did not load")
@settings(max_examples=examples(200))
@given(case_specs(max_lookups=min(MAX_LOOKUPS, 3000), dim_multiple=4, max_dim=132,
                  weights_dtypes=fbgemm_cpu.SUPPORTED_NAMES, output_dtypes=fbgemm_cpu.SUPPORTED_NAMES))
def test_forward_matches_fbgemm_cpu(spec):
    case, module, out = assert_matches_reference(spec)
    fb = fbgemm_cpu.FbgemmTBE(
        spec.tables, spec.optimizer, spec.learning_rate, spec.eps, module.weights_dtype,
        module.output_dtype, spec.pooling,
    )
    fb.load(module.split_embedding_weights())
    fb_out = fb.forward(case.indices, case.offsets, case.per_sample_weights)
    if fbgemm_forward_difference(module.pooling, spec.weighted, module.output_dtype):
        return  # triaged oracle finding (oracles/findings.py); the kernel was checked against FP64 above
    # FBGEMM against the FP64 authority first: a failure here is an oracle finding, not a kernel bug
    fb_report = check_forward(
        module.layout, module.weights.cpu(), case.indices, case.offsets, case.per_sample_weights,
        spec.batch_size, module.pooling, fb_out, what="fbgemm vs fp64",
    )
    assert fb_report.ok, f"{fb_report}\nspec: {spec.to_json()}"
    # both within the bound of the exact value, hence within twice the bound of each other
    pair = check_forward(
        module.layout, module.weights.cpu(), case.indices, case.offsets, case.per_sample_weights,
        spec.batch_size, module.pooling, out.cpu(), what="triton vs fbgemm", bound_scale=2.0,
    )
    assert pair.ok, f"{pair}\nspec: {spec.to_json()}"


@pytest.mark.parametrize("profile", ["empty", "fixed"])
@pytest.mark.parametrize("batch_size", [0, 1, 5])
def test_empty_and_degenerate_batches(profile, batch_size):
    spec = CaseSpec(tables=((5, 3), (2, 1)), batch_size=batch_size, length_profile=profile, max_length=3,
                    pooling="mean")
    _, _, out = assert_matches_reference(spec)
    if profile == "empty":
        assert torch.count_nonzero(out) == 0


def test_forward_is_deterministic():
    spec = CaseSpec(tables=((50, 33), (7, 5)), batch_size=6, max_length=20, weighted=True, id_skew=1.1, seed=3)
    _, _, _, a = run_forward(spec)
    _, _, _, b = run_forward(spec)
    assert torch.equal(a, b)


def test_planted_forward_fault_is_caught():
    """A forward that drops the last id of each bag must fail the reference check."""
    spec = CaseSpec(tables=((20, 8),), batch_size=4, length_profile="fixed", max_length=3, seed=1)
    config = KernelConfig(faults=("fwd_skip_last_id",))
    with pytest.raises(AssertionError, match="MISMATCH"):
        assert_matches_reference(spec, config)


@pytest.mark.skipif(not fbgemm_cpu.available(), reason="fbgemm_gpu CPU ops did not load")
@pytest.mark.parametrize("output_dtype", [torch.float32, torch.float16])
def test_fbgemm_weighted_mean_finding_still_holds(output_dtype):
    """Pins the triaged FBGEMM finding: weighted MEAN with fp16 output is not divided by L.

    If FBGEMM fixes it, this fails and the exemption in oracles/findings.py should go.
    """
    fb = fbgemm_cpu.FbgemmTBE([(1, 4)], Optimizer.EXACT_SGD, 0.01, 1e-8, torch.float32, output_dtype, Pooling.MEAN)
    fb.load([torch.ones(1, 4)])
    got = fb.forward(torch.tensor([0, 0]), torch.tensor([0, 2]), torch.ones(2))
    expected_value = 2.0 if fbgemm_forward_difference(Pooling.MEAN, True, output_dtype) else 1.0
    assert torch.all(got.float() == expected_value), got


@pytest.mark.gpu
@settings(max_examples=examples(25))
@given(
    case_specs(max_lookups=6_000_000, max_batch=8192, max_tables=4, max_rows=2_000_000, max_dim=260),
    st.sampled_from([1_000_000, 2_000_000, 5_000_000]),
)
def test_forward_large_batches_on_gpu(spec, min_lookups):
    """Batches of 1M+ lookups, every dtype: long bags make the fp32 accumulation bound matter."""
    per_bag = max(1, min_lookups // max(1, spec.num_tables * max(1, spec.batch_size)))
    import dataclasses

    spec = dataclasses.replace(spec, batch_size=max(1, spec.batch_size), length_profile="fixed", max_length=per_bag)
    case, module, out = assert_matches_reference(spec)
    assert case.num_lookups >= min_lookups * 0.9


def test_rows_are_read_in_16_byte_vectors_only_where_every_offset_allows():
    """``tbe.layout.row_vector``: 16 bytes of elements where every D and row stride is a multiple, else 1."""
    from tbe.layout import row_vector

    assert row_vector([64, 128], 4, 192) == 4 and row_vector([64, 128], 2, 192) == 8
    assert row_vector([64, 12], 4, 76) == 4 and row_vector([64, 12], 2, 76) == 1  # 12 is not a multiple of 8
    assert row_vector([64, 128], 4, 194) == 1  # a row stride off the vector
    assert row_vector([3], 4) == 1 and row_vector([1024], 1) == 16


@pytest.mark.parametrize("dims, vec", [((64, 128), 4), ((64, 6), 1)])
def test_the_kernels_take_the_vector_width_of_the_layout(dims, vec):
    """The forward and the short tier launch with VEC = the layout's row vector (fp32: 4), or 1."""
    from fuzz.compile.specializations import record
    from fuzz.compile.warmup import exercise

    spec = CaseSpec(tables=tuple((8, d) for d in dims), batch_size=2, max_length=2, optimizer="exact_sgd")
    with record(dry_run=True) as keys:
        exercise(spec, KernelConfig())
    taken = {name: dict(args)["VEC"] for name, args in keys if name in ("_forward_kernel", "_short_rows_kernel")}
    assert taken == {"_forward_kernel": ("constexpr", str(vec)), "_short_rows_kernel": ("constexpr", str(vec))}
