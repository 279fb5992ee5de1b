"""TorchRec's Triton TBE on a GPU with FBGEMM's CUDA ops (skipped where either is absent): the transpose kernel
the adapter registers on a CPU gives FBGEMM CUDA's own outputs, and the findings the CPU campaigns triaged
show on the compiled kernels too.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz.judge import run_case
from fuzz.judge.known import explain
from fuzz.profiles import examples
from fuzz.sut.protocol import address, get
from fuzz.sut.torchrec_triton import cpu_ops, loader
from oracles.compare import Check
from cases import CaseSpec
from tbe import KernelConfig

pytestmark = pytest.mark.gpu
BY_NAME = {p.name: p for p in loader.snapshots()}
NEWEST = "3f2fe5f3"


def sut(version: str = NEWEST) -> str:
    return address("torchrec-triton", str(BY_NAME[version]))


@pytest.fixture(scope="module", autouse=True)
def torchrec_cuda():
    if NEWEST not in BY_NAME:
        pytest.skip("no TorchRec Triton TBE snapshots (TBE_FUZZ_TORCHREC_SNAPSHOTS)")
    reason = get(sut()).available()
    if reason is not None:
        pytest.skip(f"torchrec-triton: {reason}")


@settings(max_examples=examples(40), deadline=None)
@given(st.data())
def test_cpu_transpose_op_gives_fbgemm_cudas_outputs(data):
    T = data.draw(st.integers(1, 4), label="T")
    B = data.draw(st.integers(1, 64), label="B")
    rows = data.draw(st.lists(st.integers(1, 3000), min_size=T, max_size=T), label="rows")
    dtype = data.draw(st.sampled_from([torch.int32, torch.int64]), label="dtype")
    hot = data.draw(st.integers(0, 600), label="hot")  # one row read this often: runs past FBGEMM's blocks
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1), label="seed"))
    lengths = torch.randint(0, 12, (T * B,), generator=g)
    lengths[0] += hot
    ids = torch.cat([torch.randint(0, rows[bag // B], (int(n),), generator=g) for bag, n in enumerate(lengths)])
    ids[: hot] = 0
    indices = ids.to(dtype)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths, 0)]).to(dtype)
    hcs = torch.tensor([0] + list(np.cumsum(rows)), dtype=torch.int64)
    bits = int(np.log2(int(hcs[-1]))) + 1
    info_bits, info_mask = torch.ops.fbgemm.get_infos_metadata(indices, B, T)
    # the kernel the adapter registers for the CPU, run here on the GPU's tensors (its linearize is a Triton kernel)
    cpu = cpu_ops.transpose_embedding_input(hcs.cuda(), bits, indices.cuda(), offsets.cuda(), info_B_num_bits=info_bits,
                                            info_B_mask=info_mask)
    cuda = torch.ops.fbgemm.transpose_embedding_input(hcs.cuda(), bits, indices.cuda(), offsets.cuda(), False, None,
                                                      info_bits, info_mask)
    n, k = indices.numel(), int(cpu[5][0])
    assert int(cuda[5][0]) == k
    for i, (a, b) in enumerate(zip(cpu, cuda)):
        a, b = a.cpu(), b.cpu()
        assert a.dtype == b.dtype, f"output {i}"
        if i == 3:  # runs: only the first num_runs are written
            a, b = a[:k], b[:k]
        assert torch.equal(a, b), f"output {i} differs"
    assert n == int(cpu[6][-1])


PLAIN = CaseSpec(tables=((1000, 64), (50, 4), (7, 132)), batch_size=64, max_length=20, id_skew=1.1,
                 optimizer="exact_rowwise_adagrad", seed=5)


@pytest.mark.parametrize("config", [KernelConfig(), KernelConfig(hoist_transpose=True),
                                    KernelConfig(fused_bounds_check=True), KernelConfig(small_table_path=False)])
@pytest.mark.parametrize("wd", ["fp32", "fp16"])
def test_torchrec_cuda_trains_like_fp64(config, wd):
    res = run_case(dataclasses.replace(PLAIN, weights_dtype=wd, steps=2), config, sut=sut())
    assert res.ok, res.text()


def test_torchrec_cuda_rounds_fp32_weights_to_fp16_under_stochastic_rounding():
    res = run_case(dataclasses.replace(PLAIN, optimizer="exact_sgd"), KernelConfig(stochastic_rounding=True),
                   sut=sut())
    assert {r.check for r in res.reports if not r.ok} == {Check.WEIGHTS}, res.text()
    assert [f.id for f in explain(sut(), res)] == ["torchrec-stochastic-rounding-through-fp16"]


def test_torchrec_cuda_psw_gradient_is_missing_before_3f2fe5f3():
    spec = dataclasses.replace(PLAIN, weighted=True, tables=((100000, 16),), id_skew=0.0, batch_size=8,
                               max_length=4)
    before = run_case(spec, KernelConfig(), sut=sut("1fb0a9f9"))
    assert Check.MISSING_PSW_GRAD in {r.check for r in before.reports if not r.ok}, before.text()
    assert run_case(spec, KernelConfig(), sut=sut()).ok
