"""The system under test (SUT): the protocol a TBE implements to be fuzzed, and the registry of them.

A SUT is a ``SUT`` record: a name, its ``Capabilities`` (what it can be asked to do; the
strategies draw only that), ``build(params) -> instance`` and ``available() -> reason or
None``. An instance is duck-typed:

- ``forward(indices, offsets, per_sample_weights=None) -> [B, sum D]`` in the output dtype; a SUT with the
  ``vbe`` capability also takes ``batch_size_per_feature`` (feature f has B_f bags, offsets sum B_f + 1 entries)
  and then returns the flat [sum B_f * D_f] output, feature f's [B_f, D_f] block after the one before.
  Inputs arrive as CPU tensors (the instance moves them; an optional ``device`` attribute
  names where it computes, and the FP64 references run there too); with grad enabled the
  forward keeps what its ``backward`` needs. Under FATAL it raises ``FatalBoundsCheck`` on
  invalid input.
- ``backward(grad_output) -> per-sample-weight gradient or None`` (``grad_output`` shaped as the output): backward of the last
  forward with the optimizer update applied in place, once per distinct row.
- ``weights() -> [E_t, D_t] per table`` (or ``packed_weights()``, flat in table order) and
  ``momentum() -> [E_t] fp32 per table`` (row-wise Adagrad; None for SGD).
- ``bounds_check_warnings() -> int``: the cumulative count (only if it offers WARNING).

The driver always passes ``params.initial_weights`` (per table, the weights' dtype) and
reads every result back, so an instance may keep its state anywhere. Names resolve to
built-in adapters, to the ``tbe_fuzz.suts`` entry-point group, or to ``module:factory``;
a factory is a callable returning a ``SUT`` (or the ``SUT`` itself). A SUT that loads its code from a
source tree (TorchRec's Triton TBE) is addressed as ``NAME@DIR`` (``address``; ``--sut-source DIR`` on the
command line): its factory is called with ``source=DIR``, and the address, a plain string, travels to
worker processes and into artifacts like a name.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from importlib import metadata
from typing import Any, Callable, Optional, Sequence

import torch

from fuzz.errors import FatalBoundsCheck, SUTError  # noqa: F401  (FatalBoundsCheck: raised by SUTs, named here by the protocol)
from cases import ID_KINDS, OFFSET_KINDS
from tbe.modes import BoundsCheckMode, FloatDtype, IndexDtype, Optimizer, Pooling

GROUP = "tbe_fuzz.suts"
DEFAULT = "triton"
BUILTIN = {
    "triton": "fuzz.sut.triton_tbe:factory",
    "fbgemm-cpu": "fuzz.sut.fbgemm_cpu:factory",
    "fbgemm-cuda": "fuzz.sut.fbgemm_cuda:factory",
    "torch": "fuzz.sut.torch_tbe:factory",
    "torchrec-triton": "fuzz.sut.torchrec_triton:factory",
}


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a SUT can be asked to do; campaigns, the gate and the self-test draw within it."""

    weights_dtypes: tuple[str, ...] = tuple(FloatDtype)
    output_dtypes: tuple[str, ...] = tuple(FloatDtype)
    index_dtypes: tuple[str, ...] = tuple(IndexDtype)
    dim_multiple: int = 1                       # every D is a multiple of this
    max_dim: Optional[int] = None
    poolings: tuple[str, ...] = tuple(Pooling)
    optimizers: tuple[str, ...] = ("exact_sgd", "exact_rowwise_adagrad")
    bounds_modes: tuple[str, ...] = tuple(BoundsCheckMode)  # WARNING means it counts (bounds_check_warnings)
    bad_ids: tuple[str, ...] = ID_KINDS         # invalid ids it may be fed (strategies.bad_inputs kinds)
    bad_offsets: tuple[str, ...] = OFFSET_KINDS  # broken offsets it may be fed
    per_sample_weights: bool = True
    feature_table_map: bool = False             # several features may read one table (TBEParams.feature_table_map)
    vbe: bool = False                           # forward takes batch_size_per_feature (a batch size per feature)
    vbe_index_dtypes: tuple[str, ...] = tuple(IndexDtype)  # the index dtypes it is fed with VBE
    psw_grad: bool = True                       # backward returns the per-sample-weight gradient
    empty_batch: bool = True                    # accepts B = 0
    devices: tuple[str, ...] = ("cpu",)
    kernel_config: bool = False                 # params.config (a KernelConfig) tunes it
    planted_faults: bool = False                # KernelConfig.faults plants its known bugs
    project_kernels: bool = False               # it runs this project's kernels (tbe): the gate's static, oracle
                                                # and performance levels and the FBGEMM sample beside it apply
    triton_kernels: bool = False                # it runs Triton kernels (so, without a GPU, in the interpreter)
    memory_safe: bool = False                   # its own code checks every access it makes to the ids it is fed
                                                # (torch ops; a library validating ids in every mode it is fed), so a
                                                # wrong answer wrote nothing outside its tensors: its worker goes on
    config_fields: Optional[tuple[str, ...]] = None  # with kernel_config: the KernelConfig fields it reads (None: all)
    config_profiles: Optional[tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]] = None  # its override profiles
                                                # (label, ((field, value), ...)); None: strategies.config_space's

    def __post_init__(self) -> None:
        for field, allowed in (("weights_dtypes", tuple(FloatDtype)), ("output_dtypes", tuple(FloatDtype)),
                               ("index_dtypes", tuple(IndexDtype)), ("vbe_index_dtypes", tuple(IndexDtype)),
                               ("poolings", tuple(Pooling)),
                               ("optimizers", tuple(Optimizer)), ("bounds_modes", tuple(BoundsCheckMode)),
                               ("bad_ids", ID_KINDS), ("bad_offsets", OFFSET_KINDS)):
            values = tuple(getattr(self, field))
            if (not values and not field.startswith("bad_")) or any(v not in allowed for v in values):
                raise ValueError(f"Capabilities.{field} must be a non-empty subset of {allowed}, got {values!r}")
            object.__setattr__(self, field, values)
        if self.dim_multiple < 1 or (self.max_dim is not None and self.max_dim < self.dim_multiple):
            raise ValueError(f"Capabilities: dim_multiple={self.dim_multiple}, max_dim={self.max_dim} allow no D")
        if self.config_fields is not None:
            object.__setattr__(self, "config_fields", tuple(self.config_fields))

    def reads(self, field: str) -> bool:
        """Whether ``params.config``'s ``field`` changes what this SUT does."""
        return self.kernel_config and (self.config_fields is None or field in self.config_fields)

    @property
    def everything(self) -> bool:
        """Whether every case the strategies draw is within these capabilities (no fitting needed)."""
        full = Capabilities()
        return (all(set(getattr(full, f)) <= set(getattr(self, f)) for f in
                    ("weights_dtypes", "output_dtypes", "index_dtypes", "poolings", "optimizers", "bounds_modes",
                     "bad_ids", "bad_offsets"))
                and self.dim_multiple == 1 and self.max_dim is None
                and self.per_sample_weights and self.empty_batch and self.feature_table_map and self.vbe)

    def dims_text(self) -> str:
        text = f"D % {self.dim_multiple} == 0" if self.dim_multiple > 1 else "any D"
        return text if self.max_dim is None else f"{text}, D <= {self.max_dim}"

    def describe(self) -> str:
        return (f"weights {'/'.join(self.weights_dtypes)}, output {'/'.join(self.output_dtypes)}, {self.dims_text()}, "
                f"pooling {'/'.join(self.poolings)}, {'/'.join(self.optimizers)}, "
                f"bounds {'/'.join(self.bounds_modes)}, per-sample weights {'yes' if self.per_sample_weights else 'no'}, "
                f"shared tables {'yes' if self.feature_table_map else 'no'}, VBE {'yes' if self.vbe else 'no'}, "
                f"devices {'/'.join(self.devices)}, KernelConfig {'yes' if self.kernel_config else 'no'}, "
                f"planted faults {'yes' if self.planted_faults else 'no'}")


