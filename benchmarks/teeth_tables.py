"""How sharp the backward check is at long runs, with and without exact-value data.

``python -m benchmarks.teeth_tables oracle`` (CPU, no kernels): one hot row of SL lookups
(D = 16, exact SGD, lr 0.05, fp32), the bound of ``oracles.bounds_backward.table_bounds``
against the size of the exact update (``reference_backward``), for random N(0, 1) data
under the worst-case and the probabilistic bound, and for exact-value (dyadic) data.

``python -m benchmarks.teeth_tables kernels`` (GPU): ``fuzz.judge.check.run_case`` on
``CaseSpec(tables=((1000, 16),), batch_size=512, hot_rows=(HotRow(0, 7, SL),),
max_length=4, optimizer="exact_sgd", seed=5)`` for random and dyadic data, clean and with
a planted fault (``skip_last_chunk_update``; past 4,096 chunks also the two large-run
faults): the largest error / bound ratio and whether the fault was caught.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from tbe.env import ALLOW_FAULTS  # noqa: E402

ALLOW_FAULTS.setdefault("1")

from oracles.bounds_backward import table_bounds  # noqa: E402
from oracles.error_model import ErrorModel  # noqa: E402
from oracles.reference_backward import reference_backward  # noqa: E402
from cases import CaseSpec, HotRow, dyadic_weights, materialize  # noqa: E402
from tbe.modes import Optimizer, Pooling  # noqa: E402

ORACLE_SLS = (256, 10_000, 100_000, 1_000_000, 2_000_000)
KERNEL_SLS = (300, 3_000, 30_000, 300_000, 1_000_000, 3_000_000)


def issue_spec(sl: int, values: str = "random") -> CaseSpec:
    return CaseSpec(tables=((1000, 16),), batch_size=512, hot_rows=(HotRow(0, 7, sl),), max_length=4,
                    optimizer="exact_sgd", seed=5, values=values)


def oracle_row(sl: int, values: str, model: ErrorModel, detect_exact: bool = True) -> dict:
    """Bound vs update on the hot row's 16 entries (weights as the module would start them);
    ``detect_exact=False`` gives the bound as it was before exact sums were recognised."""
    spec = issue_spec(sl, values)
    case = materialize(spec)
    layout = spec.layout
    if values == "dyadic":
        w = dyadic_weights(spec, spec.seed).float()
    else:  # TritonTBE.reset_weights: Uniform(-1/sqrt(E), 1/sqrt(E))
        g = torch.Generator().manual_seed(spec.seed)
        w = ((torch.rand(layout.total_elements, generator=g, dtype=torch.float64) * 2 - 1) / 1000 ** 0.5).float()
    ref = reference_backward(layout, w, None, case.indices, case.offsets, None, spec.batch_size, Pooling.SUM,
                             Optimizer.EXACT_SGD, spec.learning_rate, spec.eps, case.grad_outputs[0])
    if not detect_exact:
        for t in ref.tables:
            t.exact = None
    s, tb = ref.tables[0], table_bounds(ref, torch.float32, model)[0]
    hot = int(torch.argmax(s.seg_len))
    upd = (s.w_new[hot] - s.w_old[hot]).abs()
    ratio = (tb.w_bound[hot] / upd).tolist()
    one_lookup = spec.learning_rate * case.grad_outputs[0].abs().double().mean().item()
    return {"sl": int(s.seg_len[hot]), "values": values,
            "bound": model.kind + ("" if detect_exact else " (before: no exact sums)"), "mean_update": float(upd.mean()),
            "mean_bound": float(tb.w_bound[hot].mean()), "median_ratio": statistics.median(ratio),
            "exact": int(tb.exact[hot].sum()) if tb.exact is not None else 0, "one_lookup_over_bound": one_lookup / float(tb.w_bound[hot].mean())}


def oracle_table(sls=ORACLE_SLS) -> list[dict]:
    rows = []
    for values, kind, detect in (("random", "worst", True), ("random", "probabilistic", True),
                                 ("dyadic", "worst", False), ("dyadic", "worst", True)):
        for sl in sls:
            rows.append(oracle_row(sl, values, ErrorModel(kind), detect))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def kernel_table(sls=KERNEL_SLS) -> list[dict]:
    from fuzz.judge import run_case
    from tbe import KernelConfig
    from tbe.backward_long import FAULT_CHUNK_LIMIT

    rows = []
    for values in ("random", "dyadic"):
        for sl in sls:
            spec = issue_spec(sl, values)
            faults = ["skip_last_chunk_update"]
            if sl > FAULT_CHUNK_LIMIT * KernelConfig().chunk_size:
                faults += ["drop_chunk_past_4096", "zero_update_past_2p20"]
            t0 = time.perf_counter()
            clean = run_case(spec, KernelConfig())
            row = {"sl": sl, "values": values, "clean_ok": clean.ok, "clean_max_ratio": clean.max_ratio,
                   "seconds": round(time.perf_counter() - t0, 2)}
            for f in faults:
                r = run_case(spec, KernelConfig(faults=(f,)))
                row[f] = {"max_ratio": r.max_ratio, "caught": not r.ok}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def markdown(rows: list[dict], kind: str) -> str:
    if kind == "oracle":
        out = ["| data | bound | SL | mean true update | mean bound | bound / update (median) | exact entries | "
               "one lookup / bound |", "|---|---|---|---|---|---|---|---|"]
        out += [f"| {r['values']} | {r['bound']} | {r['sl']:,} | {r['mean_update']:.3g} | {r['mean_bound']:.3g} | "
                f"{r['median_ratio']:.3g} | {r['exact']}/16 | {r['one_lookup_over_bound']:.3g} |" for r in rows]
        return "\n".join(out)
    out = ["| data | SL | clean: max ratio | skip_last_chunk_update: max ratio | caught | large-run faults caught |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        f = r["skip_last_chunk_update"]
        large = [k for k in ("drop_chunk_past_4096", "zero_update_past_2p20") if k in r]
        big = ", ".join(f"{k}: {'yes' if r[k]['caught'] else 'no'}" for k in large) or "-"
        out.append(f"| {r['values']} | {r['sl']:,} | {r['clean_max_ratio']:.3g}{'' if r['clean_ok'] else ' FAIL'} | "
                   f"{f['max_ratio']:.3g} | {'yes' if f['caught'] else 'no'} | {big} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("table", choices=("oracle", "kernels"))
    p.add_argument("--sl", type=int, action="append", default=None, help="segment lengths (repeatable)")
    p.add_argument("--out", default=None, help="also write the rows as JSON here")
    args = p.parse_args(argv)
    rows = (oracle_table if args.table == "oracle" else kernel_table)(tuple(args.sl) if args.sl else
                                                                     (ORACLE_SLS if args.table == "oracle" else KERNEL_SLS))
    print(markdown(rows, args.table))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name() if
                       torch.cuda.is_available() else "cpu", "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
