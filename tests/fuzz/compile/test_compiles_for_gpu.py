"""Every launch of a training step with the production inputs (VBE, features sharing tables, stochastic rounding)
compiles for sm_90 on the CPU (``fuzz.compile``): the interpreter runs a jit function as Python, so a kernel whose
branches return two types, or whose arithmetic Triton's compiler rejects, passes every CPU test and fails on the
first GPU that builds it."""

from __future__ import annotations

import pytest
import torch

from fuzz.compile import compile_launches
from fuzz.compile.launches import recording
from tbe import KernelConfig, TritonTBE

SMALL = KernelConfig(long_run_threshold=4, chunk_size=2)  # long runs: every backward kernel launches
STEPS = {  # label -> (module keywords, weighted, batch size per feature or None, config)
    "vbe on shared tables, adagrad, weighted mean": (
        dict(feature_table_map=[0, 1, 0], optimizer="exact_rowwise_adagrad", pooling="mean"), True, [3, 0, 2], SMALL),
    "vbe, fused long tier, fused check": (dict(bounds_check="warning"), False, [2, 3, 1],
                                          SMALL.replace(fused_long_tier=True, fused_bounds_check=True)),
    "vbe, standalone check, short rows": (dict(bounds_check="warning"), True, [1, 4, 2],
                                          SMALL.replace(bwd_short_runs_per_program=4)),
    "shared tables, short rows": (dict(feature_table_map=[0, 0, 1]), False, None,
                                  SMALL.replace(bwd_short_runs_per_program=4)),
    "stochastic rounding, fp16, adagrad": (dict(weights_dtype="fp16", optimizer="exact_rowwise_adagrad"), False,
                                           None, SMALL.replace(stochastic_rounding=True)),
    "stochastic rounding, bf16, fused long tier, wide rows": (
        dict(weights_dtype="bf16"), False, None,
        SMALL.replace(stochastic_rounding=True, fused_long_tier=True, dim_buckets=(4,))),
}


@pytest.mark.parametrize("label", list(STEPS))
def test_every_launch_of_the_step_compiles_for_sm90(label):
    kw, weighted, sizes, config = STEPS[label]
    specs = [(20, 8), (9, 16)] if "feature_table_map" in kw else [(20, 8), (9, 16), (12, 8)]
    m = TritonTBE(specs, config=config, **kw)
    per_bag = 5
    features = [f for f in range(m.layout.num_features) for _ in range(sizes[f] if sizes else 3)]
    ids = torch.cat([torch.arange(per_bag) % m.layout.feature_rows[f] for f in features]).to(m.device)
    offsets = (torch.arange(len(features) + 1) * per_bag).to(m.device)
    psw = torch.ones(ids.numel(), device=m.device, requires_grad=True) if weighted else None
    with recording(execute=True) as launches:
        out = m(ids, offsets, psw, batch_size_per_feature=sizes)
        out.backward(torch.ones_like(out))
    compiled = compile_launches(launches, use_cache=False)
    assert len(compiled) == len(launches) >= 10
    failed = [(c.launch.name, c.error.splitlines()[0]) for c in compiled if c.error]
    assert not failed, failed