@dataclasses.dataclass(frozen=True)
class TBEParams:
    """Everything ``SUT.build`` gets: the tables, the training set-up, modes and the start weights."""

    tables: tuple[tuple[int, int], ...]      # (E_t, D_t)
    optimizer: Optimizer
    learning_rate: float
    eps: float
    weights_dtype: torch.dtype
    output_dtype: torch.dtype
    pooling: Pooling
    bounds_check: BoundsCheckMode
    seed: int = 0
    initial_weights: Optional[tuple[torch.Tensor, ...]] = None  # per table [E_t, D_t], CPU, weights dtype
    config: Any = None                       # a tbe.KernelConfig for SUTs with kernel_config
    feature_table_map: tuple[int, ...] = ()  # the table each feature reads (empty: one feature per table, in order);
                                             # offsets has F * B + 1 entries and the output one block per feature


@dataclasses.dataclass(frozen=True)
class SUT:
    name: str
    capabilities: Capabilities
    build: Callable[[TBEParams], Any]
    available: Callable[[], Optional[str]] = lambda: None  # None = usable here, else why not
    description: str = ""
    findings: tuple = ()  # its own triaged disagreements (fuzz.judge.known.KnownFinding), beside fuzz.judge.known.TRIAGE
    source: Optional[str] = None  # the source tree it was loaded from (address NAME@DIR), where it has one
    version: str = ""     # what it loaded (a commit, a digest), for summaries and artifacts
    paths: Optional[Callable[..., frozenset[str]]] = None  # (case, tensors, config) -> the kernel paths the case
                                                 # takes in it, for the summary; None: this project's routing
    tour: Optional[Callable[[int], Sequence[Any]]] = None  # (max lookups) -> its own opening cases (CaseSpecs
                                                 # and BadIdCases aimed at its paths), run after the common ones
    notes: Callable[[], tuple[str, ...]] = tuple  # what stood in for pieces it lacks here, said once per run

    @property
    def address(self) -> str:
        """What names it everywhere (``get`` resolves it again): the name, with ``@DIR`` for a source tree."""
        return address(self.name, self.source)

    @property
    def label(self) -> str:
        """Its name, with what it loaded and from where for a SUT loaded from a source tree (for summaries)."""
        if self.source is None and not self.version:
            return self.name
        return f"{self.name} {self.version}" + (f" from {self.source}" if self.source else "")


