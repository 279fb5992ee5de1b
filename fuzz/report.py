"""Readable summaries of campaign, replay, gate and selftest results (plain text or JSON)."""

from __future__ import annotations

import json
from typing import Any, Sequence

from fuzz.campaign import CampaignResult
from fuzz.cases import case_size, case_to_dict
from fuzz.check import CaseResult
from fuzz.gate import GateResult
from fuzz.replay import ReplayResult
from fuzz.selftest import FaultResult, all_caught


def _ratios(ratios: dict[str, float]) -> list[str]:
    return [f"    {name:<32} {value:.3g}" for name, value in sorted(ratios.items())]


def _failure_lines(f: CaseResult) -> list[str]:
    tables, bags, _ = case_size(f.case)
    return [
        f"  failing case: {tables} table(s), {bags} bag(s), {f.lookups} lookups",
        f"  case: {json.dumps(case_to_dict(f.case), sort_keys=True)}",
        *["  " + line for line in f.text().splitlines() if "MISMATCH" in line or not line.startswith("step")],
    ]


def campaign_text(r: CampaignResult) -> str:
    verdict = "PASS" if r.ok else "FAIL"
    lines = [
        f"tbe-fuzz campaign: {verdict}  (budget {r.budget.name}, seed {r.seed}, stopped by {r.stopped_by})",
        f"  examples {r.examples}, lookups {r.lookups}, {r.seconds:.1f}s"
        + (f", shrink steps {r.shrink_examples}" if not r.ok else ""),
        "  tiers exercised: " + (", ".join(f"{t} x{n}" for t, n in sorted(r.tiers.items())) or "none"),
        "  max error/bound ratio per check (1.0 = at the bound):",
        *_ratios(r.max_ratio),
    ]
    if r.unmaterializable:
        lines.append(f"  note: {r.unmaterializable} drawn case(s) could not be materialized and were skipped "
                     f"(a strategies bug, not a kernel failure); first: {r.unmaterializable_example}")
    if r.config.diff(type(r.config)()):
        lines.append(f"  config differs from default: {r.config.diff(type(r.config)())}")
    if r.failure is not None:
        lines.append(f"  first failure after {r.first_failure_examples} example(s), {r.first_failure_seconds:.1f}s")
        lines += _failure_lines(r.failure)
    if r.artifact is not None:
        lines.append(f"  artifact: {r.artifact}")
        lines.append(f"  replay:   {(r.artifact / 'replay.txt').read_text().strip()}")
    return "\n".join(lines)


def campaign_json(r: CampaignResult) -> dict[str, Any]:
    return {
        "kind": "campaign", "ok": r.ok, "budget": r.budget.name, "seed": r.seed, "stopped_by": r.stopped_by,
        "examples": r.examples, "shrink_examples": r.shrink_examples, "lookups": r.lookups,
        "seconds": round(r.seconds, 3), "tiers": dict(r.tiers), "max_ratio": r.max_ratio,
        "config": r.config.to_dict(), "unmaterializable": r.unmaterializable,
        "failure": None if r.failure is None else {
            "case": case_to_dict(r.failure.case), "reports": r.failure.text().splitlines(),
            "examples_to_first_failure": r.first_failure_examples,
            "seconds_to_first_failure": r.first_failure_seconds,
        },
        "artifact": None if r.artifact is None else str(r.artifact),
    }


def replay_text(r: ReplayResult) -> str:
    res = r.result
    lines = [
        f"tbe-fuzz replay: {'PASS' if res.ok else 'FAIL'}  ({r.source}; case {r.case_path}; "
        f"config {r.config_path or 'default KernelConfig()'})",
        f"  {res.lookups} lookups, tiers {sorted(res.tiers)}, {res.seconds:.1f}s",
        *["  " + line for line in res.text().splitlines()],
        *[f"  note: {n}" for n in r.notes],
    ]
    return "\n".join(lines)


def replay_json(r: ReplayResult) -> dict[str, Any]:
    return {"kind": "replay", "ok": r.ok, "source": r.source, "case": str(r.case_path),
            "config": None if r.config_path is None else str(r.config_path),
            "reports": r.result.text().splitlines(), "notes": r.notes}


