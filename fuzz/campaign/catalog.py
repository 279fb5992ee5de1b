"""The cases an artifacts root holds: one entry per saved failure and per case a dead driver left pending.

``tbe-fuzz replay ROOT`` prints this list when ROOT is no single case: each entry names the
directory to replay, how the case failed (the kind and the kind of check, from meta.json) and
its size (tables, bags, lookups, from case.json).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Optional

from fuzz.execution import artifacts

PENDING = ".pending"


@dataclasses.dataclass(frozen=True)
class Entry:
    path: Path
    kind: str                  # failure kind from meta.json; "pending" for a case a dead driver left
    check: Optional[str]       # the first failing kind of check, where the artifact records it
    sut: Optional[str]
    size: Optional[tuple[int, int, int]]  # (tables, bags, lookups); None when case.json does not load
    problem: Optional[str] = None         # why case.json or meta.json could not be read

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "id": self.path.name, "kind": self.kind, "check": self.check,
                "sut": self.sut, "tables": self.size and self.size[0], "bags": self.size and self.size[1],
                "lookups": self.size and self.size[2], "problem": self.problem}


def is_root(path: Path) -> bool:
    """A directory holding no case itself but case directories (saved or pending) below it."""
    path = Path(path)
    return path.is_dir() and not (path / "case.json").is_file() and bool(_case_dirs(path))


def _case_dirs(root: Path) -> list[tuple[Path, bool]]:
    saved = [(d, False) for d in sorted(root.iterdir()) if d.is_dir() and (d / "case.json").is_file()]
    pending_root = root / PENDING
    pending = [(d, True) for d in sorted(pending_root.iterdir()) if d.is_dir() and (d / "case.json").is_file()] \
        if pending_root.is_dir() else []
    return saved + pending


def _entry(path: Path, pending: bool) -> Entry:
    problems = []
    meta: dict[str, Any] = {}
    if (path / "meta.json").is_file():
        try:
            meta = json.loads((path / "meta.json").read_text())
            meta = meta if isinstance(meta, dict) else {}
        except (OSError, json.JSONDecodeError) as e:
            problems.append(f"meta.json: {e}")
    size = None
    try:
        size = artifacts.load_case(path / "case.json").size()
    except (OSError, ValueError, TypeError, KeyError) as e:  # JSONDecodeError is a ValueError
        problems.append(f"case.json: {type(e).__name__}: {e}")
    kind = "pending" if pending else str(meta.get("failure_kind") or "unknown")
    return Entry(path, kind, meta.get("failed_check"), meta.get("sut"), size, "; ".join(problems) or None)


def entries(root: Path) -> list[Entry]:
    """Saved failures (oldest first: their names start with a timestamp), then pending cases."""
    return [_entry(d, pending) for d, pending in _case_dirs(Path(root))]


def text(root: Path, found: list[Entry]) -> str:
    lines = [f"tbe-fuzz replay: {root} is an artifacts root holding {len(found)} case(s); "
             f"replay one with `tbe-fuzz replay {Path(root) / '<id>'}`",
             f"  {'id':<36} {'kind':<10} {'sut':<10} {'tables':>6} {'bags':>8} {'lookups':>9}  check"]
    for e in found:
        t, b, n = e.size if e.size is not None else ("?", "?", "?")
        ident = f"{PENDING}/{e.path.name}" if e.kind == "pending" else e.path.name
        lines.append(f"  {ident:<36} {e.kind:<10} {e.sut or '-':<10} {t:>6} {b:>8} {n:>9}  {e.check or '-'}"
                     + (f"  ({e.problem})" if e.problem else ""))
    return "\n".join(lines)


def to_json(root: Path, found: list[Entry]) -> dict[str, Any]:
    return {"kind": "artifacts", "root": str(root), "cases": [e.to_json() for e in found]}
