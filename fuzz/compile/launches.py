"""Record the kernel launches a real run of the Triton TBE makes, as JSON-able ``Launch`` records.

Every ``kernel[grid](...)`` goes through ``InterpretedFunction.run`` (interpreter) or
``JITFunction.run`` (compiled); ``recording()`` wraps it to note the kernel (module and name),
each argument's type (a tensor's dtype and 16-byte alignment, an int's value class, a float,
a constexpr's value) and ``num_warps``, so ``fuzz.compile.cuda_target`` can rebuild the same
specialization for sm_90 on any machine. ``execute=False`` skips running the kernels: the
launches of the backward depend only on host-known shapes and the config, so a probe costs
no kernel time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
from typing import Any, Callable, Iterator

import torch

# an int keeps only what Triton specializes on: 1, divisible by 16, or neither; i32 or i64
_I32 = 2**31


def int_class(v: int) -> int:
    """A representative of ``v``'s specialization class (same ==1, %16 and int32-range outcome)."""
    big = 0 if -_I32 <= v < _I32 else 2**33
    if v == 1 and not big:
        return 1
    return big + (16 if v % 16 == 0 else 17)


def arg_spec(value: Any) -> dict[str, Any]:
    """What Triton's specialization of one launch argument depends on."""
    if isinstance(value, torch.Tensor):
        return {"kind": "tensor", "dtype": str(value.dtype).removeprefix("torch."),
                "aligned": value.data_ptr() % 16 == 0}
    if isinstance(value, bool):
        return {"kind": "bool", "value": value}
    if isinstance(value, int):
        return {"kind": "int", "value": int_class(value)}
    if isinstance(value, float):
        return {"kind": "float"}
    if value is None:
        return {"kind": "none"}
    raise TypeError(f"launch argument of type {type(value).__name__} is not recorded")


def constexpr_value(value: Any) -> Any:
    """A constexpr's value as JSON (a Triton dtype by name)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    name = getattr(value, "name", None)
    if name is not None:
        return {"tl_dtype": name}
    raise TypeError(f"constexpr of type {type(value).__name__} is not recorded")


@dataclasses.dataclass(frozen=True)
class Launch:
    """One specialization of one kernel: enough to compile it again for any target."""

    module: str
    name: str
    args: tuple[str, ...]          # JSON spec of each non-constexpr parameter, in order
    constexprs: tuple[tuple[str, str], ...]  # (name, JSON value) of keyword constexprs
    num_warps: int

    @property
    def kernel(self) -> str:
        return f"{self.module}.{self.name}"

    def key(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    def to_dict(self) -> dict[str, Any]:
        return {"module": self.module, "name": self.name, "args": [json.loads(a) for a in self.args],
                "constexprs": {k: json.loads(v) for k, v in self.constexprs}, "num_warps": self.num_warps}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Launch":
        return cls(d["module"], d["name"], tuple(json.dumps(a, sort_keys=True) for a in d["args"]),
                   tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in d["constexprs"].items())),
                   int(d["num_warps"]))

    def replace_constexprs(self, **values: Any) -> "Launch":
        c = dict(self.constexprs)
        c.update({k: json.dumps(constexpr_value(v), sort_keys=True) for k, v in values.items()})
        return dataclasses.replace(self, constexprs=tuple(sorted(c.items())))

    def replace_arg(self, index: int, spec: dict[str, Any]) -> "Launch":
        args = list(self.args)
        args[index] = json.dumps(spec, sort_keys=True)
        return dataclasses.replace(self, args=tuple(args))


def _is_constexpr(param: inspect.Parameter) -> bool:
    ann = param.annotation
    return "constexpr" in (ann if isinstance(ann, str) else getattr(ann, "__name__", repr(ann)))


LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


def bound_arguments(fn: Any, args: tuple, kwargs: dict[str, Any]) -> tuple[inspect.Signature, dict[str, Any]]:
    """(signature, arguments by parameter name, defaults applied) of ``fn(*args, **kwargs)``, launch options left out."""
    kwargs = {k: v for k, v in kwargs.items() if k not in LAUNCH_OPTIONS}
    sig = inspect.signature(fn)
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    return sig, dict(bound.arguments)


def make_launch(fn: Any, args: tuple, kwargs: dict[str, Any]) -> Launch:
    """The Launch of ``fn(*args, **kwargs)``: parameters in order, constexprs by name."""
    num_warps = int(kwargs.get("num_warps", 4))
    sig, arguments = bound_arguments(fn, args, kwargs)
    specs, consts = [], []
    for name, value in arguments.items():
        if _is_constexpr(sig.parameters[name]):
            consts.append((name, json.dumps(constexpr_value(value), sort_keys=True)))
        else:
            specs.append(json.dumps(arg_spec(value), sort_keys=True))
    return Launch(module=fn.__module__, name=fn.__name__, args=tuple(specs), constexprs=tuple(sorted(consts)),
                  num_warps=num_warps)


def interpreter_compat() -> None:
    """Triton 3.6's interpreter hands int arguments over as 1-element arrays and its tensor ``__index__``
    calls ``int()`` on them, which NumPy 2 refuses (``range(n)`` over an argument fails); later versions
    squeeze first. Do the same, so launches record under the H200's Triton too."""
    import numpy as np
    from triton.runtime import interpreter as itp

    orig = itp._patch_lang_tensor
    if getattr(orig, "tbe_compat", False):
        return

    def patched(tensor, scope):
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).squeeze()))

    patched.tbe_compat = True
    itp._patch_lang_tensor = patched


