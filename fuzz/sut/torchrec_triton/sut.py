"""The ``torchrec-triton`` SUT record: capabilities per device and per version, availability, the paths a case takes.

Capabilities, declared as TorchRec's module has them: SUM pooling only; exact SGD and row-wise Adagrad;
fp32, fp16 and bf16 weights and outputs; int32 and int64 indices (offsets follow the indices' dtype); any D;
per-sample weights, whose gradient it must return; every bounds-check mode on the CPU. On a GPU, FATAL is
left out (FBGEMM's check rejects with a device-side assert, which ends the CUDA context), and so are broken
offsets: a positive first offset leaves ids in no bag that the backward still reads, an illegal memory access
on the H100 (``torchrec-broken-offsets-out-of-bounds``; on the CPU the sanitizer stops it). Id -1 is never fed:
FBGEMM's check passes it as a pruned row, and the generic kernels then read and update the row before the
table, which corrupts the heap (a finding of its own, docs/findings/torchrec-triton.md).
Its KernelConfig fields are its switches (``fuzz.sut.torchrec_triton.adapter``); the campaign draws them as
override profiles of its own.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional

import torch

from fuzz.errors import SUTError
from fuzz.sut.protocol import SUT, Capabilities, TBEParams
from fuzz.sut.torchrec_triton import adapter
from fuzz.sut.torchrec_triton.loader import Loaded, gate_stand_ins, load
from cases import ID_KINDS
from tbe.backend import INTERPRETED
from tbe.modes import BoundsCheckMode, Optimizer, Pooling

NAME = "torchrec-triton"
LONG_RUN_THRESHOLD = 256  # TorchRec's _LONG_RUN_THRESHOLD: a run this long or longer takes the long tier
HISTOGRAM_IDS = 256       # the small-table kernel histograms a bag's first 256 ids; a longer bag invalidates
                          # the saved histogram

CAPABILITIES_CPU = Capabilities(poolings=("sum",), devices=("cpu",), kernel_config=True, triton_kernels=True,
                                config_fields=tuple(adapter.SWITCHES),
                                bad_ids=tuple(k for k in ID_KINDS if k != "minus_one"))
CAPABILITIES_CUDA = dataclasses.replace(CAPABILITIES_CPU, devices=("cuda",), bounds_modes=("warning", "ignore", "none"),
                                        bad_offsets=())


def profiles(fields: tuple[str, ...]) -> tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]:
    """Override profiles of its switches: each one away from its default, and two pairs with stochastic rounding."""
    singles = (("fused bounds check", (("fused_bounds_check", True),)),
               ("hoisted transpose", (("hoist_transpose", True),)),
               ("no bag-size hints", (("small_table_path", False),)),
               ("stochastic rounding", (("stochastic_rounding", True),)),
               ("hoisted transpose, stochastic rounding", (("hoist_transpose", True), ("stochastic_rounding", True))),
               ("fused bounds check, stochastic rounding", (("fused_bounds_check", True),
                                                             ("stochastic_rounding", True))))
    return tuple(p for p in singles if all(f in fields for f, _ in p[1]))


def device() -> torch.device:
    return torch.device("cpu") if INTERPRETED or not torch.cuda.is_available() else torch.device("cuda")


def capabilities(loaded: Optional[Loaded]) -> Capabilities:
    base = CAPABILITIES_CUDA if device().type == "cuda" else CAPABILITIES_CPU
    if loaded is None:
        return base
    fields = tuple(f for f in adapter.SWITCHES if f in adapter.config_fields(loaded))
    return dataclasses.replace(base, config_fields=fields, config_profiles=profiles(fields),
                               feature_table_map="feature_table_map" in adapter.constructor_args(loaded),
                               vbe=adapter.takes_vbe(loaded))


def probe_params() -> TBEParams:
    """Two tables, Adagrad, one weighted step's worth: enough to load every op a training step calls."""
    return TBEParams(((4, 8), (3, 4)), Optimizer.EXACT_ROWWISE_ADAGRAD, 0.1, 1e-8, torch.float32, torch.float32,
                     Pooling.SUM, BoundsCheckMode.WARNING,
                     initial_weights=(torch.ones(4, 8), torch.ones(3, 4)))


