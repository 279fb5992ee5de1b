"""Pictures of the committed benchmark numbers: PNGs written beside the files they are drawn from.

``python -m benchmarks.pictures`` reads ``benchmarks/results/bench_h200.jsonl`` (``bench_tbe``)
and ``profile_backward_h200.json`` (``profile_backward``) and draws:

- ``bench_h200.png``: per shape, ours against TorchRec's Triton TBE, FBGEMM's CUDA TBE, PyTorch's ops and
  the byte floor, forward and iteration side by side (grouped bars, ms; an implementation the file never
  measured gets no bar). PyTorch's iteration runs up to
  30x ours, so each panel's axis stops at ``CLIP`` times its slowest non-PyTorch bar; a taller
  bar is cut there and carries its value.
  With ``--time device`` the bars are the kernels' device time instead (``NAME_device.png``).
- ``profile_backward_h200.png``: per shape, one iteration's device time by stage, ours and
  FBGEMM's stacked side by side.

A profile written before the stage table learnt a kernel's name has that kernel under
"other"; ``restage`` moves it to its stage (see there). ``bench_rows``, ``breakdown_rows`` and
``restage`` prepare the data (what the tests check); ``draw_*`` only draw it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Optional

RESULTS = Path(__file__).resolve().parent / "results"
IMPLS = (("ours", "triton"), ("TorchRec", "torchrec"), ("FBGEMM", "fbgemm"), ("PyTorch", "torch"),
         ("byte floor", "floor"))
PHASES = ("forward", "iteration")
CLIP = 1.6      # an axis stops at this many times its slowest bar other than PyTorch's
EPS_MS = 1e-6   # float slack when comparing a kernel's time with the stage total that holds it


@dataclasses.dataclass(frozen=True)
class BenchRow:
    shape: str
    ms: dict[str, dict[str, Optional[float]]]  # phase -> implementation label -> ms (None: not measured)


@dataclasses.dataclass(frozen=True)
class BreakdownRow:
    shape: str
    stages: dict[str, dict[str, float]]  # implementation label -> stage -> ms per iteration


TIMES = {"events": "_ms", "device": "_device_ms"}  # bench_tbe's two times per phase, by their suffix


def bench_rows(lines: list[dict], time: str = "events") -> list[BenchRow]:
    """One row per shape of ``bench_tbe``'s JSON lines, in file order, with the chosen ``time`` (``TIMES``; the
    byte floor has one time); a shape measured twice (it is in two of the runs' sets) is drawn once, first run."""
    def key(impl: str, phase: str) -> str:
        return f"{impl}_{phase}{'_ms' if impl == 'floor' else TIMES[time]}"
    first = {}
    for r in lines:
        first.setdefault(r["shape"], r)
    return [BenchRow(r["shape"], {ph: {label: r.get(key(k, ph)) for label, k in IMPLS} for ph in PHASES})
            for r in first.values()]


def restage(stages: dict[str, float], top_kernels: list[list]) -> dict[str, float]:
    """Stage totals with kernels the current stage table names moved out of "other".

    A listed kernel whose time exceeds its stage's recorded total cannot have been counted
    there, so it was counted under "other" (when "other" holds that much): it moves. Totals
    are kept; a profile made with the current table comes back unchanged."""
    from benchmarks.profile_backward import stage_of

    out = dict(stages)
    for name, ms in top_kernels:
        stage = stage_of(name)
        if stage != "other" and out.get(stage, 0.0) + EPS_MS < ms and out.get("other", 0.0) + EPS_MS >= ms:
            out["other"] = max(0.0, out["other"] - ms)
            out[stage] = out.get(stage, 0.0) + ms
    return out


def breakdown_rows(profile: dict) -> list[BreakdownRow]:
    """One row per shape of ``profile_backward``'s JSON, each implementation's stages restaged."""
    labels = dict((key, label) for label, key in IMPLS)
    return [BreakdownRow(r["shape"], {labels[impl]: restage(r[impl]["stages_ms"], r[impl]["top_kernels_ms"])
                                      for impl in ("triton", "fbgemm") if impl in r})
            for r in profile["results"]]


def stage_order(rows: list[BreakdownRow]) -> list[str]:
    """Every stage present, largest total first, "other" last: the stacking (and legend) order."""
    total: dict[str, float] = {}
    for row in rows:
        for stages in row.stages.values():
            for s, ms in stages.items():
                total[s] = total.get(s, 0.0) + ms
    order = sorted((s for s in total if s != "other"), key=lambda s: -total[s])
    return order + (["other"] if "other" in total else [])


def drawn_impls(rows: list[BenchRow]) -> list[str]:
    """The implementations measured on at least one shape: each gets a bar per shape (n/a where it is missing)."""
    return [label for label, _ in IMPLS if any(r.ms[ph][label] is not None for r in rows for ph in PHASES)]


def axis_top(row_values: list[dict[str, Optional[float]]]) -> float:
    """Where a panel's axis stops: ``CLIP`` times the slowest bar other than PyTorch's."""
    return CLIP * max(v for vals in row_values for k, v in vals.items() if k != "PyTorch" and v is not None)


def draw_bench(plt, rows: list[BenchRow], device: str, path: Path, time: str = "events") -> Path:
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(15, 5.6))
    x = np.arange(len(rows))
    impls = drawn_impls(rows)
    width = 0.8 / len(impls)
    colors = {"ours": "#1f77b4", "TorchRec": "#9467bd", "FBGEMM": "#ff7f0e", "PyTorch": "#7f7f7f",
              "byte floor": "#2ca02c"}
    for ax, phase in zip(axes, PHASES):
        top = axis_top([r.ms[phase] for r in rows])
        for i, label in enumerate(impls):
            xs = x + (i - (len(impls) - 1) / 2) * width
            for xi, row in zip(xs, rows):
                v = row.ms[phase][label]
                if v is None:
                    ax.text(xi, top * 0.01, "n/a", ha="center", va="bottom", fontsize=7, rotation=90, color="0.4")
                    continue
                ax.bar(xi, min(v, top), width, color=colors[label], hatch="//" if v > top else None,
                       edgecolor="white" if v > top else None, label=label if xi == xs[0] else None)
                ax.text(xi, min(v, top * 0.97), f"{v:.2f}" if v < 10 else f"{v:.0f}", ha="center",
                        va="top" if v > top else "bottom", fontsize=7, rotation=90,
                        color="white" if v > top else "black")
        ax.set_ylim(0, top)
        ax.set_xticks(x, [r.shape for r in rows], rotation=20, ha="right", fontsize=9)
        ax.set_ylabel(("device ms, kernels" if time == "device" else "ms, CUDA events") + " (lower is better)")
        ax.set_title(f"{phase}" + ("" if phase == "forward" else " (forward + backward + optimizer)"))
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.suptitle(f"TBE time per shape on {device} (hatched bars are cut at the axis; value printed)", y=0.985,
                 fontsize=12)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.935), ncol=len(impls), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.87))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def draw_breakdown(plt, rows: list[BreakdownRow], device: str, path: Path) -> Path:
    import numpy as np

    order = stage_order(rows)
    cmap = plt.get_cmap("tab10")
    colors = {s: ("#c7c7c7" if s == "other" else cmap(i % 10)) for i, s in enumerate(order)}
    impls = [label for label, _ in IMPLS if any(label in r.stages for r in rows)]
    fig, ax = plt.subplots(figsize=(13, 5.8))
    x = np.arange(len(rows))
    width = 0.38
    for j, impl in enumerate(impls):
        xs = x + (j - (len(impls) - 1) / 2) * width
        bottom = np.zeros(len(rows))
        for s in order:
            vals = np.array([r.stages.get(impl, {}).get(s, 0.0) for r in rows])
            ax.bar(xs, vals, width, bottom=bottom, color=colors[s], edgecolor="white", linewidth=0.5,
                   label=s if j == 0 else None)
            bottom += vals
        for xi, total in zip(xs, bottom):
            ax.text(xi, total, f"{impl}\n{total:.2f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, [r.shape for r in rows], fontsize=9)
    ax.set_ylabel("device ms per iteration")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.1)
    ax.set_title(f"Where an iteration's time goes, by stage ({device}, torch.profiler; left bar "
                 f"{impls[0]}, right bar {impls[-1]})", fontsize=11)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, title="stage")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bench", type=Path, default=RESULTS / "bench_h200.jsonl", help="bench_tbe JSON lines")
    p.add_argument("--time", choices=tuple(TIMES), default="events",
                   help="bench_tbe's time to draw: events (one call on an idle GPU) or device (its kernels); "
                        "device draws to NAME_device.png")
    p.add_argument("--breakdown", type=Path, default=RESULTS / "profile_backward_h200.json",
                   help="profile_backward JSON ('none': draw the bench picture alone)")
    args = p.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = [json.loads(s) for s in args.bench.read_text().splitlines() if s.strip()]
    device = lines[0].get("device", "GPU") if lines else "GPU"
    out = args.bench.with_suffix(".png") if args.time == "events" else args.bench.with_name(
        args.bench.stem + "_device.png")
    print(draw_bench(plt, bench_rows(lines, args.time), device, out, args.time))
    if str(args.breakdown) == "none":
        return 0
    profile = json.loads(args.breakdown.read_text())
    print(draw_breakdown(plt, breakdown_rows(profile), profile.get("device", device),
                         args.breakdown.with_suffix(".png")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
