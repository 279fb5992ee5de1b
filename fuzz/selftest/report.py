"""Readable summaries of a self-test run (plain text or JSON): each fault's status and its detections."""

from __future__ import annotations

from typing import Any, Sequence

from fuzz.selftest.detectors import CAUGHT, MISSED, Detection
from fuzz.selftest.run import FaultResult, all_ok, counts


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
            "shrunk": None if catch is None or catch.shrunk is None
            else dict(zip(("tables", "bags", "lookups"), catch.shrunk)),
            "case": None if catch is None or catch.campaign is None else catch.campaign.failure.case.to_dict(),
            "detections": [d.to_dict() for d in r.detections],
        })
    return {"kind": "selftest", "ok": all_ok(results), "counts": counts(results), "faults": out}
