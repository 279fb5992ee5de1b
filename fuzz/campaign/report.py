"""Readable summaries of campaign and replay results (plain text or JSON), and the lines of a failing case."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

from fuzz.execution import replay_command
from fuzz.campaign import repeat
from fuzz.campaign.search import CampaignResult
from fuzz.judge import RATIO_NOTE, CaseResult, coverage, ratio_text
from fuzz.campaign.replay import ReplayResult
from fuzz.glossary import Term, see
from fuzz.status import FailureKind, StopReason


def _ratios(ratios: dict[str, float]) -> list[str]:
    return [f"    {name:<32} {ratio_text(value)}" for name, value in sorted(ratios.items())]


def _kind(f: CaseResult) -> str:
    """The failure kind, and for a pack the sub-case the failure names."""
    where = f.sub_case_text()
    return f"{f.kind}; {where}" if where else str(f.kind)


def failure_lines(f: CaseResult) -> list[str]:
    tables, bags, _ = f.case.size()
    return [
        f"  failing case: {tables} table(s), {bags} bag(s), {f.lookups} lookups; failure kind: {_kind(f)}",
        f"  case: {json.dumps(f.case.to_dict(), sort_keys=True)}",
        *["  " + line for line in f.text().splitlines() if "MISMATCH" in line or not line.startswith("step")],
    ]


def _known_lines(r: CampaignResult) -> list[str]:
    """Each known finding the campaign met (shrunk case, when, artifact), then those triaged but not seen."""
    from fuzz.judge import for_sut

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
                  f"      case: {json.dumps(k.result.case.to_dict(), sort_keys=True)}",
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


def _caps(r: CampaignResult):
    return _sut(r.sut).capabilities


def _sut(sut: str):
    from fuzz.sut import get

    return get(sut)


def _time_lines(r: CampaignResult) -> list[str]:
    """How the budget bounded the run: the example count of a time-bound run, examples cut for time."""
    from fuzz.budgets import EXAMPLE_CAP_S

    lines = []
    counts = repeat.of(r)
    if r.stopped_by == StopReason.TIME:
        aimed = f", {r.fill_examples} aimed" if r.fill_examples else ""
        after = f", {r.drawn_after} drawn after them (seed + 1)" if r.resumed else ""
        lines.append(f"  time-bound: {r.examples} examples ({r.tour_examples} of the opening tour, {counts.drawn} "
                     f"drawn{aimed}{after}) in {r.budget.seconds:.0f}s; the count varies with the machine's speed")
    if r.budget.seconds != float("inf"):
        lines.append(_repeat_line(r, counts))
    if r.skipped_for_time or r.stopped_for_time:
        lines.append(f"  for time: {r.skipped_for_time} drawn example(s) not started (expected cost over the time "
                     f"left), {r.stopped_for_time} stopped {EXAMPLE_CAP_S:g}s past the end; none judged")
    for path in r.stopped_artifacts:  # a stopped case may be a hang that the budget did not wait out
        lines.append(f"  stopped for time, saved to judge: {path}")
        lines.append(f"    replay: {(path / 'replay.txt').read_text().strip()}")
    return lines


def _repeat_line(r: CampaignResult, counts: repeat.Repeat) -> str:
    """How to run this campaign's examples again, and what would make that run differ."""
    if r.reused:
        return ("  repeat: not from the seed alone, as the search began with the example database's saved examples "
                "(--continue); without it the same command with " f"{counts.option} runs the seed's examples")
    caveat = "; each known finding must shrink to the same case for the rounds after it to match" if r.known else ""
    return (f"  repeat: the same command with {counts.option} runs these examples again (no time limit; the seed "
            f"decides them){caveat}")


def campaign_text(r: CampaignResult) -> str:
    verdict = "PASS" if r.ok else "FAIL"
    if r.ok and r.known:
        verdict = f"PASS (every failure is a known finding: {len(r.known)} triaged)"
    if r.interrupted:
        verdict = ("INTERRUPTED, no failure found" if r.ok else "FAIL (INTERRUPTED: the smallest failure so far is kept)")
    if r.ok and not r.judged:
        verdict = "NOT RUN (no example was checked" + (": interrupted)" if r.interrupted else " in the time)")
    lines = [
        f"tbe-fuzz campaign: {verdict}  (SUT {_sut(r.sut).label}, budget {r.budget.name}, seed {r.seed}, "
        f"stopped by {r.stopped_by})",
        f"  examples {r.examples}" + (f" ({r.sub_cases} cases, packed)" if r.sub_cases != r.examples else "")
        + f", lookups {r.lookups}, {r.seconds:.1f}s"
        + (f", shrink steps {r.shrink_examples} + {r.reduce_steps} spec reductions"
           + (f" in {r.shrink_seconds:.1f}s" if r.shrink_seconds is not None else "") if not r.ok else ""),
        *_time_lines(r),
        (f"  tiers exercised ({see(Term.TIERS)}): " if _caps(r).project_kernels else
         "  paths exercised (its own): " if _sut(r.sut).paths is not None else
         "  segment-length classes (this project's tiers): ")
        + (", ".join(f"{t} x{n}" for t, n in sorted(r.tiers.items())) or "none"),
        f"  bound: {r.model.describe()}",
        _tour_line(r),
        _inputs_line(r),
        *_fill_lines(r),
        f"  max error/bound ratio per check ({RATIO_NOTE}):",
        *_ratios(r.max_ratio),
        *r.margins.lines(),
        *([f"  kernel compilations during the search: {r.compiles.text()}"] if _sut(r.sut).capabilities.triton_kernels
          else []),
        *r.time.lines(r.seconds),
        _fbgemm_line(r),
        *r.teeth.lines(),
        *(coverage.text(coverage_json(r)) if r.failure is None else coverage.text(
            coverage_json(r), limit=0, why_unlisted="the search stopped at its failure; --json lists them")),
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
                     + (" (not on the triage list)" if r.known or not _caps(r).project_kernels else ""))
        if r.failure_overrides:
            lines.append(f"  failing config: the config under test with {r.failure_overrides}")
        lines += failure_lines(r.failure)
    if r.artifact is not None:
        lines.append(f"  artifact: {r.artifact}")
        lines.append(f"  replay:   {(r.artifact / 'replay.txt').read_text().strip()}")
        lines += _sanitizer_hint(r.failure, (r.artifact / "replay.txt").read_text())
    return "\n".join(lines)


