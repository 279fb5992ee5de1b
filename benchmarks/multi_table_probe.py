"""Forward and iteration time of this project's TBE and TorchRec's at shapes of several equal tables.

``benchmarks.bench_tbe`` times one table per shape (``fuzz.gate.shapes.PerfShape`` has no table count), so a
production batch of 8 tables x 1M rows is folded there into one table of 8M rows. This probe times the
unfolded form beside the folded one, on the same ids, to see whether the table count moves either TBE:

    python -m benchmarks.multi_table_probe [--tables 8] [--rows 1000000] [--dim 128] [--batch 16384]
        [--pooling 40] [--weights fp32] [--out FILE.jsonl]

Row-wise Adagrad, no bounds check unless ``--bounds-check`` names one, ids uniform within each table, every bag ``--pooling`` long; TorchRec's
module through its SUT adapter (newest snapshot unless ``--torchrec-source``). GPU only.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from benchmarks.timing import time_ms
from tbe.modes import FloatDtype
from fuzz.gate.timing import build_tables, sut_tables


OPTIMIZER = "exact_rowwise_adagrad"


def workload(tables: int, rows: int, batch: int, pooling: int, dim: int, device, seed: int = 0):
    """(ids local to each table, offsets, ids offset into one folded table, grad) for T x B bags of L ids."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    local = torch.randint(0, rows, (tables, batch * pooling), generator=g)
    folded = (local + torch.arange(tables)[:, None] * rows).reshape(-1)
    offsets = torch.arange(0, tables * batch * pooling + 1, pooling, dtype=torch.int64)
    grad = torch.randn(batch, tables * dim, generator=g)
    return local.reshape(-1).to(device), offsets.to(device), folded.to(device), grad.to(device)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tables", type=int, default=8)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--batch", type=int, default=16_384)
    p.add_argument("--pooling", type=int, default=40)
    p.add_argument("--weights", default="fp32", choices=[d.value for d in FloatDtype])
    p.add_argument("--bounds-check", default="none", choices=("none", "warning", "fatal"),
                   help="both modules' bounds-check mode (default none, as bench_tbe)")
    p.add_argument("--config", default=None, help="KernelConfig JSON for this project's TBE (default: defaults)")
    p.add_argument("--torchrec-source", default=None, metavar="DIR")
    p.add_argument("--impls", default="ours,torchrec", help="which to time (default: ours,torchrec)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("multi_table_probe needs a CUDA device", file=sys.stderr)
        return 2
    impls = args.impls.split(",")
    source = None
    if "torchrec" in impls:
        from fuzz.sut.torchrec_triton import loader

        source = args.torchrec_source or str(loader.snapshots()[-1])
    from fuzz.sut.protocol import address
    from tbe import KernelConfig

    config = KernelConfig.load(args.config) if args.config else KernelConfig()
    device, wdt = torch.device("cuda"), FloatDtype(args.weights).torch
    T, E, D = args.tables, args.rows, args.dim
    ids, offsets, folded, grad = workload(T, E, args.batch, args.pooling, D, device)
    folded_grad = grad.reshape(args.batch, T, D).permute(1, 0, 2).reshape(T * args.batch, D).contiguous()
    records = []
    for layout, specs, batch_ids, g in (("tables", [(E, D)] * T, ids, grad),
                                        ("folded", [(T * E, D)], folded, folded_grad)):
        for impl in impls:
            m = (build_tables(specs, OPTIMIZER, wdt, config, device, args.bounds_check) if impl == "ours" else
                 sut_tables(address("torchrec-triton", source), specs, OPTIMIZER, wdt, None, args.bounds_check))
            if impl == "ours":
                fwd = lambda: m(batch_ids, offsets, None)  # noqa: E731
                it = lambda: m(batch_ids, offsets, None).backward(g)  # noqa: E731
            else:
                fwd = lambda: m.forward(batch_ids, offsets, None)  # noqa: E731

                def it():
                    m.forward(batch_ids, offsets, None)
                    m.backward(g)
            with torch.no_grad():
                f_ms = time_ms(fwd)
            i_ms = time_ms(it, warmup=2, repeat=10)
            r = {"layout": layout, "impl": impl, "tables": len(specs), "rows": specs[0][0], "dim": D,
                 "batch": args.batch, "pooling": args.pooling, "weights": args.weights,
                 "bounds_check": args.bounds_check, "config": config.diff(KernelConfig()) if impl == "ours" else None,
                 "forward_ms": f_ms,
                 "iteration_ms": i_ms, "device": torch.cuda.get_device_name(), "torchrec_source": source}
            print(json.dumps(r), flush=True)
            records.append(r)
            del m
            torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