@functools.lru_cache(maxsize=None)
def unavailable_reason(source: Optional[str]) -> Optional[str]:
    """None when the module loads and a training step runs here, else why not."""
    try:
        loaded = load(source)
    except SUTError as e:
        return str(e)
    install_cpu_stand_ins()
    try:
        inst = adapter.TorchRecInstance(loaded, device(), probe_params())
        out = inst.forward(torch.tensor([0, 1, 2, 0]), torch.tensor([0, 1, 2, 3, 4]))
        inst.backward(torch.ones_like(out))
        if device().type == "cuda":
            torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001  (e.g. fbgemm-gpu-cpu on a GPU host: no CUDA ops registered)
        return f"TorchRec's Triton TBE does not run a training step here ({type(e).__name__}: " \
               f"{str(e).splitlines()[0][:200] if str(e) else ''})"
    return None


def paths(loaded: Loaded, case: Any, t: Any, config: Any) -> frozenset[str]:
    """The kernels the case runs in this version (what the summary counts as paths exercised); a bad-id case's
    forward and bounds check only (its runs depend on how the ids were repaired)."""
    from cases import BadIdCase

    spec = case.spec

    settings = adapter.settings(loaded, TBEParams(tuple(spec.tables), Optimizer(spec.optimizer), 0.0, 0.0,
                                                  torch.float32, torch.float32, Pooling.SUM,
                                                  BoundsCheckMode(spec.bounds_check)), config)
    found: set[str] = set()
    mode = BoundsCheckMode(spec.bounds_check)
    weighted = spec.weighted
    hoisted = bool(settings.get("hoist_transpose_to_forward"))
    fused = (bool(settings.get("fused_bounds_check")) and mode == BoundsCheckMode.WARNING and not weighted
             and not hoisted)
    if mode != BoundsCheckMode.NONE:
        found.add("bounds:fused" if fused else "bounds:fbgemm")
    B = spec.batch_size
    small = [f for f, (e, d) in enumerate(spec.tables) if e <= 64 and 64 <= d <= 128]
    histogram = (settings.get("bag_size_hints") is not None and spec.weights_dtype == "fp16"
                 and spec.output_dtype == "fp32" and not weighted and bool(small))
    if weighted:
        found.add("fwd:weighted")
    else:
        if histogram:
            found.add("fwd:small_table")
        if len(small) < len(spec.tables) or not histogram:
            wide = B >= 65536 and spec.weights_dtype != "fp32"
            found.add("fwd:generic_4_bags" if histogram else "fwd:generic_unroll8" if wide else "fwd:generic")
    if t is None or not t.grad_outputs or t.indices.numel() == 0 or case.bad is not None:
        return frozenset(found)
    from cases.spec import lookup_features
    from oracles.elements import layout_tensors

    table_of = lookup_features(spec, t.offsets.cpu(), t.indices.numel())
    lin = layout_tensors(spec.layout, torch.device("cpu")).hash_size_cumsum[table_of] + t.indices.cpu().to(torch.int64)
    sl = torch.unique(lin, return_counts=True)[1]
    prefix = "bwd:weighted_" if weighted else "bwd:"
    if bool((sl < LONG_RUN_THRESHOLD).any()):
        found.add(prefix + "short")
    if bool((sl >= LONG_RUN_THRESHOLD).any()):
        found.add(prefix + "long")
    if bool((sl > LONG_RUN_THRESHOLD).any()):
        found.add(prefix + "long_multi_program")
    if hoisted:
        found.add("bwd:hoisted_transpose")
    biggest = max(small, key=lambda f: spec.tables[f][1], default=None) if histogram else None
    if biggest == 0 and spec.optimizer == "exact_rowwise_adagrad" and not hoisted and B > 0:
        found.add("bwd:saved_histogram")
    return frozenset(found)


def install_cpu_stand_ins() -> None:
    """On the CPU: the transpose op FBGEMM lacks there, the interpreter's bf16 casts made to round as compiled
    kernels do (``interpreter_fixes``), and on a torch built without CUDA, ``torch.cuda.is_current_stream_capturing``
    (which raises there) answering False: no stream can be capturing."""
    if device().type != "cpu":
        return
    from fuzz.sut.torchrec_triton import interpreter_fixes
    from fuzz.sut.torchrec_triton.cpu_ops import ensure_registered

    ensure_registered()
    interpreter_fixes.install()
    try:
        torch.cuda.is_current_stream_capturing()
    except RuntimeError:
        torch.cuda.is_current_stream_capturing = lambda: False