# ----------------------------------------------------------------------------- instance helpers
def packed_weights(instance: Any, device: Any = "cpu") -> torch.Tensor:
    """A copy of the instance's weights, flat in table order, on ``device``."""
    if hasattr(instance, "packed_weights"):
        return instance.packed_weights().detach().to(device, copy=True).reshape(-1)
    return torch.cat([w.detach().to(device).reshape(-1) for w in instance.weights()])


def packed_momentum(instance: Any, device: Any = "cpu") -> torch.Tensor:
    """A copy of the row-wise momentum, flat in table order, on ``device`` (empty when there is none)."""
    if hasattr(instance, "packed_momentum"):
        return instance.packed_momentum().detach().to(device, copy=True).reshape(-1)
    m = instance.momentum()
    if not m:
        return torch.zeros(0, dtype=torch.float32, device=device)
    return torch.cat([x.detach().to(device).reshape(-1) for x in m])


def warnings_count(instance: Any) -> int:
    if not hasattr(instance, "bounds_check_warnings"):
        raise SUTError(f"{type(instance).__name__} offers WARNING bounds checking but has no bounds_check_warnings()")
    return int(instance.bounds_check_warnings())


# ----------------------------------------------------------------------------- registry
def _entry_points() -> dict[str, Any]:
    return {ep.name: ep for ep in metadata.entry_points(group=GROUP)}


def names() -> list[str]:
    """Every SUT name known here: the built-in ones and those registered under ``tbe_fuzz.suts``."""
    return sorted(set(BUILTIN) | set(_entry_points()))


def _load(target: str) -> Any:
    module, _, attr = target.partition(":")
    if not module or not attr:
        raise SUTError(f"{target!r} is not module:factory")
    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        raise SUTError(f"cannot import {module!r} for SUT {target!r} ({e})") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SUTError(f"module {module!r} has no {attr!r} (SUT {target!r})")
        obj = getattr(obj, part)
    return obj


def address(name: str, source: Optional[str] = None) -> str:
    """The string that names a SUT loaded from ``source`` (an absolute path), or ``name`` alone."""
    if source is None:
        return name
    from pathlib import Path

    return f"{name}@{Path(source).expanduser().resolve()}"


