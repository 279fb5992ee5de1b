"""The gate's report: terminal text, JSON and Markdown (with the per-shape performance table)."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

from fuzz.gate.cascade import CascadeResult, Level
from fuzz.gate.levels import PERFORMANCE
from fuzz.status import Decision, Status
from fuzz.gate.perf import PerfResult

HEADLINE = {Decision.ACCEPT: "ACCEPT the candidate", Decision.KEEP: "KEEP the baseline", Decision.UNVERIFIED: "UNVERIFIED"}


def _status(lv: Level) -> str:
    return lv.status.upper() if lv.status == Status.FAIL else lv.status


def perf_rows(p: PerfResult) -> list[list[str]]:
    """Shape, phase, lookups, baseline ms, candidate ms, speedup, noise, verdict: one row per entry."""
    rows = []
    for e in p.entries:
        if not e.ok:
            rows.append([e.shape, e.phase, f"{e.lookups:,}", "-", "-", "-", "-", e.error or "not measured"])
            continue
        verdict = "SLOWER" if e.slower else ("faster" if e.speedup > 1 + e.noise else "same")
        if e.disturbed:
            verdict += " (disturbed round " + ", ".join(str(r + 1) for r in e.disturbed) + " left out)"
        rows.append([e.shape, e.phase, f"{e.lookups:,}", f"{e.base_ms:.3f}", f"{e.cand_ms:.3f}",
                     f"{e.speedup:.3f}x", f"±{100 * e.noise:.1f}%", verdict])
    return rows


PERF_HEAD = ["shape", "phase", "lookups", "baseline ms", "candidate ms", "speedup", "noise", "verdict"]


def _sides(res: CascadeResult) -> tuple[str, str]:
    """Each side's SUT as loaded: name, version and source."""
    from fuzz.sut import get

    return get(res.options.sut).label, get(res.options.candidate_address).label


def text(res: CascadeResult) -> str:
    bad = res.first_failure
    lines = [f"tbe-fuzz gate: {HEADLINE[res.verdict]}"
             + (f"  (first failing level: ({bad.key}))" if bad else "") + f"  ({res.seconds:.1f}s)"]
    diff = res.diff
    if res.options.candidate_sut is not None:
        lines.append(f"  code change: baseline {_sides(res)[0]}, candidate {_sides(res)[1]}")
    lines.append("  changed fields (baseline -> candidate):" if diff else "  the two configs are identical")
    lines += [f"    {k}: {a!r} -> {b!r}" for k, (a, b) in sorted(diff.items())]
    for lv in res.levels.values():
        why = f"  ({'; '.join(lv.reasons)})" if lv.status == Status.NOT_RUN and lv.reasons else ""
        lines.append(f"  ({lv.key}) {lv.name}: {_status(lv)}" + (f"  {lv.seconds:.1f}s" if lv.seconds else "") + why)
        lines += [f"      {ln}" for ln in lv.spec.lines(lv)]
        lines += [f"      note: {n}" for n in lv.notes]
    perf = res.levels[PERFORMANCE.key].result
    if perf is not None and perf.entries:
        lines.append("  performance per shape:")
        widths = [max(len(x) for x in col) for col in zip(PERF_HEAD, *perf_rows(perf))]
        for row in [PERF_HEAD] + perf_rows(perf):
            lines.append("    " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    lines.append(f"  verdict: {HEADLINE[res.verdict]} - " + "; ".join(res.reasons[:4])
                 + (" ..." if len(res.reasons) > 4 else ""))
    lines.append(f"  exit code {res.exit_code}")
    return "\n".join(lines)


def to_json(res: CascadeResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": "gate", "verdict": res.verdict, "exit_code": res.exit_code, "reasons": res.reasons,
        "sut": res.options.sut, "candidate_sut": res.options.candidate_address,
        "first_failing_level": None if res.first_failure is None else res.first_failure.key,
        "seconds": round(res.seconds, 2), "baseline": res.baseline.to_dict(), "candidate": res.candidate_data,
        "diff": {k: list(v) for k, v in res.diff.items()},
        "options": {"seeds": list(res.options.seeds), "levels": res.options.levels, "gamma": res.options.gamma,
                    "budget": res.options.budget.name, "seconds_per_phase": res.options.budget.seconds,
                    "max_examples": res.options.budget.max_examples, "shapes": res.options.shapes_name,
                    "rounds": res.options.rounds, "require_perf": res.options.require_perf},
        "environment": _environment(), "levels": {},
    }
    for key, lv in res.levels.items():
        d: dict[str, Any] = {"name": lv.name, "status": lv.status, "reasons": lv.reasons, "notes": lv.notes,
                             "seconds": round(lv.seconds, 2)}
        d.update(lv.spec.detail(lv))
        out["levels"][key] = d
    return out


def _environment() -> dict[str, Any]:
    import torch
    import triton

    from tbe.backend import INTERPRETED

    return {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() and not INTERPRETED
            else "CPU (Triton interpreter)"}


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def markdown(res: CascadeResult) -> str:
    bad = res.first_failure
    lines = [f"# Config gate: {HEADLINE[res.verdict]}", ""]
    lines.append(f"Exit code {res.exit_code}. " + ("First failing level: (" + bad.key + "). " if bad else "")
                 + " ".join(r.rstrip(".") + "." for r in res.reasons))
    lines += ["", "## Changed fields", ""]
    diff = res.diff
    lines += _md_table(["field", "baseline", "candidate"], [[k, f"`{a!r}`", f"`{b!r}`"] for k, (a, b) in
                                                            sorted(diff.items())]) if diff else ["(none)"]
    lines += ["", "## Levels", ""]
    lines += _md_table(["level", "what", "status", "seconds", "why"], [
        [f"({lv.key})", lv.name, f"**{lv.status}**" if lv.status == Status.FAIL else lv.status,
         f"{lv.seconds:.1f}", "; ".join(lv.reasons[:3]).replace("|", "\\|")] for lv in res.levels.values()])
    for lv in res.levels.values():
        detail = lv.spec.lines(lv) + [f"note: {n}" for n in lv.notes]
        if detail:
            lines += ["", f"### ({lv.key}) {lv.name}", ""] + [f"- {d}" for d in detail]
    perf = res.levels[PERFORMANCE.key].result
    if perf is not None and perf.entries:
        lines += ["", "## Performance per shape", ""] + _md_table(PERF_HEAD, perf_rows(perf))
        lines += ["", "Speedup = baseline time / candidate time (rounds run A, B, A' and B, A, B' in turn; a round's "
                  "outer function counts as the geometric mean of its two runs; the speedup is the median over "
                  "adjacent rounds of their geometric mean; a round holding a run more than 1.5x its function's "
                  "median is disturbed and left out). Noise = the largest |ln(X/X')| of the outer "
                  "function's runs in the shape's rounds (at least 0.5%). SLOWER = slower by more than that noise."]
    return "\n".join(lines) + "\n"


def write(res: CascadeResult, directory: Path) -> list[Path]:
    """Write report.json, report.md and the two configs into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / "report.json", directory / "report.md", directory / "baseline.json",
             directory / "candidate.json"]
    paths[0].write_text(json.dumps(to_json(res), indent=2, sort_keys=True, default=str) + "\n")
    paths[1].write_text(markdown(res))
    paths[2].write_text(res.baseline.to_json())
    paths[3].write_text(json.dumps(res.candidate_data, indent=2, sort_keys=True) + "\n")
    return paths
