"""Helper calls under Triton's interpreter without re-patching ``triton.language`` each time.

Triton's interpreter patches ``triton.language`` around each launch, and again on every call of a
``@triton.jit`` helper from a kernel, without undoing the second patch until the launch ends. Each
such call walks the language modules (``inspect.getmembers``) and wraps every builtin once more, so
within one launch the wrappers nest one level deeper per helper call; our kernels call helpers per
program and per loop step (the cost is measured in ``benchmarks/results``). Inside a launch that has
already patched the modules a helper's globals name, the helper now runs directly; anywhere else
Triton's own call runs. Every patch covers both ``triton.language`` and ``triton.language.core``,
whichever one the function's globals name: Triton's own helpers (``tl.sum``, ``tl.zeros``, in
``triton.language.standard``) see ``core`` while our kernels see ``tl``, so with a launch patching ``tl``
alone each of their calls patched the language again. Written here because the interpreter
offers no option for it. The launches' own patching walked the same modules each time too: the list
of builtins each module holds is now read once (from its unpatched state) and reused.
"""

from __future__ import annotations

import inspect
from typing import Any


def skip_nested_patching() -> None:
    """Install the shortcuts (idempotent); a Triton without these internals is left as it is."""
    import triton.language as tl
    from triton.runtime import interpreter as itp

    executor = getattr(itp, "GridExecutor", None)
    function = getattr(itp, "InterpretedFunction", None)
    patch_attr = getattr(itp, "_patch_attr", None)
    if (executor is None or function is None or getattr(function.__call__, "tbe_shortcut", False)
            or not hasattr(function, "rewrite") or not hasattr(itp, "InterpreterError")
            or _params(patch_attr) != ["obj", "name", "member", "builder", "scope"]
            or _params(getattr(itp, "_patch_builtin", None)) != ["pkg", "builder", "scope"]):
        return  # another interpreter than the one these shortcuts were written against
    builtins: dict[Any, list] = {}  # module or class -> its (name, builtin) pairs, read unpatched

    def patch_builtin(pkg, builder, scope):
        if pkg not in builtins:
            builtins[pkg] = [(name, m) for name, m in inspect.getmembers(pkg) if tl.core.is_builtin(m)]
        for name, member in builtins[pkg]:
            patch_attr(pkg, name, member, builder, scope)

    launch_call, helper_call, lang_patch = executor.__call__, function.__call__, itp._patch_lang
    launches = [0]  # launches in progress: each has patched both language modules (patch_lang)
    names_lang: dict[Any, bool] = {}

    class _BothLanguages:  # what Triton's _patch_lang reads of a function: the modules its globals name
        __globals__ = {"tl": tl, "core": tl.core}

    def patch_lang(fn):
        return lang_patch(_BothLanguages)

    def names_language(fn: Any) -> bool:
        if fn not in names_lang:
            names_lang[fn] = any(inspect.ismodule(v) and (v is tl or v is tl.core) for v in fn.__globals__.values())
        return names_lang[fn]

    def launch(self, *args, **kwargs):
        launches[0] += 1
        try:
            return launch_call(self, *args, **kwargs)
        finally:
            launches[0] -= 1

    def helper(self, *args, **kwargs):
        if not launches[0] or not names_language(self.fn):
            return helper_call(self, *args, **kwargs)
        fn = self.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise itp.InterpreterError(repr(e)) from e

    helper.tbe_shortcut = True
    itp._patch_builtin = patch_builtin
    itp._patch_lang = patch_lang
    executor.__call__ = launch
    function.__call__ = helper


def _params(fn: Any) -> list[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []
