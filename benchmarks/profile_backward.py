"""Per-kernel time of one training iteration, ours, TorchRec's Triton TBE and FBGEMM's CUDA TBE, from torch.profiler.

``python -m benchmarks.profile_backward --out benchmarks/results/breakdown_h200.json`` runs a few
iterations of each shape of ``--shape-set`` (default: the six bench shapes) under the profiler and sums device time per kernel, grouped
into stages (forward, sort, run-length encoding, classification, each backward tier, the optimizer)
so the gap to the others can be read kernel by kernel. TorchRec's (``--torchrec-source``, default the newest
snapshot) runs through its SUT adapter; its kernels' names say which stage they belong to less often, so read its
``top_kernels_ms`` beside the stages.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from typing import Optional

import torch

from benchmarks.baselines import fbgemm_cuda, torchrec_target
from benchmarks.timing import kernel_profile
from benchmarks.shape_args import add_shape_args, chosen_shapes
from fuzz.gate.shapes import PerfShape, make_workload
from fuzz.gate.timing import build_module, instance_fns, sut_instance
from tbe import KernelConfig
from tbe.modes import FloatDtype

# (stage, pattern on the kernel name), first match wins
STAGES = [
    ("forward", r"_forward_kernel|_small_table_kernel|embedding_forward|embedding_bag_forward|codegen_forward|"
                r"bounds_check"),
    ("small-table backward", r"_small_table_grad_kernel|_small_table_apply_kernel"),
    ("sort", r"[Rr]adix|[Ss]ort|Onesweep|DeviceSegmentedSort"),
    ("linearize", r"linearize|searchsorted|index_select|gather|_index_|indexing|IndexKernel"),
    ("run-length encode", r"[Ss]can|cumsum|Reduce|run_length|_count_runs|_write_runs|unique|scatter|Encode|segment"),
    ("short tier", r"_short_kernel|_short_rows_kernel|backward_.*warp_per_row|warp_per_row|backward_short_run"),
    ("long tier", r"_chunk_kernel|_apply_kernel|_fused_chunk|cta_per_row|backward_.*cta|backward_long_run"),
    ("classify", r"_classify_kernel|_classify_runs|_expand_chunks|_expand_long_runs|partition|"
                 r"split_embedding_backward_count"),
    ("histogram", r"histogram|nvjet|splitK|gemm|cublas"),
    ("psw gradient", r"_psw_grad|indice_weights"),
    ("elementwise", r"elementwise|vectorized|fill|copy|Memset|memset|CatArray"),
]


def stage_of(name: str) -> str:
    for stage, pat in STAGES:
        if re.search(pat, name):
            return stage
    return "other"


def kernel_times(step, iters: int) -> dict[str, float]:
    """Device milliseconds per iteration for every kernel ``step`` launches."""
    return {name: ms for name, (ms, _) in kernel_profile(step, iters).items()}


def summarise(times: dict[str, float]) -> dict:
    stages: dict[str, float] = collections.defaultdict(float)
    for name, ms in times.items():
        stages[stage_of(name)] += ms
    top = sorted(times.items(), key=lambda kv: -kv[1])[:12]
    return {"total_ms": sum(times.values()), "stages_ms": dict(sorted(stages.items(), key=lambda kv: -kv[1])),
            "top_kernels_ms": [[k[:120], v] for k, v in top]}


def profile_shape(shape: PerfShape, config, iters, device, torchrec: Optional[str] = None):
    wl = make_workload(shape, device)
    ids, offsets, psw, grad = wl.indices, wl.offsets, wl.per_sample_weights, wl.grad
    res = {"shape": shape.name}
    m = build_module(shape, config, device)
    res["triton"] = summarise(kernel_times(lambda: m(ids, offsets, psw).backward(grad), iters))
    del m
    fb = fbgemm_cuda(shape.specs, FloatDtype(shape.weights_dtype).torch, shape.optimizer,
                     output_dtype=FloatDtype(shape.output_dtype).torch)
    if fb is not None:
        fpsw = None if psw is None else psw.float()
        res["fbgemm"] = summarise(kernel_times(lambda: fb(ids, offsets, fpsw).backward(grad), iters))
        del fb
    if torchrec is not None:
        tr = sut_instance(torchrec, shape, KernelConfig(), device, "none")
        res["torchrec"] = summarise(kernel_times(instance_fns(tr, wl)["iteration"], iters))
        del tr
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=None)
    p.add_argument("--config", default=None)
    add_shape_args(p, "bench")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--torchrec-source", default=None, metavar="DIR",
                   help="TorchRec's triton_tbe (default: the newest snapshot; 'none' leaves it out)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("profiling needs a CUDA device", file=sys.stderr)
        return 2
    config = KernelConfig.load(args.config) if args.config else KernelConfig()
    torchrec, torchrec_note = (None, "left out") if args.torchrec_source == "none" else \
        torchrec_target(args.torchrec_source)
    print(f"TorchRec: {torchrec_note}", flush=True)
    results = []
    for shape in chosen_shapes(args):
        r = profile_shape(shape, config=config, iters=args.iters, device=torch.device("cuda"), torchrec=torchrec)
        results.append(r)
        for impl in ("triton", "torchrec", "fbgemm"):
            if impl in r:
                st = ", ".join(f"{k} {v:.2f}" for k, v in r[impl]["stages_ms"].items())
                print(f"{r['shape']:<20} {impl:<7} {r[impl]['total_ms']:.2f} ms: {st}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "config": config.to_dict(), "torchrec": torchrec_note,
                       "results": results}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
