"""The probe batch for mutation testing: fixed cases over every kernel path, fingerprinted bit for bit.

A mutant that survives the check is *suspected equivalent* when every probe gives bit-identical
outputs, updated weights, momentum, per-sample-weight gradients, warning counts and errors as
the original code, and the probes executed its mutated line (``--trace`` records which jit
lines the probes execute on the original; the Triton interpreter runs jit code as Python with
the source's line numbers, so ``sys.settrace`` sees it). Probes always run in the interpreter
on the CPU, where programs run one at a time: memory-ordering mutants (``sem=``, ``scope=``,
barriers) cannot be told apart there and are never called equivalent by this test.

``python -m fuzz.mutate.probe --out fp.json [--trace]`` runs the probes in the current tree.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before tbe: probes are deterministic and traceable on the CPU

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, NamedTuple, Optional  # noqa: E402

import torch  # noqa: E402

from cases import ID_KINDS, AnyCase, BadBatchSpec, BadId, BadIdCase, CaseSpec, HotRow, tensors  # noqa: E402
from fuzz.sut import build_module  # noqa: E402
from tbe import KernelConfig  # noqa: E402

SMALL = KernelConfig(long_run_threshold=8, chunk_size=4)
STRIDED = SMALL.replace(classify_block=4, long_grid_multiplier=1, short_grid_multiplier=1)
SMALL_TABLE = KernelConfig(small_table_max_rows=16, small_table_min_dim=16, small_table_max_dim=32,
                           small_table_min_pooling=1, small_table_bags_per_program=2, small_table_histogram_ids=16)


def _bad(tables, mode: str, pooling: str, ids=(), offsets=(), weighted=False, length=5, seed=0) -> BadIdCase:
    bad = BadBatchSpec(tables, 3, max_length=length, weighted=weighted, bad_ids=tuple(ids), bad_offsets=tuple(offsets),
                       seed=seed)
    spec = CaseSpec(tables=tables, batch_size=3, pooling=pooling, bounds_check=mode, weighted=weighted,
                    max_length=length, optimizer="exact_rowwise_adagrad", seed=seed)
    return BadIdCase(spec, bad)


_EVERY_ID = [BadId(k, t, b, e) for k, (t, b, e) in zip(ID_KINDS, [("first", "first", "first"), ("last", "last", "last"),
             ("first", "last", "first"), ("last", "first", "last"), ("first", "first", "last"), ("last", "last", "first")])]


class Probe(NamedTuple):
    label: str
    case: AnyCase
    config: KernelConfig
    grad_edit: Optional[Callable[[torch.Tensor], torch.Tensor]] = None  # an upstream gradient cases cannot draw


def _non_finite_grad(grad: torch.Tensor) -> torch.Tensor:
    """The drawn upstream gradient with inf, -inf and NaN in the first two bags' first columns."""
    grad = grad.clone()
    grad[0, 0], grad[0, 1], grad[1, 0] = float("inf"), float("nan"), float("-inf")
    return grad


def probes() -> list[Probe]:
    """Together they run every kernel and every compile-time and data-dependent branch, every
    persistent grid-stride loop and gather loop for more than one turn (grid multipliers 1: two programs
    on the CPU; small-table bags past one counting step), and carry optimizer state over two steps."""
    return [Probe(*p) for p in _cases()] + [
        Probe("small-table backward, non-finite upstream gradients, adagrad",
              CaseSpec(tables=((12, 20),), batch_size=4, length_profile="fixed", max_length=20, weights_dtype="fp16",
                       optimizer="exact_rowwise_adagrad", seed=38), SMALL_TABLE, _non_finite_grad),
    ]


