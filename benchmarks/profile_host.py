"""Where the host's time goes when it issues ours: cProfile over calls issued back to back (no sync between).

``python -m benchmarks.profile_host --shape-set production --shapes T8-D128-L1 --bounds-check warning`` prints, per
shape and phase (forward alone, a training iteration), the host milliseconds per call and the functions that take
them (own time and cumulative, per call). On an idle GPU every microsecond here before the last kernel launches is
a microsecond the GPU waits, so this is what CUDA-event times hold beyond the kernels' own time
(``benchmarks.profile_forward``). cProfile slows Python down; read the split, and ``host_ms`` for the total.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys

import torch

from benchmarks.profile_forward import host_ms
from benchmarks.shape_args import add_shape_args, chosen_shapes
from fuzz.gate.shapes import make_workload
from fuzz.gate.timing import build_module, phase_fns
from tbe import KernelConfig


def top_functions(fn, calls: int, limit: int) -> dict[str, list[dict]]:
    """Over ``calls`` calls of ``fn``, the ``limit`` functions with the most own time ("own") and the most
    cumulative time ("cumulative"): ms per call, own and cumulative."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    fn()
    sync()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    sync()
    stats = pstats.Stats(prof, stream=io.StringIO())
    rows = []
    for (file, line, name), (_, ncalls, own, cum, _) in stats.stats.items():
        rows.append({"function": f"{file.rsplit('/', 2)[-1] if '/' in file else file}:{line}:{name}",
                     "calls": ncalls / calls, "own_ms": own * 1000 / calls, "cum_ms": cum * 1000 / calls})
    return {"own": sorted(rows, key=lambda r: -r["own_ms"])[:limit],
            "cumulative": sorted(rows, key=lambda r: -r["cum_ms"])[:limit]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    add_shape_args(p, "production")
    p.add_argument("--bounds-check", default="warning", choices=("none", "warning"))
    p.add_argument("--config", default=None)
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--limit", type=int, default=25, help="functions printed per shape and phase")
    p.add_argument("--out", default=None, help="append one JSON line per shape and phase here")
    p.add_argument("--tag", default="", help="a label copied into each record (e.g. which tree)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("profiling the host's launches needs a CUDA device", file=sys.stderr)
        return 2
    config = KernelConfig.load(args.config) if args.config else KernelConfig()
    device = torch.device("cuda")
    for shape in chosen_shapes(args):
        wl = make_workload(shape, device)
        m = build_module(shape, config, device, args.bounds_check)
        for phase, fn in phase_fns(m, wl).items():
            r = {"tag": args.tag, "device": torch.cuda.get_device_name(), "shape": shape.name, "phase": phase,
                 "bounds_check": args.bounds_check, "host_ms": host_ms(fn, args.calls),
                 "functions": top_functions(fn, args.calls, args.limit)}
            print(f"[{args.tag}] {shape.name} {phase} {args.bounds_check}: host {r['host_ms']:.3f} ms a call",
                  flush=True)
            for order, rows in r["functions"].items():
                print(f"  by {order} time:")
                for f in rows:
                    print(f"    own {f['own_ms']:7.4f}  cum {f['cum_ms']:7.4f} ms  x{f['calls']:<5g} {f['function']}",
                          flush=True)
            if args.out:
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(r) + "\n")
        del m
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