def factory(source: Optional[str] = None) -> SUT:
    """The SUT for TorchRec's Triton TBE from ``source`` (a folder), else from an installed torchrec."""
    try:
        loaded: Optional[Loaded] = load(source)
        error = None
    except SUTError as e:
        loaded, error = None, str(e)
    caps = capabilities(loaded)
    if loaded is None:
        return SUT(NAME, caps, _refuse(error), lambda: error, f"TorchRec's Triton TBE (not loaded: {error})")
    where = "Triton interpreter" if device().type == "cpu" else "compiled"
    description = f"{loaded.describe()} ({where})"

    def build(p: TBEParams) -> adapter.TorchRecInstance:
        install_cpu_stand_ins()
        return adapter.TorchRecInstance(loaded, device(), p)

    return SUT(NAME, caps, build, lambda: unavailable_reason(source), description, version=loaded.version,
               paths=functools.partial(paths, loaded), tour=tour, notes=lambda: stand_ins(source))


def _refuse(error: Optional[str]):
    def build(p: TBEParams) -> Any:
        raise SUTError(f"TorchRec's Triton TBE is not available: {error}")
    return build


def stand_ins(source: Optional[str]) -> tuple[str, ...]:
    """What stood in for missing pieces, in words (the loader's and the feature gates read so far)."""
    loaded = load(source)
    extra = ("record_forward_event (a torch.cuda.Event): skipped on the CPU",) if device().type == "cpu" else ()
    cpu = ("fbgemm::transpose_embedding_input and torch's mm.dtype: this project's CPU kernels (none exist for the CPU)",
           "Triton's interpreter made to splat to the result type and cast fp32 to bf16 to nearest even, as compiled kernels do",
           "torch.cuda.is_current_stream_capturing() answers False where torch has no CUDA (it raises there)") \
        if device().type == "cpu" else ()
    return loaded.stand_ins + gate_stand_ins(loaded) + extra + cpu


def tour(max_lookups: int) -> list:
    """Opening cases aimed at TorchRec's own paths (cheapest first; those ``max_lookups`` affords): the generic
    forward's 4-wide unroll and its remainder, runs just under, at and past the long tier's 256 lookups and one
    of several of its programs, weighted duplicates across tiers, the small-table histogram forward and its
    saved-histogram Adagrad (a bag past 256 ids beside it), bad ids with and without the fused check, an
    empty batch and two steps."""
    from cases import BadBatchSpec, BadId, BadIdCase, CaseSpec, HotRow

    th = LONG_RUN_THRESHOLD
    cases: list = [
        CaseSpec(tables=((50, 5), (40, 33)), batch_size=7, length_profile="uniform", max_length=9, seed=40),
        CaseSpec(tables=((300, 8),), batch_size=4, length_profile="fixed", max_length=1,
                 hot_rows=(HotRow(0, 3, th - 1), HotRow(0, 9, th)), optimizer="exact_rowwise_adagrad", seed=41),
        CaseSpec(tables=((100, 12),), batch_size=5, length_profile="fixed", max_length=2,
                 hot_rows=(HotRow(0, 7, th + 1), HotRow(0, 8, 2 * th + 3)), weighted=True, seed=42),
        CaseSpec(tables=((64, 64), (20, 4)), batch_size=17, weights_dtype="fp16", output_dtype="fp32",
                 length_profile="fixed", max_length=64, optimizer="exact_rowwise_adagrad", seed=43),
        CaseSpec(tables=((16, 128),), batch_size=3, weights_dtype="fp16", output_dtype="fp32",
                 length_profile="fixed", max_length=HISTOGRAM_IDS + 3, optimizer="exact_rowwise_adagrad", seed=44),
        CaseSpec(tables=((30, 16), (30, 16)), batch_size=0, seed=45),
        CaseSpec(tables=((40, 24),), batch_size=6, length_profile="uniform", max_length=6, steps=2,
                 optimizer="exact_rowwise_adagrad", weights_dtype="fp16", output_dtype="fp16", seed=46),
    ]
    for i, kinds in enumerate((("rows", "negative"), ("dtype_max", "rows_plus_one"))):
        bad = BadBatchSpec(tables=((20, 8), (10, 4)), batch_size=5, max_length=6,
                           bad_ids=tuple(BadId(k, table=("first", "last")[j % 2]) for j, k in enumerate(kinds)),
                           seed=47 + i)
        cases.append(BadIdCase(CaseSpec(tables=bad.tables, batch_size=bad.batch_size, bounds_check="warning",
                                        seed=47 + i), bad))
    return [c for c in cases if getattr(c, "expected_lookups", lambda: 0)() <= max_lookups]