@contextlib.contextmanager
def launch_hook(hook: Callable[[Any, tuple, dict[str, Any], Any], bool], runs_only: bool = False) -> Iterator[None]:
    """Call ``hook(fn, args, kwargs, grid)`` before every kernel launch inside the block (interpreted or
    compiled, whichever this process runs); the launch runs only where the hook returns True. ``runs_only``:
    warm-up compiles pass unseen. Launches of every thread are seen: autograd runs a CUDA backward on a
    thread of its own."""
    from tbe.backend import INTERPRETED

    if INTERPRETED:
        from triton.runtime.interpreter import InterpretedFunction as cls

        interpreter_compat()
    else:
        from triton.runtime.jit import JITFunction as cls
    original = cls.run

    def run(self, *args, grid, warmup, **kwargs):
        if (runs_only and warmup) or hook(self.fn, args, kwargs, grid):
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        return None

    cls.run = run
    try:
        yield
    finally:
        cls.run = original


@contextlib.contextmanager
def recording(execute: bool = True) -> Iterator[list[Launch]]:
    """Collect every kernel launch made inside the block (distinct, in first-seen order)."""
    seen: dict[str, Launch] = {}
    out: list[Launch] = []

    def note(fn, args, kwargs, grid) -> bool:
        launch = make_launch(fn, args, kwargs)
        if launch.key() not in seen:
            seen[launch.key()] = launch
            out.append(launch)
        return execute

    with launch_hook(note):
        yield out


# ----------------------------------------------------------------------------- probe runs
@dataclasses.dataclass(frozen=True)
class Probe:
    """Module settings of one probe run; tables are (rows, dim)."""

    tables: tuple[tuple[int, int], ...]
    weights_dtype: str = "fp32"
    output_dtype: str = "fp32"
    pooling: str = "sum"
    weighted: bool = False
    optimizer: str = "exact_sgd"
    index_dtype: str = "int64"
    lookups_per_bag: int = 2
    batch_size: int = 2
    bounds_check: str = "none"


def run_probe(probe: Probe, config, execute: bool = False, min_lookups: int = 0) -> list[Launch]:
    """The distinct launches one forward + backward of ``probe`` under ``config`` makes.

    ``min_lookups`` grows the bags so the batch reaches thresholds that gate a tier (the fused
    long tier needs ``fused_long_min_lookups``)."""
    from tbe import TritonTBE

    m = TritonTBE(list(probe.tables), optimizer=probe.optimizer, weights_dtype=probe.weights_dtype,
                  output_dtype=probe.output_dtype, pooling=probe.pooling, bounds_check=probe.bounds_check, config=config)
    T, B = len(probe.tables), probe.batch_size
    per_bag = max(probe.lookups_per_bag, -(-min_lookups // (T * B)))
    itype = torch.int32 if probe.index_dtype == "int32" else torch.int64
    dev = m.device
    ids = torch.cat([torch.arange(B * per_bag) % rows for rows, _ in probe.tables]).to(itype).to(dev)
    offsets = (torch.arange(0, T * B + 1, dtype=itype) * per_bag).to(dev)
    psw = torch.ones(ids.numel(), device=dev, requires_grad=True) if probe.weighted else None
    with recording(execute=execute) as launches:
        out = m(ids, offsets, psw)
        out.backward(torch.ones_like(out))
    return launches
