"""Readable summaries of campaign, replay, gate and selftest results (plain text or JSON)."""

from __future__ import annotations

import json
from typing import Any, Sequence

from fuzz.execution.artifacts import replay_command
from fuzz.campaign.search import CampaignResult
from strategies.cases import case_size, case_to_dict
from fuzz.judge.check import CaseResult
from fuzz.gate.correctness import GateResult
from fuzz.campaign.replay import ReplayResult
from fuzz.selftest.detectors import CAUGHT, MISSED, Detection
from fuzz.selftest.run import FaultResult, all_ok, counts


def _ratios(ratios: dict[str, float]) -> list[str]:
    return [f"    {name:<32} {value:.3g}" for name, value in sorted(ratios.items())]


def _failure_lines(f: CaseResult) -> list[str]:
    tables, bags, _ = case_size(f.case)
    return [
        f"  failing case: {tables} table(s), {bags} bag(s), {f.lookups} lookups; failure kind: {f.kind}",
        f"  case: {json.dumps(case_to_dict(f.case), sort_keys=True)}",
        *["  " + line for line in f.text().splitlines() if "MISMATCH" in line or not line.startswith("step")],
    ]


def _known_lines(r: CampaignResult) -> list[str]:
    """Each known finding the campaign met (shrunk case, when, artifact), then those triaged but not seen."""
    from fuzz.judge.known import for_sut

    lines = []
    if r.known:
        lines.append(f"  known findings (triaged for {r.sut}; each shrunk, none counts as a failure): {len(r.known)}")
    for k in r.known:
        tables, bags, lookups = k.size
        first = next((line for line in k.result.text().splitlines() if "MISMATCH" in line), "")
        if k.result.error is not None:
            first = "raised: " + k.result.error.strip().splitlines()[-1]
        lines += [f"  - {k.finding.id}: after {k.examples} example(s), {k.seconds:.1f}s; shrunk to {tables} table(s), "
                  f"{bags} bag(s), {lookups} lookups",
                  f"      {k.finding.description}",
                  f"      case: {json.dumps(case_to_dict(k.result.case), sort_keys=True)}",
                  f"      {first.strip()[:300]}"]
        if k.artifact is not None:
            lines.append(f"      artifact: {k.artifact}")
    seen = {k.finding.id for k in r.known}
    unseen = [f.id for f in for_sut(r.sut) if f.id not in seen]
    if unseen:
        lines.append(f"  triaged for {r.sut} but not met in this campaign: {', '.join(unseen)}")
    if r.expected_failures:
        lines.append(f"  cases failing only with recorded known findings: {r.expected_failures} (counted as passes)")
    return lines


def campaign_text(r: CampaignResult) -> str:
    verdict = "PASS" if r.ok else "FAIL"
    if r.ok and r.known:
        verdict = f"PASS (every failure is a known finding: {len(r.known)} triaged)"
    lines = [
        f"tbe-fuzz campaign: {verdict}  (SUT {r.sut}, budget {r.budget.name}, seed {r.seed}, stopped by {r.stopped_by})",
        f"  examples {r.examples}, lookups {r.lookups}, {r.seconds:.1f}s"
        + (f", shrink steps {r.shrink_examples}" if not r.ok else ""),
        ("  tiers exercised: " if r.sut == "triton" else "  segment-length classes (this project's tiers): ")
        + (", ".join(f"{t} x{n}" for t, n in sorted(r.tiers.items())) or "none"),
        f"  bound: {r.model.describe()}",
        _tour_line(r),
        "  max error/bound ratio per check (1.0 = at the bound):",
        *_ratios(r.max_ratio),
        f"  kernel compilations during the search: {r.compiles.text()}",
        *r.time.lines(r.seconds),
        _fbgemm_line(r),
        *r.teeth.lines(),
    ]
    for p in r.leftover:
        lines.append(f"  note: an earlier driver died while running the case in {p} (tbe-fuzz replay {p})")
    if r.unmaterializable:
        lines.append(f"  note: {r.unmaterializable} drawn case(s) could not be materialized and were skipped "
                     f"(a strategies bug, not a kernel failure); first: {r.unmaterializable_example}")
    if r.config.diff(type(r.config)()):
        lines.append(f"  config differs from default: {r.config.diff(type(r.config)())}")
    lines += _known_lines(r)
    if r.failure is not None:
        lines.append(f"  first failure after {r.first_failure_examples} example(s), {r.first_failure_seconds:.1f}s "
                     f"({r.first_failure_headline})"
                     + (" (not on the triage list)" if r.known or r.sut != "triton" else ""))
        if r.failure_overrides:
            lines.append(f"  failing config: the config under test with {r.failure_overrides}")
        lines += _failure_lines(r.failure)
    if r.artifact is not None:
        lines.append(f"  artifact: {r.artifact}")
        lines.append(f"  replay:   {(r.artifact / 'replay.txt').read_text().strip()}")
        lines += _sanitizer_hint(r.failure, (r.artifact / "replay.txt").read_text())
    return "\n".join(lines)


def _tour_line(r: CampaignResult) -> str:
    if r.tour is None:
        return "  opening tour: not run (the search alone)"
    share = "" if r.tour.of == 1 else f" (share {r.tour} of the tour: every {r.tour.of}th case)"
    return f"  opening tour: {r.tour_cases} case(s) checked{share}"


def _fbgemm_line(r: CampaignResult) -> str:
    from fuzz.judge.fbgemm_sample import CHECKED, RULE

    if r.sut != "triton":
        return f"  FBGEMM CPU oracle: not run (it samples examples beside this project's kernels, not SUT {r.sut})"
    others = ", ".join(f"{n} {k}" for k, n in sorted(r.fbgemm.items()) if k != CHECKED)
    return (f"  FBGEMM CPU oracle: checked {r.fbgemm.get(CHECKED, 0)} of {r.examples} examples ({RULE})"
            + (f"; {others}" if others else ""))


