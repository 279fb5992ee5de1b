"""Where a forward's time goes, ours: device time per kernel (torch.profiler), and host time per call.

``python -m benchmarks.profile_forward --shape-set production --shapes T8-D128-L1 --bounds-check warning``
prints, per shape, the CUDA-event median of one forward (as ``benchmarks.bench_tbe`` times it), the host's
time to issue one forward when calls run back to back without a sync, the summed device time of the kernels one
forward launches, that time kernel by kernel, and with a check the host's time for each piece of the call, also
issued behind a busy GPU (a piece that waits for the GPU's queue takes the GPU's busy time there). Host time
near the event time: the GPU waits on the host. Run another checkout's ``tbe`` through ``benchmarks.other_tree``
for a before/after.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from benchmarks.timing import kernel_profile, time_ms
from benchmarks.shape_args import add_shape_args, chosen_shapes
from fuzz.gate.shapes import make_workload
from fuzz.gate.timing import build_module
from tbe import KernelConfig


def host_ms(fn, calls: int = 50) -> float:
    """Host milliseconds to issue one call, calls back to back (the GPU's queue absorbs them)."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) * 1000 / calls


def behind_ms(fn, sleep_cycles: int = 4_000_000) -> float:
    """Host milliseconds of one call issued behind a GPU busy for a few ms: about that long if the call waits
    for the GPU's queue, a host call's own time if not."""
    fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(sleep_cycles)
    t0 = time.perf_counter()
    fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) * 1000


def host_parts(m, wl, batch_size: int) -> dict:
    """Host cost of each piece of a checked forward (the check's state, offsets repair, id check, the forward
    kernels, the whole module call): [ms a call back to back, ms of one call behind a busy GPU]."""
    from tbe.bounds_check import check_ids, new_state, one_table_maxima, repair_offsets
    from tbe.forward_dispatch import pooled_forward

    ids, offs, rows = wl.indices, wl.offsets, m.layout_tensors["rows"]
    state = new_state(m.bounds_check_mode, ids, offs, m.bounds_check_warnings)
    block_max = one_table_maxima(offs, rows, m.config)  # one table: the id check also takes the block maxima
    if block_max is not None:
        check_ids(ids, offs, rows, batch_size, state, m.config, block_max=block_max)
    fixed = repair_offsets(ids, offs, state, m.config, block_max=block_max)
    parts = {
        "new_state": lambda: new_state(m.bounds_check_mode, ids, offs, m.bounds_check_warnings),
        "repair_offsets": lambda: repair_offsets(ids, offs, state, m.config, block_max=block_max),
        "check_ids": lambda: check_ids(ids, offs if block_max is not None else fixed, rows, batch_size, state,
                                       m.config, block_max=block_max),
        "forward_kernels": lambda: pooled_forward(
            m.weights, m.layout_tensors, m.layout.feature_dims, m.layout.feature_rows, ids, fixed,
            wl.per_sample_weights, batch_size, m.pooling, m.output_dtype, m.config),
        "module_forward": lambda: m(ids, offs, wl.per_sample_weights),
    }
    return {k: [round(host_ms(fn), 4), round(behind_ms(fn), 4)] for k, fn in parts.items()}


def profile_shape(shape, config, device, bounds_check: str, iters: int) -> dict:
    wl = make_workload(shape, device)
    m = build_module(shape, config, device, bounds_check)
    fwd = lambda: m(wl.indices, wl.offsets, wl.per_sample_weights)  # noqa: E731
    with torch.no_grad():
        res = {"shape": shape.name, "bounds_check": bounds_check, "forward_ms": time_ms(fwd),
               "host_ms": host_ms(fwd)}
        kernels = kernel_profile(fwd, iters)
        if bounds_check != "none":
            res["host_parts"] = host_parts(m, wl, shape.bags)
    res["device_ms"] = sum(v[0] for v in kernels.values())
    res["kernels"] = {k[:100]: [round(v[0], 4), round(v[1], 2)] for k, v in sorted(kernels.items(), key=lambda kv: -kv[1][0])}
    del m
    torch.cuda.empty_cache()
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    add_shape_args(p, "production")
    p.add_argument("--bounds-check", default="warning", choices=("none", "warning"))
    p.add_argument("--config", default=None)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--out", default=None, help="append one JSON line per shape here")
    p.add_argument("--tag", default="", help="a label copied into each record (e.g. which tree)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("profiling needs a CUDA device", file=sys.stderr)
        return 2
    config = KernelConfig.load(args.config) if args.config else KernelConfig()
    device = torch.device("cuda")
    for shape in chosen_shapes(args):
        r = {"tag": args.tag, "device": torch.cuda.get_device_name(),
             **profile_shape(shape, config, device, args.bounds_check, args.iters)}
        print(f"[{args.tag}] {r['shape']} {args.bounds_check}: forward {r['forward_ms']:.3f} ms (events), host "
              f"{r['host_ms']:.3f} ms a call, kernels {r['device_ms']:.3f} ms", flush=True)
        for name, (ms, n) in r["kernels"].items():
            print(f"    {ms:8.4f} ms  x{n:<5g} {name}", flush=True)
        for name, (ms, behind) in r.get("host_parts", {}).items():
            print(f"    host {name:<16} {ms:7.4f} ms a call, {behind:7.4f} ms behind a busy GPU", flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
