"""Forward and full-iteration time of the Triton TBE beside TorchRec's Triton TBE, FBGEMM's CUDA TBE and PyTorch.

Run on a GPU: ``python -m benchmarks.bench_tbe --out benchmarks/results/bench_h200.jsonl``. Every
shape is timed for each implementation in one process, on the same batch; FBGEMM's column
is empty where its CUDA build does not import, TorchRec's where ``--torchrec-source`` (default: the newest
snapshot, ``TBE_FUZZ_TORCHREC_SNAPSHOTS``) has none or it does not run here. TorchRec's module is driven
through its SUT adapter (``fuzz.gate.timing.sut_instance``) with its defaults (no bounds check here, as for
the others, unless ``--bounds-check`` names a mode), its tables drawn as ours are. The byte floor is what an iteration must move
(rows read by the forward, gradient rows gathered, distinct rows and their optimizer state read
and written, ids sorted once) over the device-to-device copy rate measured in the same run. Each phase has two
times: the CUDA-event median of one call on an idle GPU (``_ms``: what a caller waits, the host's launch gaps
included) and the device time of its kernels from torch.profiler (``_device_ms``: what the GPU spends, whatever
the host does). ``--ids int32`` hands every implementation the same batch with int32 ids and offsets.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys

import torch

from benchmarks.baselines import fbgemm_cuda, fbgemm_cuda_error, torch_forward, torch_iteration, torchrec_target
from benchmarks.timing import copy_bandwidth_GBps, kernel_profile, time_ms
from benchmarks.shape_args import add_shape_args, chosen_shapes
from fuzz.gate.shapes import PRESETS, PerfShape, make_workload
from fuzz.gate.timing import build_module, instance_fns, sut_instance
from tbe import KernelConfig
from tbe.modes import FloatDtype

SHAPES = PRESETS["bench"]  # the gate's ``--shapes bench``: one list, one batch recipe, one module for both


def floor_bytes(lookups: list[int], distinct: list[int], dims: list[int], bags: int, esize: int, out_esize: int,
                adagrad: bool, weighted: bool) -> dict:
    """Bytes the forward and the whole iteration must move at the least (``lookups``, ``distinct``, ``dims``: one
    entry per table; ``bags``: per table)."""
    n = sum(lookups)
    fwd = (sum(k * d for k, d in zip(lookups, dims)) * esize + n * 8 + bags * sum(dims) * out_esize
           + (n * 4 if weighted else 0))
    bwd = (sum(k * d for k, d in zip(lookups, dims)) * 4            # upstream-gradient rows gathered per lookup
           + 2 * sum(u * d for u, d in zip(distinct, dims)) * esize  # distinct rows read and written
           + (2 * sum(distinct) * 4 if adagrad else 0)
           + 2 * n * 8)                                              # ids sorted once: read and write key + position
    return {"forward_bytes": fwd, "iteration_bytes": fwd + bwd}


DEVICE_ITERS = 5  # calls under the profiler for each phase's device time


def measure(res: dict, impl: str, phase: str, fn, **timing) -> None:
    """``impl``'s ``phase`` into ``res``: ``_ms``, the CUDA-event median of one call on an idle GPU (the host's
    launch gaps included), and ``_device_ms``, the summed device time of the kernels one call runs (none)."""
    res[f"{impl}_{phase}_ms"] = time_ms(fn, **timing)
    res[f"{impl}_{phase}_device_ms"] = sum(ms for ms, _ in kernel_profile(fn, DEVICE_ITERS).values())


IDS = {"int64": torch.int64, "int32": torch.int32}  # --ids: the batch's id and offset dtype


def bench_shape(shape: PerfShape, device, config, copy_gbps, impls=("triton", "fbgemm", "torch"),
                torchrec: str | None = None, bounds_check: str = "none", ids_dtype: str = "int64"):
    """One record of ``shape``: each implementation's forward and iteration, ms, on one batch (ids and offsets in
    ``ids_dtype``); every module checks bounds in ``bounds_check`` mode (PyTorch's ops check always)."""
    wl = make_workload(shape, device)
    wl = dataclasses.replace(wl, indices=wl.indices.to(IDS[ids_dtype]), offsets=wl.offsets.to(IDS[ids_dtype]))
    ids, offsets, psw, grad = wl.indices, wl.offsets, wl.per_sample_weights, wl.grad
    specs, bags = shape.specs, shape.bags
    wdtype, odtype = FloatDtype(shape.weights_dtype).torch, FloatDtype(shape.output_dtype).torch
    dims = [d for _, d in specs]
    n = ids.numel()
    adagrad = shape.optimizer == "exact_rowwise_adagrad"
    res = {"shape": shape.name, "lookups": n, "tables": len(specs), "rows": shape.rows, "dim": shape.dim,
           "dims": sorted(set(dims)), "weights": str(wdtype).replace("torch.", ""),
           "output": str(odtype).replace("torch.", ""), "bags": bags, "bag_lengths": shape.lengths,
           "pooling": shape.pooling, "weighted": shape.weighted, "optimizer": shape.optimizer,
           "bounds_check": bounds_check, "ids": ids_dtype}
    ends = offsets[:: bags].tolist()  # each table's first lookup, and the end
    counts = [torch.unique(ids[lo:hi], return_counts=True)[1] for lo, hi in zip(ends, ends[1:])]
    per_table = [hi - lo for lo, hi in zip(ends, ends[1:])]
    res["distinct_rows"] = sum(int(c.numel()) for c in counts)
    res["max_segment_length"] = max((int(c.max()) for c in counts if c.numel()), default=0)
    res.update(floor_bytes(per_table, [int(c.numel()) for c in counts], dims, bags,
                           torch.finfo(wdtype).bits // 8, torch.finfo(odtype).bits // 8, adagrad, shape.weighted))
    res["floor_forward_ms"] = res["forward_bytes"] / copy_gbps / 1e6
    res["floor_iteration_ms"] = res["iteration_bytes"] / copy_gbps / 1e6
    psw_leaf = None if psw is None else psw.clone().requires_grad_(False)

    m = build_module(shape, config, device, bounds_check)
    with torch.no_grad():
        measure(res, "triton", "forward", lambda: m(ids, offsets, psw_leaf))
    measure(res, "triton", "iteration", lambda: m(ids, offsets, psw_leaf).backward(grad), warmup=2, repeat=10)
    with torch.no_grad():  # after the iterations' updates: the others below read these same weights
        ours = m(ids, offsets, psw_leaf).float()
    tables = [t.detach() for t in m.split_embedding_weights()]

    fb = fbgemm_cuda(specs, wdtype, shape.optimizer, output_dtype=odtype, bounds_check=bounds_check) \
        if "fbgemm" in impls else None
    if fb is not None:
        with torch.no_grad():
            for mine, theirs in zip(tables, fb.split_embedding_weights()):
                theirs.copy_(mine)
            fpsw = None if psw is None else psw.float()
            measure(res, "fbgemm", "forward", lambda: fb(ids, offsets, fpsw))
            theirs = fb(ids, offsets, fpsw).float()
        res["forward_max_abs_diff_vs_fbgemm"] = float((ours - theirs).abs().max())
        measure(res, "fbgemm", "iteration", lambda: fb(ids, offsets, fpsw).backward(grad), warmup=2, repeat=10)
        del fb
    elif "fbgemm" in impls:
        res["fbgemm"] = fbgemm_cuda_error()
    if torchrec is not None and "torchrec" in impls:
        tr = sut_instance(torchrec, shape, KernelConfig(), device, bounds_check)
        tr.tbe.weight.detach().copy_(torch.cat([t.reshape(-1) for t in tables]))
        fns = instance_fns(tr, wl)
        measure(res, "torchrec", "forward", fns["forward"])
        with torch.no_grad():
            theirs = tr.forward(ids, offsets, psw).float()
        res["forward_max_abs_diff_vs_torchrec"] = float((ours - theirs).abs().max())
        measure(res, "torchrec", "iteration", fns["iteration"], warmup=2, repeat=10)
        del tr
    if wdtype == torch.float32 and "torch" in impls:
        with torch.no_grad():
            measure(res, "torch", "forward", lambda: torch_forward(tables, ids, offsets, psw))
            res["forward_max_abs_diff_vs_torch"] = float((ours - torch_forward(tables, ids, offsets, psw)).abs().max())
        w = [t.clone() for t in tables]
        mom = [torch.zeros(rows, device=device) for rows, _ in specs] if adagrad else None
        measure(res, "torch", "iteration", lambda: torch_iteration(w, mom, ids, offsets, grad, psw),
                warmup=2, repeat=10)
        del w, mom
    for impl in ("triton", "torchrec", "fbgemm", "torch"):
        if f"{impl}_forward_ms" in res:
            res[f"{impl}_forward_GBps"] = res["forward_bytes"] / res[f"{impl}_forward_ms"] / 1e6
    del m
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return res


def table_line(r: dict) -> str:
    """Two lines of ``r``: CUDA-event ms, then the kernels' device ms, per phase and implementation."""
    def ms(k):
        return f"{r[k]:6.2f}" if k in r else "     -"

    def line(kind: str, suffix: str) -> str:
        return (f"{r['shape']:<22} {kind:<6} fwd ours {ms('triton_forward' + suffix)} torchrec "
                f"{ms('torchrec_forward' + suffix)} fbgemm {ms('fbgemm_forward' + suffix)} torch "
                f"{ms('torch_forward' + suffix)} floor {r['floor_forward_ms']:.2f} | iter ours "
                f"{ms('triton_iteration' + suffix)} torchrec {ms('torchrec_iteration' + suffix)} fbgemm "
                f"{ms('fbgemm_iteration' + suffix)} torch {ms('torch_iteration' + suffix)} "
                f"floor {r['floor_iteration_ms']:.2f} ms")
    return line("events", "_ms") + "\n" + line("device", "_device_ms")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=None, help="append one JSON line per shape here")
    p.add_argument("--config", default=None, help="KernelConfig JSON (default: defaults)")
    add_shape_args(p, "bench,production")
    p.add_argument("--torchrec-source", default=None, metavar="DIR",
                   help="TorchRec's Triton TBE to time (default: the newest snapshot found)")
    p.add_argument("--bounds-check", default="none", choices=("none", "warning"),
                   help="every module's bounds-check mode (default none; warning is TorchRec's and FBGEMM's default)")
    p.add_argument("--ids", default="int64", choices=tuple(IDS),
                   help="the batch's id and offset dtype (default int64)")
    p.add_argument("--impls", default="triton,torchrec,fbgemm,torch",
                   help="which to time beside each other (triton alone: an A/B of two checkouts of tbe, the other run through benchmarks.other_tree)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks need a CUDA device", file=sys.stderr)
        return 2
    import triton

    device = torch.device("cuda")
    config = KernelConfig.load(args.config) if args.config else KernelConfig()
    shapes = chosen_shapes(args)
    torchrec, torchrec_note = (torchrec_target(args.torchrec_source) if "torchrec" in args.impls
                               else (None, "not asked for"))
    copy_gbps = copy_bandwidth_GBps(device)
    env = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "python": platform.python_version(), "copy_GBps": copy_gbps, "config": config.to_dict(),
           "fbgemm": fbgemm_cuda_error() or "fbgemm_gpu CUDA", "torchrec": torchrec_note}
    print(json.dumps(env), flush=True)
    lines = []
    for shape in shapes:
        r = bench_shape(shape, device=device, config=config, copy_gbps=copy_gbps, impls=args.impls.split(","),
                        torchrec=torchrec, bounds_check=args.bounds_check, ids_dtype=args.ids)
        print(json.dumps(r), flush=True)
        lines.append(table_line(r))
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps({**env, **r}) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