def gate_text(g: GateResult) -> str:
    lines = [f"tbe-fuzz gate: {'PASS' if g.ok else 'FAIL'}  (seed {g.seed}, {g.seconds:.1f}s)"]
    if g.diff:
        lines.append("  changed fields (baseline -> candidate):")
        lines += [f"    {k}: {a!r} -> {b!r}" for k, (a, b) in sorted(g.diff.items())]
    else:
        lines.append("  the two configs are identical")
    shared = len(g.cases) - g.targeted_run
    lines.append(f"  cases run under both: {g.targeted_run} of {g.targeted} targeted at moved edges, "
                 f"{shared} shared campaign cases; {g.lookups} lookups each")
    lines.append("  max error/bound ratio per check, baseline -> candidate (cases both pass):")
    for name in sorted(set(g.base_ratio) | set(g.cand_ratio)):
        lines.append(f"    {name:<32} {g.base_ratio.get(name, 0.0):.3g} -> {g.cand_ratio.get(name, 0.0):.3g}")
    lines += [f"  note: {n}" for n in g.notes]
    for c in g.cases:
        if not c.cand.ok:
            lines.append(f"  candidate fails {c.label}:")
            lines += _failure_lines(c.cand)
    lines += [f"  artifact: {p}" for p in g.artifacts]
    if g.ok:
        lines.append("  verdict: PASS - the candidate passed every case and its error stayed within the baseline's")
    else:
        lines.append("  verdict: FAIL - " + "; ".join(g.reasons[:5]) + (" ..." if len(g.reasons) > 5 else ""))
    return "\n".join(lines)


def gate_json(g: GateResult) -> dict[str, Any]:
    return {
        "kind": "gate", "ok": g.ok, "seed": g.seed, "seconds": round(g.seconds, 3),
        "diff": {k: list(v) for k, v in g.diff.items()}, "targeted": g.targeted, "targeted_run": g.targeted_run, "cases": len(g.cases),
        "base_ratio": g.base_ratio, "cand_ratio": g.cand_ratio, "reasons": g.reasons, "notes": g.notes,
        "failing_cases": [{"label": c.label, "case": case_to_dict(c.cand.case), "baseline_ok": c.base.ok}
                          for c in g.cases if not c.cand.ok],
        "artifacts": [str(p) for p in g.artifacts],
    }


def selftest_text(results: Sequence[FaultResult]) -> str:
    ok = all_caught(results)
    lines = [f"tbe-fuzz selftest: {'PASS' if ok else 'FAIL'}"]
    for r in results:
        if r.skipped is not None:
            lines.append(f"  {r.fault:<28} skipped: {r.skipped}")
            continue
        c = r.campaign
        if r.caught:
            t, b, n = r.shrunk_size
            lines.append(f"  {r.fault:<28} caught after {c.first_failure_examples} example(s), "
                         f"{c.first_failure_seconds:.1f}s; shrunk to {t} table(s), {b} bag(s), {n} lookups"
                         + (f"; artifact {c.artifact}" if c.artifact else ""))
        else:
            lines.append(f"  {r.fault:<28} MISSED in {c.examples} examples, {c.seconds:.1f}s ({r.description})")
    return "\n".join(lines)


def selftest_json(results: Sequence[FaultResult]) -> dict[str, Any]:
    out = []
    for r in results:
        c = r.campaign
        out.append({
            "fault": r.fault, "description": r.description, "skipped": r.skipped, "caught": r.caught,
            "examples_to_catch": None if not r.caught else c.first_failure_examples,
            "seconds_to_catch": None if not r.caught else c.first_failure_seconds,
            "examples": None if c is None else c.examples,
            "shrunk_size": None if not r.caught else dict(zip(("tables", "bags", "lookups"), r.shrunk_size)),
            "case": None if not r.caught else case_to_dict(c.failure.case),
            "artifact": None if c is None or c.artifact is None else str(c.artifact),
        })
    return {"kind": "selftest", "ok": all_caught(results), "faults": out}