def split_address(text: str) -> tuple[str, Optional[str]]:
    """(name, source or None) of an address made by ``address``."""
    name, at, source = text.partition("@")
    return name, (source if at else None)


def _target(name: str) -> Any:
    """What ``name`` (no source) resolves to: a factory or a ``SUT`` (built-in, entry point, or module:factory)."""
    if name in BUILTIN:
        return _load(BUILTIN[name])
    if name in (eps := _entry_points()):
        try:
            return eps[name].load()
        except Exception as e:  # noqa: BLE001  (a broken plug-in is reported, not raised through)
            raise SUTError(f"entry point {name!r} ({eps[name].value}) failed to load: {type(e).__name__}: {e}") from e
    if ":" in name:
        return _load(name)
    raise SUTError(f"unknown SUT {name!r} (known: {', '.join(names())}; or module:factory)")


@functools.lru_cache(maxsize=None)
def get(name: str) -> SUT:
    """Resolve ``name`` (built-in, entry point, or module:factory; ``NAME@DIR`` calls the factory with
    ``source=DIR``); the SUT's name is set to the name, its source to DIR."""
    import inspect

    if not isinstance(name, str) or not name:
        raise SUTError(f"a SUT name must be a non-empty string, got {name!r}")
    name, source = split_address(name)
    obj = _target(name)
    if source is None:
        sut = obj if isinstance(obj, SUT) else obj() if callable(obj) else obj
    elif callable(obj) and not isinstance(obj, SUT) and "source" in inspect.signature(obj).parameters:
        sut = obj(source=source)
    else:
        raise SUTError(f"SUT {name!r} loads no source tree: --sut-source applies to SUTs whose factory takes "
                       f"source= (torchrec-triton)")
    if not isinstance(sut, SUT):
        raise SUTError(f"SUT {name!r} resolved to {type(sut).__name__}, not a fuzz.sut.protocol.SUT")
    return dataclasses.replace(sut, name=name, source=source)


def require(name: str, kernel_config: bool = False, planted_faults: bool = False, config: Any = None) -> SUT:
    """``get(name)``, refusing one that is unavailable here or lacks a capability the command needs; with
    ``config`` (a KernelConfig), refusing one that sets a field away from its default that the SUT does not read."""
    sut = get(name)
    reason = sut.available()
    if reason is not None:
        raise SUTError(f"SUT {sut.name!r} is not available here: {reason}")
    if kernel_config and not sut.capabilities.kernel_config:
        raise SUTError(f"SUT {sut.name!r} takes no KernelConfig, so there are no two configs of it to compare")
    if config is not None and sut.capabilities.kernel_config:
        unread = sorted(f for f in type(config)().diff(config) if not sut.capabilities.reads(f))
        if unread:
            raise SUTError(f"SUT {sut.name!r} does not read KernelConfig.{unread[0]} (it reads: "
                           f"{', '.join(sut.capabilities.config_fields or ())})")
    if planted_faults and not sut.capabilities.planted_faults:
        raise SUTError(f"SUT {name!r} has no planted faults (KernelConfig.faults); the self-test needs them")
    return sut


def batch_kwargs(spec: Any) -> dict[str, Any]:
    """The keyword a forward takes for ``spec``'s batch: its batch size per feature under VBE, none for a fixed
    batch (so a SUT written before VBE keeps its old call)."""
    sizes = spec.batch_size_per_feature
    return {} if sizes is None else {"batch_size_per_feature": sizes}


def params_for(spec: Any, config: Any, initial_weights: Optional[Sequence[torch.Tensor]]) -> TBEParams:
    """TBEParams for a ``cases.CaseSpec``."""
    return TBEParams(
        tables=tuple(tuple(t) for t in spec.tables),
        optimizer=spec.optimizer,
        learning_rate=float(spec.learning_rate), eps=float(spec.eps),
        weights_dtype=spec.weights_dtype.torch,
        output_dtype=spec.output_dtype.torch,
        pooling=spec.pooling,
        bounds_check=spec.bounds_check,
        seed=int(spec.seed), initial_weights=None if initial_weights is None else tuple(initial_weights),
        config=config, feature_table_map=tuple(spec.feature_table_map),
    )
