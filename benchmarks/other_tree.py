"""Run a benchmark module of this checkout against another checkout's ``tbe`` package: the A/B of a code change.

``python -m benchmarks.other_tree DIR benchmarks.bench_tbe --impls triton --out F`` puts ``DIR`` (a folder
holding the other ``tbe/``, e.g. ``git archive HEAD~1 tbe | tar -x -C DIR``) first on ``sys.path`` and
runs the module there. ``python -m`` alone cannot do this: it puts the working directory ahead of
``PYTHONPATH``, so this checkout's ``tbe`` would win. The gate's timing level compares two configs of
one checkout; this compares two checkouts on the same machine, one run after the other.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise SystemExit("usage: python -m benchmarks.other_tree DIR MODULE [ARGS...]")
    root = Path(argv[0]).resolve()
    if not (root / "tbe" / "__init__.py").is_file():
        raise SystemExit(f"other_tree: {root} holds no tbe/ package")
    sys.path.insert(0, str(root))
    for name in [m for m in sys.modules if m == "tbe" or m.startswith("tbe.")]:
        del sys.modules[name]
    import tbe

    if Path(tbe.__file__).resolve().parent != root / "tbe":
        raise SystemExit(f"other_tree: tbe was imported from {tbe.__file__}, not {root}")
    print(f"other_tree: tbe from {root}", file=sys.stderr)
    sys.argv = argv[1:]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