def _cases() -> list[tuple[str, AnyCase, KernelConfig]]:
    t3 = ((50, 24), (13, 5), (9, 40))
    return [
        ("grad-accum long tier, strided grids, weighted mean adagrad, 2 steps",
         CaseSpec(tables=t3, batch_size=5, weighted=True, pooling="mean", optimizer="exact_rowwise_adagrad",
                  hot_rows=(HotRow(0, 3, 13), HotRow(2, 0, 9)), max_length=6, steps=2, learning_rate=0.5, seed=11),
         STRIDED),
        ("fused long tier, fp16 weights, bf16 output, sgd sum",
         CaseSpec(tables=((40, 17), (6, 64)), batch_size=4, weights_dtype="fp16", output_dtype="bf16",
                  hot_rows=(HotRow(0, 1, 11), HotRow(1, 2, 8)), max_length=5, learning_rate=2.0, seed=12),
         SMALL.replace(fused_long_tier=True, long_grid_multiplier=1, short_grid_multiplier=1)),
        ("rows wider than the largest bucket, weighted adagrad",
         CaseSpec(tables=((20, 9), (8, 3)), batch_size=4, weighted=True, pooling="mean",
                  optimizer="exact_rowwise_adagrad", hot_rows=(HotRow(0, 5, 10),), max_length=4, seed=13),
         SMALL.replace(dim_buckets=(4,))),
        ("rows wider than the largest bucket, fused long tier, sgd",
         CaseSpec(tables=((20, 9),), batch_size=3, weights_dtype="bf16", output_dtype="fp16",
                  hot_rows=(HotRow(0, 2, 9),), max_length=4, learning_rate=0.5, seed=14),
         SMALL.replace(dim_buckets=(4,), fused_long_tier=True)),
        ("short runs side by side, bf16 weights, weighted sum adagrad",
         CaseSpec(tables=((30, 16), (7, 6)), batch_size=5, weights_dtype="bf16", weighted=True,
                  optimizer="exact_rowwise_adagrad", max_length=6, id_skew=1.1, hot_rows=(HotRow(0, 0, 2),),
                  steps=2, seed=15),
         SMALL.replace(bwd_short_runs_per_program=4, short_grid_multiplier=1)),
        ("one short run per program (the gather kernel), weighted sgd",
         CaseSpec(tables=((30, 16),), batch_size=4, weighted=True, max_length=5, seed=29),
         SMALL.replace(bwd_short_runs_per_program=1)),
        ("short runs side by side, mean sgd",
         CaseSpec(tables=((30, 16),), batch_size=4, pooling="mean", max_length=5, seed=16),
         SMALL.replace(bwd_short_runs_per_program=2)),
        ("small-table path, bags past one counting step, mean",
         CaseSpec(tables=((12, 20),), batch_size=5, length_profile="fixed", max_length=35, weights_dtype="fp16",
                  pooling="mean", seed=17), SMALL_TABLE),
        ("small-table path, uneven and empty bags, sum",
         CaseSpec(tables=((16, 32),), batch_size=3, length_profile="uniform", max_length=24, weights_dtype="fp16",
                  index_dtype="int32", seed=18), SMALL_TABLE),
        ("default config: wide rows, weighted adagrad, int32 ids",
         CaseSpec(tables=((100, 64), (20, 300)), batch_size=3, weighted=True, index_dtype="int32",
                  optimizer="exact_rowwise_adagrad", max_length=6, seed=19), KernelConfig()),
        ("hoisted transpose, int64 linear index, zipf bags",
         CaseSpec(tables=((25, 8), (5, 12)), batch_size=6, length_profile="zipf", max_length=9, index_dtype="int32",
                  hot_rows=(HotRow(0, 4, 9),), weights_dtype="fp16", seed=20),
         SMALL.replace(hoist_transpose=True, index_dtype="int64", fused_long_tier=True)),
        ("per-bucket forward tiles, narrow gathers",
         CaseSpec(tables=((40, 30), (9, 7)), batch_size=5, weighted=True, max_length=7, seed=21),
         SMALL.replace(fwd_bucket_tiles=((32, 2, 2, 4),), fwd_gather_weighted=2, fwd_bags_per_program=3)),
        ("empty bags only", CaseSpec(tables=((5, 4), (3, 2)), batch_size=3, length_profile="empty", seed=22), SMALL),
        ("shared tables: short runs side by side, grad-accum long tier, weighted mean adagrad",
         CaseSpec(tables=((30, 16), (9, 8)), batch_size=4, feature_table_map=(0, 1, 0), weighted=True, pooling="mean",
                  optimizer="exact_rowwise_adagrad", hot_rows=(HotRow(0, 2, 12),), max_length=6, seed=30),
         SMALL.replace(bwd_short_runs_per_program=4, short_grid_multiplier=1)),
        ("shared tables: one short run per program, fused long tier, sgd",
         CaseSpec(tables=((30, 16),), batch_size=4, feature_table_map=(0, 0), hot_rows=(HotRow(0, 1, 10),),
                  max_length=5, seed=31), SMALL.replace(bwd_short_runs_per_program=1, fused_long_tier=True)),
        ("VBE: a feature of batch 0, short runs side by side, grad-accum long tier, weighted mean adagrad",
         CaseSpec(tables=((30, 16), (9, 8), (12, 4)), batch_size=5, batch_size_per_feature=(5, 0, 3), weighted=True,
                  pooling="mean", optimizer="exact_rowwise_adagrad", hot_rows=(HotRow(0, 2, 12),), max_length=6,
                  seed=33),
         SMALL.replace(bwd_short_runs_per_program=4, short_grid_multiplier=1)),
        ("VBE on shared tables: one short run per program, fused long tier, fused check, sgd",
         CaseSpec(tables=((30, 16),), batch_size=4, feature_table_map=(0, 0), batch_size_per_feature=(4, 2),
                  hot_rows=(HotRow(0, 1, 10),), max_length=5, seed=34),
         SMALL.replace(bwd_short_runs_per_program=1, fused_long_tier=True, fused_bounds_check=True)),
        ("VBE: per-gather long sum, rows wider than the bucket, hoisted transpose, weighted sgd",
         CaseSpec(tables=((20, 9), (7, 5)), batch_size=3, batch_size_per_feature=(3, 1), weighted=True,
                  hot_rows=(HotRow(0, 3, 9),), max_length=4, seed=35),
         SMALL.replace(bwd_long_vector=False, dim_buckets=(4,), hoist_transpose=True)),
        ("stochastic rounding: fp16 short runs side by side and the grad-accum apply, adagrad, 2 steps",
         CaseSpec(tables=((30, 16), (9, 8)), batch_size=4, weights_dtype="fp16", optimizer="exact_rowwise_adagrad",
                  hot_rows=(HotRow(0, 2, 12),), max_length=6, steps=2, seed=36),
         SMALL.replace(stochastic_rounding=True, bwd_short_runs_per_program=4)),
        ("stochastic rounding: bf16, one short run per program, fused long tier, wide rows, sgd",
         CaseSpec(tables=((20, 9),), batch_size=3, weights_dtype="bf16", hot_rows=(HotRow(0, 3, 9),), max_length=4,
                  seed=37),
         SMALL.replace(stochastic_rounding=True, bwd_short_runs_per_program=1, fused_long_tier=True,
                       dim_buckets=(4,))),
        ("shared tables: per-gather long sum, rows wider than the bucket, fused check",
         CaseSpec(tables=((20, 9), (7, 5)), batch_size=3, feature_table_map=(1, 0, 1), hot_rows=(HotRow(1, 3, 9),),
                  max_length=4, seed=32),
         SMALL.replace(bwd_long_vector=False, dim_buckets=(4,), fused_bounds_check=True)),
        ("bad ids and offsets, standalone check, warning, multi-block",
         _bad(((6, 5), (9, 3)), "warning", "mean", _EVERY_ID, ("decreasing", "last_long", "first_positive"),
              weighted=True, seed=23), SMALL.replace(bounds_check_block=4)),
        # 81 offsets in blocks of 4: more block maxima than the repair folds, so the carry scan launches
        ("broken offsets over many blocks, standalone check, warning (the repair's carry scanned)",
         BadIdCase(CaseSpec(tables=((6, 5), (9, 3)), batch_size=40, bounds_check="warning", max_length=2, seed=28),
                   BadBatchSpec(((6, 5), (9, 3)), 40, max_length=2, bad_offsets=("decreasing", "last_long"), seed=28)),
         SMALL.replace(bounds_check_block=4)),
        # one table, 4 offsets in blocks of 2: the id check's launch also takes the offsets' block maxima
        ("bad ids and offsets on one table, standalone check, warning, multi-block",
         _bad(((9, 3),), "warning", "sum", _EVERY_ID[:3], ("decreasing", "last_long"), seed=29),
         SMALL.replace(bounds_check_block=2)),
        ("bad ids and offsets, fused check, ignore",
         _bad(((6, 5), (9, 3)), "ignore", "sum", _EVERY_ID, ("past_end", "first_negative"), seed=24),
         SMALL.replace(fused_bounds_check=True, bounds_check_block=4)),
        ("bad ids, fused check, warning, small-table path",
         BadIdCase(
             CaseSpec(tables=((12, 20),), batch_size=3, pooling="mean", bounds_check="warning", max_length=40,
                      weights_dtype="fp16", seed=25),
             BadBatchSpec(((12, 20),), 3, max_length=40, bad_ids=tuple(_EVERY_ID[:3]), bad_offsets=("last_short",),
                          seed=25)),
         SMALL_TABLE.replace(fused_bounds_check=True, bounds_check_block=4)),
        ("fatal: bad id, standalone", _bad(((6, 5), (9, 3)), "fatal", "sum", [BadId("rows", "last", "last", "first")],
                                           seed=26), SMALL),
        ("fatal: bad id, fused", _bad(((6, 5), (9, 3)), "fatal", "sum", [BadId("negative", "last", "first", "last")],
                                      seed=27), SMALL.replace(fused_bounds_check=True)),
        ("fatal: decreasing offsets", _bad(((6, 5),), "fatal", "mean", (), ("decreasing",), seed=28), SMALL),
    ]


def _h(t: torch.Tensor) -> str:
    t = t.detach().cpu().contiguous()
    return f"{t.dtype}{list(t.shape)}:" + hashlib.sha256(t.view(torch.uint8).numpy().tobytes()).hexdigest()[:20]


def fingerprint(case: AnyCase, config: KernelConfig,
                grad_edit: Optional[Callable[[torch.Tensor], torch.Tensor]] = None) -> list[Any]:
    """Every observable result of the case, step by step (a raised error is a result too); ``grad_edit`` changes
    each step's upstream gradient first."""
    spec = case.spec
    t = tensors(case)
    module = build_module(spec, config)
    out: list[Any] = []
    for grad in t.grad_outputs or [None]:
        psw = None if t.per_sample_weights is None else t.per_sample_weights.clone().requires_grad_(True)
        try:
            y = module(t.indices, t.offsets, psw, batch_size_per_feature=spec.batch_size_per_feature)
            rec = {"out": _h(y), "warnings": int(module.bounds_check_warnings[0])}
            if grad is not None:
                y.backward(grad if grad_edit is None else grad_edit(grad))
                rec.update(weights=_h(module.weights), momentum=_h(module.momentum),
                           psw_grad=None if psw is None else _h(psw.grad))
        except Exception as e:  # noqa: BLE001 - an error is an observable result
            rec = {"raised": f"{type(e).__name__}: {e}"[:300]}
        out.append(rec)
    return out


