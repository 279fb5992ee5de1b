"""The shape options every GPU benchmark takes: ``--shape-set`` (presets or a JSON file, ``fuzz.gate.shapes``) and
``--shapes`` (names of that set), and the shapes they select."""

from __future__ import annotations

import argparse

from fuzz.gate.shapes import PerfShape, load_shapes


def add_shape_args(p: argparse.ArgumentParser, default_set: str) -> None:
    p.add_argument("--shape-set", default=default_set, metavar="PRESETS|FILE",
                   help=f"presets of fuzz.gate.shapes (comma-separated) or a JSON file of shapes (default: "
                        f"{default_set})")
    p.add_argument("--shapes", default=None, help="comma-separated shape names of the set (default: all)")


def chosen_shapes(args: argparse.Namespace) -> list[PerfShape]:
    """The set's shapes, in its order, that ``--shapes`` names (all when it names none); an unknown name is an
    error naming it, raised here, before a benchmark spends time on the device."""
    shapes = load_shapes(args.shape_set)
    wanted = args.shapes.split(",") if args.shapes else None
    if wanted:
        unknown = sorted(set(wanted) - {s.name for s in shapes})
        if unknown:
            raise SystemExit(f"--shapes: {unknown[0]!r} is not a shape of {args.shape_set!r} "
                             f"(it has {', '.join(s.name for s in shapes)})")
    return [s for s in shapes if wanted is None or s.name in wanted]