def _sanitizer_hint(f: CaseResult, replay: str) -> list[str]:
    """On the interpreter without the sanitizer, say how to have it name any out-of-range access."""
    from fuzz.memcheck import sanitizer
    from tbe.backend import INTERPRETED

    if not INTERPRETED or sanitizer.requested() or f.kind not in ("mismatch", "crash", "exception"):
        return []
    return [f"  hint:     TBE_FUZZ_SANITIZE=1 {replay.split('   (or:')[0].strip()}   names any out-of-range access"]


def campaign_json(r: CampaignResult) -> dict[str, Any]:
    return {
        "kind": "campaign", "ok": r.ok, "budget": r.budget.name, "seed": r.seed, "stopped_by": r.stopped_by,
        "examples": r.examples, "shrink_examples": r.shrink_examples, "lookups": r.lookups,
        "seconds": round(r.seconds, 3), "tiers": dict(r.tiers), "max_ratio": r.max_ratio,
        "bound": r.model.kind, "false_alarm": r.model.false_alarm if r.model.kind != "worst" else None,
        "teeth": r.teeth.to_json(),
        "config": r.config.to_dict(), "unmaterializable": r.unmaterializable, "compiles": r.compiles.to_dict(),
        "fbgemm": dict(r.fbgemm),
        "tour": None if r.tour is None else {"index": r.tour.index, "of": r.tour.of, "cases": r.tour_cases},
        "time_split": r.time.to_json(r.seconds),
        "sut": r.sut,
        "expected_failures": r.expected_failures,
        "known": [{"id": k.finding.id, "description": k.finding.description, "case": case_to_dict(k.result.case),
                   "examples": k.examples, "seconds": round(k.seconds, 3), "lookups": k.result.lookups,
                   "reports": k.result.text().splitlines(),
                   "artifact": None if k.artifact is None else str(k.artifact)} for k in r.known],
        "failure": None if r.failure is None else {
            "kind": r.failure.kind, "case": case_to_dict(r.failure.case), "reports": r.failure.text().splitlines(),
            "config_overrides": r.failure_overrides,
            "examples_to_first_failure": r.first_failure_examples,
            "seconds_to_first_failure": r.first_failure_seconds, "first_failure_headline": r.first_failure_headline,
        },
        "artifact": None if r.artifact is None else str(r.artifact),
    }


def replay_text(r: ReplayResult) -> str:
    res = r.result
    verdict = "PASS" if res.ok else "KNOWN" if r.ok else "FAIL"
    lines = [
        f"tbe-fuzz replay: {verdict}  (SUT {r.sut}; {r.source}; case {r.case_path}; "
        f"config {r.config_path or 'default KernelConfig()'})",
        *([] if res.ok else [f"  failure kind: {res.kind}"]),
        f"  {res.lookups} lookups, tiers {sorted(res.tiers)}, {res.seconds:.1f}s",
        *["  " + line for line in res.text().splitlines()],
        *[f"  note: {n}" for n in r.notes],
        *([] if res.ok else _sanitizer_hint(res, replay_command(r.case_path.parent, r.config))),
        *[f"  known finding {f.id} (triaged for {r.sut}, so the replay passes): {f.description}" for f in r.known or ()],
    ]
    return "\n".join(lines)


def replay_json(r: ReplayResult) -> dict[str, Any]:
    return {"kind": "replay", "ok": r.ok, "failure_kind": None if r.ok else r.result.kind, "sut": r.sut,
            "known": [f.id for f in r.known or ()], "source": r.source, "case": str(r.case_path),
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
    n = counts(results)
    lines = [f"tbe-fuzz selftest: {'PASS' if all_ok(results) else 'FAIL'}  ("
             + ", ".join(f"{v} {k}" for k, v in n.items()) + ")"]
    for r in results:
        flag = "  (asked for by name: a skip fails the self-test)" if r.named and r.status == "skipped" else ""
        lines.append(f"  {r.fault:<28} {r.status.upper()}  ({r.description}){flag}")
        for d in r.detections:
            lines.append("    " + _detection_line(d))
    return "\n".join(lines)


def _detection_line(d: Detection) -> str:
    head = f"{d.detector:<22} {d.status}"
    if d.status == CAUGHT:
        parts = []
        if d.examples is not None:
            parts.append(f"after {d.examples} example(s)")
        if d.seconds is not None:
            parts.append(f"{d.seconds:.1f}s")
        if d.shrunk is not None:
            parts.append("shrunk to {} table(s), {} bag(s), {} lookups".format(*d.shrunk))
        if d.detail:
            parts.append(d.detail)
        if d.artifact is not None:
            parts.append(f"artifact {d.artifact}")
        return head + " " + "; ".join(parts)
    if d.status == MISSED:
        return head + f": {d.detail}" + (f" ({d.seconds:.1f}s)" if d.seconds is not None else "")
    return head + f": {d.detail}"


def selftest_json(results: Sequence[FaultResult]) -> dict[str, Any]:
    out = []
    for r in results:
        catch = r.first_catch
        out.append({
            "fault": r.fault, "description": r.description, "status": r.status, "named": r.named,
            "caught": r.caught,
            "seconds_to_catch": None if catch is None else catch.seconds,
            "examples_to_catch": None if catch is None else catch.examples,
            "case": None if catch is None or catch.campaign is None else case_to_dict(catch.campaign.failure.case),
            "detections": [d.to_dict() for d in r.detections],
        })
    return {"kind": "selftest", "ok": all_ok(results), "counts": counts(results), "faults": out}
