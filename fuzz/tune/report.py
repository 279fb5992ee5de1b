"""``tbe-fuzz tune``'s reports: tune.json, tune.md, the winner and each verified candidate's gate report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fuzz.tune.search import TuneResult


def to_json(res: TuneResult) -> dict[str, Any]:
    return {
        "kind": "tune", "winner": None if res.winner is None else res.winner.config.to_dict(),
        "winner_trial": None if res.winner is None else res.winner.number,
        "baseline": res.baseline.to_dict(), "aa_value": res.aa_value, "notes": res.notes,
        "seconds": round(res.seconds, 1), "search_seconds": round(res.search_seconds, 1),
        "study": res.study_name, "storage": res.options.storage,
        "options": {"shapes": [s.name for s in res.options.shapes], "time": res.options.seconds,
                    "gamma": res.options.gamma, "rounds": res.options.rounds, "seed": res.options.seed,
                    "fields": res.options.fields, "verify_top": res.options.verify_top,
                    "worst_floor": res.options.worst_floor},
        "trials": [{"number": t.number, "origin": t.origin, "value": t.value, "worst": t.worst, "state": t.state,
                    "seconds": round(t.seconds, 1), "error": t.error, "worker": t.worker,
                    "diff": {k: list(v) for k, v in res.baseline.diff(t.config).items()}} for t in res.trials],
        "verified": [{"trial": t.number, "search_value": t.value, "verdict": g.verdict, "reasons": g.reasons}
                     for t, g in res.verified],
    }


def write(res: TuneResult, out: Path) -> list[Path]:
    """tune.json, tune.md, winner.json (when a candidate passed) and gate-<trial>/ reports under ``out``."""
    from fuzz.gate import report as cascade_report

    out.mkdir(parents=True, exist_ok=True)
    data = to_json(res)
    paths = [out / "tune.json", out / "tune.md"]
    paths[0].write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    paths[1].write_text(markdown(res))
    if res.winner is not None:
        paths.append(out / "winner.json")
        paths[-1].write_text(res.winner.config.to_json())
    for trial, gate in res.verified:
        paths += cascade_report.write(gate, out / f"gate-trial{trial.number}")
    return paths


def text(res: TuneResult) -> str:
    head = (f"tbe-fuzz tune: {'ACCEPTED trial ' + str(res.winner.number) if res.winner else 'KEEP the baseline'}"
            f"  ({len(res.trials)} trials in {res.search_seconds:.0f}s of search, {res.seconds:.0f}s in all)")
    lines = [head]
    peers = sum(t.worker is not None for t in res.trials)
    if res.study_name is not None:
        lines.append(f"  shared study {res.study_name}: {len(res.trials) - peers} trials here, {peers} from other "
                     "processes")
    if res.aa_value is not None:
        lines.append(f"  baseline against itself (the tuner's A/A): {res.aa_value:.3f}x")
    for t in res.ranked[:5]:
        diff = ", ".join(f"{k}={b}" for k, (_, b) in sorted(res.baseline.diff(t.config).items()))
        lines.append(f"  trial {t.number:>3} {t.value:.3f}x  {diff}")
    for trial, gate in res.verified:
        lines.append(f"  verified trial {trial.number}: {gate.verdict} - " + "; ".join(gate.reasons[:3]))
    lines += [f"  note: {n}" for n in res.notes]
    return "\n".join(lines)


def markdown(res: TuneResult) -> str:
    lines = ["# tbe-fuzz tune", "", text(res).split("\n")[0].replace("tbe-fuzz tune: ", "Result: "), ""]
    lines += ["| trial | origin | speedup (search) | slowest shape | state | seconds | changed fields |",
              "|---|---|---|---|---|---|---|"]
    for t in sorted(res.trials, key=lambda t: -(t.value or 0)):
        diff = ", ".join(f"{k}={b}" for k, (_, b) in sorted(res.baseline.diff(t.config).items())) or "(baseline)"
        value = "-" if t.value is None else f"{t.value:.3f}x"
        worst = "-" if t.worst is None else f"{t.worst:.3f}x"
        origin = t.origin if t.worker is None else f"{t.origin} ({t.worker})"
        lines.append(f"| {t.number} | {origin} | {value} | {worst} | {t.error or t.state} | {t.seconds:.0f} "
                     f"| {diff} |")
    for trial, gate in res.verified:
        lines += ["", f"Trial {trial.number} through the gate: **{gate.verdict}** - " + "; ".join(gate.reasons),
                  f"(report: gate-trial{trial.number}/report.md)"]
    lines += [f"- {n}" for n in res.notes]
    return "\n".join(lines) + "\n"