class _Tracer:
    """Records (file, line) of every line executed in ``root``/tbe (the interpreter's jit code included)."""

    def __init__(self, root: Path) -> None:
        self.prefix = str((root / "tbe").resolve()) + os.sep
        self.lines: dict[str, set[int]] = {}

    def __call__(self, frame, event, arg):
        if not frame.f_code.co_filename.startswith(self.prefix):
            return None
        name = "tbe/" + frame.f_code.co_filename[len(self.prefix):]
        seen = self.lines.setdefault(name, set())

        def local(f, ev, a):
            if ev == "line":
                seen.add(f.f_lineno)
            return local
        seen.add(frame.f_lineno)
        return local


def run(trace: bool = False) -> dict[str, Any]:
    """{"probes": {label: fingerprint}, "lines": {file: [executed lines]} (with ``trace``)}."""
    torch.manual_seed(0)
    tracer = _Tracer(Path.cwd()) if trace else None
    result: dict[str, Any] = {"probes": {}}
    for probe in probes():
        if tracer is not None:
            sys.settrace(tracer)
        try:
            result["probes"][probe.label] = fingerprint(probe.case, probe.config, probe.grad_edit)
        finally:
            sys.settrace(None)
    if tracer is not None:
        result["lines"] = {k: sorted(v) for k, v in sorted(tracer.lines.items())}
    return result


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m fuzz.mutate.probe")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--trace", action="store_true", help="also record the jit lines the probes execute")
    args = p.parse_args()
    args.out.write_text(json.dumps(run(args.trace), indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
