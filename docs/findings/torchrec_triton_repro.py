"""Standalone reproductions of the findings in torchrec-triton.md against TorchRec's Triton TBE.

Needs torch, triton, fbgemm_gpu and a TorchRec source tree (a checkout, or a folder holding
torchrec/distributed/triton_tbe/); nothing of tbe-fuzz. On a GPU it runs the compiled kernels; without one,
Triton's interpreter (TRITON_INTERPRET=1 is set) with a plain torch transpose standing in for
fbgemm::transpose_embedding_input, which fbgemm-gpu-cpu lacks.

    python torchrec_triton_repro.py TORCHREC_DIR FINDING     (FINDING: one of the names below, or all)

Each prints what it expected, what it got, and REPRODUCED, not reproduced, or skipped (first_offset_kept needs
FBGEMM's CUDA transpose, and runs last: the CUDA error it provokes ends the process's use of the GPU); the exit
status is 0 when none was "not reproduced".
"""

import os
import sys
import types

if len(sys.argv) != 3:
    sys.exit(__doc__)
import torch

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if DEVICE.type == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"
import fbgemm_gpu  # noqa: E402,F401
from fbgemm_gpu.split_embedding_configs import EmbOptimType  # noqa: E402
from fbgemm_gpu.split_table_batched_embeddings_ops_common import BoundsCheckMode  # noqa: E402


def import_torchrec_tbe(root):
    """The module, with a stand-in for the AMD-only private module it imports (used only under ROCm)."""
    amd = "ads_mkl.ops.triton.amd.triton_table_batched_embeddings"
    for i in range(1, 6):
        sys.modules.setdefault(".".join(amd.split(".")[:i]), types.ModuleType(".".join(amd.split(".")[:i])))
    sys.modules[amd]._FIXED_GRID = 1
    sys.modules[amd].__getattr__ = lambda name: (_ for _ in ()).throw(AttributeError(name)) if name.startswith(
        "__") else (lambda *a, **k: None)
    sys.path.insert(0, root)
    from torchrec.distributed.triton_tbe import triton_table_batched_embeddings as m
    gates = getattr(m, "FeatureGateName", None)  # read from 1fb0a9f9 on
    if gates is not None:  # fbgemm-gpu 1.6.0 lacks DISABLE_OFFSETS_ADJUSTMENT: read it as off
        class Gates:
            def __getattr__(self, name):
                return getattr(gates, name, types.SimpleNamespace(is_enabled=lambda: False))
        m.FeatureGateName = Gates()
    return m


def cpu_transpose(hcs, bits, indices, offsets, nobag=False, vbe_b_t_map=None, info_B_num_bits=26, info_B_mask=0,
                  *rest):
    """fbgemm::transpose_embedding_input on the CPU, pooled form: a stable sort by linear index, runs of it."""
    T, total_B = hcs.numel() - 1, offsets.numel() - 1
    bag = torch.repeat_interleave(torch.arange(total_B), (offsets[1:] - offsets[:-1]).long())
    t, b = bag // (total_B // T), bag % (total_B // T)
    linear = (hcs[t] + indices.long()).to(indices.dtype)
    perm = torch.sort(linear, stable=True).indices
    runs, counts = torch.unique_consecutive(linear[perm], return_counts=True)
    n, k = indices.numel(), runs.numel()
    run, lengths = torch.zeros_like(indices), torch.zeros(n, dtype=torch.int32)
    run[:k], lengths[:k] = runs, counts.int()
    return (linear, linear[perm], ((t << info_B_num_bits) | b).int()[perm], run, lengths,
            torch.tensor([k], dtype=torch.int32), torch.cat([torch.zeros(1, dtype=torch.int32), lengths.cumsum(0).int()]))


if DEVICE.type == "cpu":
    LIB = torch.library.Library("fbgemm", "IMPL")
    LIB.impl("transpose_embedding_input", cpu_transpose, "CPU")
M = import_torchrec_tbe(sys.argv[1])


def tbe(specs, **kw):
    m = M.TritonTableBatchedEmbeddingBags(specs, device=DEVICE, **kw)
    if DEVICE.type == "cpu":
        m.record_forward_event = lambda: None
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for w in m.split_embedding_weights():
            w.copy_(torch.randn(w.shape, generator=g).to(w.dtype))
    return m


