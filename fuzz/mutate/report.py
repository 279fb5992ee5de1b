"""The mutation report: score, counts per operator and file, and every survivor's diff (JSON + Markdown)."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any, Sequence

from fuzz.mutate.runner import VERDICTS, Outcome

DETECTED = ("killed", "timeout")


def counts(results: Sequence[Outcome]) -> dict[str, int]:
    c = collections.Counter(o.verdict for o in results)
    return {v: c.get(v, 0) for v in VERDICTS}


def score(results: Sequence[Outcome]) -> float | None:
    """(killed + timeout) / (all - equivalent); None when nothing non-equivalent ran."""
    c = counts(results)
    judged = len(results) - c["equivalent"]
    return None if judged == 0 else (c["killed"] + c["timeout"]) / judged


def _by(results: Sequence[Outcome], key) -> list[tuple[str, dict[str, int]]]:
    groups: dict[str, list[Outcome]] = collections.defaultdict(list)
    for o in results:
        groups[key(o)].append(o)
    return [(k, counts(v)) for k, v in sorted(groups.items())]


def to_json(results: Sequence[Outcome], header: dict[str, Any], total_sites: int) -> dict[str, Any]:
    ordered = sorted(results, key=lambda o: (o.site.path, o.site.line, o.site.col, o.site.id))
    return {"kind": "mutate", "header": header, "sites_in_population": total_sites, "mutants": len(results),
            "counts": counts(results), "score": score(results),
            "results": [o.to_dict() for o in ordered]}


def _table(rows: list[tuple[str, dict[str, int]]], name: str) -> list[str]:
    out = [f"| {name} | killed | timeout | survived | equivalent | score |", "|---|---|---|---|---|---|"]
    for k, c in rows:
        judged = sum(c.values()) - c["equivalent"]
        s = f"{(c['killed'] + c['timeout']) / judged:.0%}" if judged else "-"
        out.append(f"| {k} | {c['killed']} | {c['timeout']} | {c['survived']} | {c['equivalent']} | {s} |")
    return out


def _entry(o: Outcome) -> list[str]:
    s = o.site
    kernels = ", ".join(o.kernels) if o.kernels and list(o.kernels) != [s.function] else s.function
    return [f"#### `{s.path}:{s.line}` in `{s.function}` ({s.operator}: {s.description})", "",
            f"kernel(s): {kernels}; {o.note}", "", "```diff", o.diff.rstrip(), "```", ""]


def to_markdown(results: Sequence[Outcome], header: dict[str, Any], total_sites: int, command: str) -> str:
    c = counts(results)
    sc = score(results)
    check = header.get("check", {})
    lines = [
        "# Mutation report", "",
        f"Command: `{command}`", "",
        f"Check on each mutant: {check.get('kind')} (budget {check.get('budget')}, {check.get('seconds')} s search, "
        f"{check.get('max_examples') or 'budget'} examples at most, seed {check.get('seed')}). "
        f"Sample: {len(results)} of {total_sites} sites, "
        f"seed {header.get('seed')}; kernel sources {header.get('sources')}.", "",
        f"**Score: {'n/a' if sc is None else f'{sc:.1%}'}** = (killed + timeout) / (mutants - equivalent) = "
        f"({c['killed']} + {c['timeout']}) / ({len(results)} - {c['equivalent']}).", "",
        *_table(_by(results, lambda o: o.site.operator), "operator"), "",
        *_table(_by(results, lambda o: o.site.path), "file"), "",
    ]
    for verdict, title in (("survived", "Survivors"), ("equivalent", "Suspected equivalent")):
        chosen = [o for o in results if o.verdict == verdict]
        lines += [f"## {title} ({len(chosen)})", ""]
        for o in sorted(chosen, key=lambda o: (o.site.path, o.site.line)):
            lines += _entry(o)
    return "\n".join(lines).rstrip() + "\n"


def write(out: Path, results: Sequence[Outcome], header: dict[str, Any], total_sites: int, command: str) -> None:
    out.with_suffix(".json").write_text(json.dumps(to_json(results, header, total_sites), indent=1) + "\n")
    out.with_suffix(".md").write_text(to_markdown(results, header, total_sites, command))


def text(results: Sequence[Outcome]) -> str:
    c = counts(results)
    sc = score(results)
    return (f"tbe-fuzz mutate: score {'n/a' if sc is None else f'{sc:.1%}'} - " +
            ", ".join(f"{v} {k}" for k, v in c.items()) + f" of {len(results)} mutants")