def _fill_lines(r: CampaignResult) -> list[str]:
    if not r.fill_zero:
        return []
    return [f"  aimed cases: {r.fill_examples} of {r.fill_planned} checked, built for the {r.fill_zero} reachable "
            f"cell(s) the draws left at zero ({see(Term.AIMED, Term.FILL)})"]


def _inputs_line(r: CampaignResult) -> str:
    from fuzz.execution import InputForm

    held = ", ".join(f"{r.inputs[f]} with {f.value}" for f in InputForm if r.inputs[f])
    return f"  production inputs: {held or 'none'} (sub-cases; the forms the SUT declares are drawn)"


def _tour_line(r: CampaignResult) -> str:
    if r.tour is None:
        return f"  opening tour: not run (the search alone; {see(Term.TOUR)})"
    share = "" if r.tour.of == 1 else f" (share {r.tour} of the tour: every {r.tour.of}th case)"
    return f"  opening tour: {r.tour_examples} case(s) checked{share} ({see(Term.TOUR)})"


def _fbgemm_line(r: CampaignResult) -> str:
    from fuzz.judge import CHECKED, RULE

    if not _caps(r).project_kernels:
        return f"  FBGEMM CPU oracle: not run (it samples examples beside this project's kernels, not SUT {_sut(r.sut).name})"
    others = ", ".join(f"{n} {k}" for k, n in sorted(r.fbgemm.items()) if k != CHECKED)
    return (f"  FBGEMM CPU oracle: checked {r.fbgemm.get(CHECKED, 0)} of {r.examples} examples ({RULE})"
            + (f"; {others}" if others else ""))


def _sanitizer_hint(f: CaseResult, replay: str) -> list[str]:
    """On the interpreter without the sanitizer, say how to have it name any out-of-range access."""
    from fuzz.memcheck import sanitizer
    from tbe.backend import INTERPRETED

    hinted = (FailureKind.MISMATCH, FailureKind.CRASH, FailureKind.EXCEPTION)
    if not INTERPRETED or sanitizer.requested() or f.kind not in hinted:
        return []
    return [f"  hint:     TBE_FUZZ_SANITIZE=1 {replay.split('   (or:')[0].strip()}   names any out-of-range access"]


def coverage_json(r: CampaignResult) -> Optional[dict[str, Any]]:
    """The campaign's coverage matrix (``fuzz.judge.coverage``); None for a SUT without this project's paths."""
    if not _caps(r).project_kernels:
        return None
    return r.coverage.to_json(coverage.reachable(r.config, r.search_config, max_lookups=r.budget.max_lookups,
                                                 feature_map=_caps(r).feature_table_map,
                                                 vbe=_caps(r).vbe))


def campaign_json(r: CampaignResult) -> dict[str, Any]:
    return {
        "kind": "campaign", "ok": r.ok and r.judged, "not_run": r.ok and not r.judged, "budget": r.budget.name, "pack": r.budget.pack,
        "seed": r.seed, "stopped_by": r.stopped_by,
        "repeat": dataclasses.asdict(repeat.of(r)), "read_database": r.reused,
        "interrupted": r.interrupted, "time_bound": r.stopped_by == StopReason.TIME,
        **r.to_state(),
        "bound": r.model.kind, "false_alarm": r.model.false_alarm if r.model.kind != "worst" else None,
        "config": r.config.to_dict(),
        "coverage": coverage_json(r),
        "sut": r.sut,
        "known": [{"id": k.finding.id, "description": k.finding.description, "case": k.result.case.to_dict(),
                   "examples": k.examples, "seconds": round(k.seconds, 3), "lookups": k.result.lookups,
                   "reports": k.result.text().splitlines(),
                   "artifact": None if k.artifact is None else str(k.artifact)} for k in r.known],
        "failure": None if r.failure is None else {
            "kind": r.failure.kind, "case": r.failure.case.to_dict(), "reports": r.failure.text().splitlines(),
            "config_overrides": r.failure_overrides,
            "examples_to_first_failure": r.first_failure_examples,
            "seconds_to_first_failure": r.first_failure_seconds, "first_failure_headline": r.first_failure_headline,
            "shrink_seconds": r.shrink_seconds,
        },
        "artifact": None if r.artifact is None else str(r.artifact),
        "stopped_artifacts": [str(p) for p in r.stopped_artifacts],
    }


def replay_text(r: ReplayResult) -> str:
    res = r.result
    verdict = "PASS" if res.ok else "KNOWN" if r.ok else "FAIL"
    lines = [
        f"tbe-fuzz replay: {verdict}  (SUT {r.sut}; {r.source}; case {r.case_path}; "
        f"config {r.config_path or 'default KernelConfig()'})",
        *([] if res.ok else [f"  failure kind: {_kind(res)}"]),
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