def warning_check(m, tables):
    """``m`` under FBGEMM's WARNING bounds check: V2 where this version takes it, else the first WARNING (the
    earliest versions' check raises "not supported" for V2), probed with one valid id per table."""
    for name in [n for n in ("V2_WARNING", "WARNING") if n in BoundsCheckMode.__members__]:
        m.bounds_check_mode = BoundsCheckMode[name]
        try:
            with torch.no_grad():
                m(t([0] * tables), t(list(range(tables + 1))))
            return m
        except RuntimeError as e:
            if "is not supported" not in str(e):
                raise
    raise RuntimeError("this version takes no WARNING bounds check")


def t(values, dtype=torch.int64):
    return torch.tensor(values, dtype=dtype, device=DEVICE)


def weighted_unstable_argsort():
    """Small weighted batches over a few rows: each row's update is -sum_i w_i * dout[b_i] (SGD, lr 1).

    The unstable argsort breaks ties differently at different sizes on each device (on an H100, small key
    sets), so several small batches are tried; the first whose update is wrong is printed."""
    g = torch.Generator().manual_seed(0)
    for n, bags in ((8, 2), (17, 4), (8, 4), (40, 4)):
        m = tbe([(3, 2)], optimizer=EmbOptimType.EXACT_SGD, learning_rate=1.0, stochastic_rounding=False)
        w0 = m.split_embedding_weights()[0].double().cpu()
        rows = torch.randint(0, 3, (n,), generator=g)
        cuts = torch.sort(torch.randperm(n - 1, generator=g)[:bags - 1] + 1).values
        offsets = torch.cat([torch.tensor([0]), cuts, torch.tensor([n])])
        psw = torch.arange(1, n + 1, dtype=torch.float32)
        dout = torch.arange(1, 2 * bags + 1, dtype=torch.float32).view(bags, 2)
        m(rows.to(DEVICE), offsets.to(DEVICE), psw.to(DEVICE)).backward(dout.to(DEVICE))
        bag = torch.repeat_interleave(torch.arange(bags), offsets[1:] - offsets[:-1])
        expected = w0.index_add(0, rows, -(psw.double()[:, None] * dout.double()[bag]))
        got = m.split_embedding_weights()[0].double().cpu()
        if not torch.allclose(got, expected, rtol=1e-5):
            return f"{expected.tolist()} ({n} lookups, {bags} bags)", got.tolist(), True
    return expected.tolist(), got.tolist(), False


def stochastic_rounding_fp32():
    """fp32 weights with the module's default stochastic_rounding=True: the update must be exact in fp32."""
    m = tbe([(4, 8)], optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.1)  # stochastic_rounding defaults on
    w0 = m.split_embedding_weights()[0].clone()
    dout = torch.full((1, 8), 1e-3, device=DEVICE)
    m(t([1]), t([0, 1])).backward(dout)
    expected = w0[1] - 0.1 * dout[0]
    got = m.split_embedding_weights()[0][1]
    on_fp16_grid = bool((got.half().float() == got).all())
    return expected, got, on_fp16_grid and not torch.equal(got, expected)


def empty_batch_backward():
    """B = 0: the forward returns [0, D]; the backward must not raise."""
    m = tbe([(4, 8)], optimizer=EmbOptimType.EXACT_SGD, stochastic_rounding=False)
    out = m(t([]), t([0]))
    try:
        out.backward(torch.zeros_like(out))
        return "no exception", "no exception", False
    except RuntimeError as e:
        return "no exception", str(e).splitlines()[0], True


def minus_one_id():
    """Id -1 passes FBGEMM's check (a pruned row); the histogram kernel skips it, the generic kernels read it."""
    m = warning_check(tbe([(4, 8), (4, 8)], optimizer=EmbOptimType.EXACT_SGD, stochastic_rounding=False), tables=2)
    before = m.split_embedding_weights()[0][-1].clone()
    out = m(t([1, -1]), t([0, 1, 2]), None)  # table 1's only id is -1
    expected = torch.zeros(8, device=DEVICE)   # a skipped (pruned) id adds nothing
    got = out[0, 8:]
    return expected, got, torch.equal(got.float(), before.float()) or not torch.equal(got.float(), expected)


def first_offset_kept():
    """offsets[0] = 1 > 0: FBGEMM's check (and the fused repair) keeps it, so id 0 is in no bag and the
    transpose never writes its linear index or info (``empty_like``): the backward sorts and updates whatever
    those slots held. The campaign's case (2 tables, 3 bags, unweighted); the caching allocator is first
    filled with large values, as a long-running process leaves it, so the unwritten slots hold them."""
    if DEVICE.type != "cuda":  # the CPU transpose here assigns every id to a bag: FBGEMM's CUDA op is the subject
        return "a GPU", "no GPU here", None
    m = warning_check(tbe([(6, 5), (9, 3)], optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.05,
                          stochastic_rounding=False), tables=2)
    dirty = [torch.full((64,), 0x7F7F7F7F7F7F7F7F, dtype=torch.int64, device=DEVICE) for _ in range(4096)]
    del dirty
    idx, off = t([4, 4, 1, 1, 4, 1, 1, 4, 6, 6, 6, 3, 3, 3, 3, 6, 3]), t([1, 4, 8, 8, 13, 15, 17])
    expected = "an update of the rows the bags read, or an error naming offsets[0]"
    try:
        out = m(idx, off)
        out.backward(torch.ones_like(out))
        torch.cuda.synchronize()
        return expected, "no error", False
    except RuntimeError as e:
        return expected, str(e).splitlines()[0], True


def histogram_backward_small_gradients():
    """One fp16 table of 16 rows, D 64, 32 bags of 64 ids, row-wise Adagrad (lr 0.01, eps 1e-8), upstream gradient
    1e-8 * N(0, 1): with ``bag_size_hints`` the backward takes the saved histogram, whose fp16 split of the
    gradient flushes it; without hints (the sort-based backward) the same step is right to fp16 rounding."""
    if DEVICE.type != "cuda":  # Triton's interpreter refuses the histogram kernels' integer masks
        return "a GPU", "no GPU here", None
    E, D, B, L = 16, 64, 32, 64
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, E, (B * L,), generator=g)
    offsets = torch.arange(0, B * L + 1, L)
    w0 = (0.1 * torch.randn(E, D, generator=g)).half()
    dout = 1e-8 * torch.randn(B, D, generator=g)
    bag = torch.repeat_interleave(torch.arange(B), L)
    grad = torch.zeros(E, D, dtype=torch.float64).index_add_(0, ids, dout.double()[bag])
    expected = w0.double() - 0.01 * grad / ((grad * grad).mean(1).sqrt() + 1e-8)[:, None]
    errors = {}
    for hints in ([L], None):
        try:
            m = tbe([(E, D)], optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.01, eps=1e-8,
                    stochastic_rounding=False, weights_precision=torch.float16, output_dtype=torch.float32,
                    bag_size_hints=hints)
        except TypeError:  # versions before bag_size_hints
            return "a version with bag_size_hints", "none here", None
        with torch.no_grad():
            m.split_embedding_weights()[0].copy_(w0.to(DEVICE))
        m(ids.to(DEVICE), offsets.to(DEVICE)).backward(dout.to(DEVICE))
        errors[hints is not None] = (m.split_embedding_weights()[0].double().cpu() - expected).abs().max().item()
    update = (expected - w0.double()).abs().max().item()
    return (f"max |error| within fp16 rounding, as without hints ({errors[False]:.1e}; largest update {update:.1e})",
            f"max |error| {errors[True]:.1e} with hints", errors[True] > 10 * errors[False])


FINDINGS = {f.__name__: f for f in (weighted_unstable_argsort, stochastic_rounding_fp32, empty_batch_backward,
                                    minus_one_id, histogram_backward_small_gradients, first_offset_kept)}

if __name__ == "__main__":
    names = list(FINDINGS) if sys.argv[2] == "all" else [sys.argv[2]]
    ok = True
    for name in names:
        expected, got, reproduced = FINDINGS[name]()
        verdict = "skipped" if reproduced is None else "REPRODUCED" if reproduced else "not reproduced"
        print(f"{name} on {DEVICE.type}: expected {expected}\n  got {got}\n  {verdict}")
        ok &= reproduced is not False
    sys.exit(0 if ok else 1)
