"""The documentation cannot drift: README length, links, the generated CLI reference, every TBE_*
variable and every planted fault documented, every documented tbe-fuzz option real."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from fuzz.cli import build_parser
from fuzz.cli import reference
from tests.paths import REPO

DOCS = REPO / "docs"
README_MAX_LINES = 150
CODE_DIRS = ("tbe", "cases", "oracles", "strategies", "fuzz", "benchmarks")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
ENV_VAR = re.compile(r"\bTBE_[A-Z0-9_]*[A-Z0-9]\b")


def _pages() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", page.read_text(), re.M)}


def _outside_code(text: str) -> str:
    """The page without fenced code blocks (a link inside one is an example, not a link)."""
    return re.sub(r"```.*?```", "", text, flags=re.S)


def test_readme_is_at_most_150_lines():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, at most {README_MAX_LINES}"


def test_docs_exist():
    for page in ("concepts.md", "reference/cli.md", "reference/environment.md", "reference/exit-codes.md",
                 "reference/artifacts.md", "reference/faults.md"):
        assert (DOCS / page).is_file(), f"docs/{page} is missing"
    for folder in ("guides", "design"):
        assert list((DOCS / folder).glob("*.md")), f"docs/{folder}/ has no pages"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(_outside_code(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = page if not path else (page.parent / path).resolve()
        if not dest.exists():
            broken.append(f"{target} (no {dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest})")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {dest.name})")
    assert not broken, f"{page.relative_to(REPO)}: broken links: {broken}"


def test_link_checker_sees_a_broken_link(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Title\n[ok](p.md#title) [bad](missing.md) [bad anchor](p.md#nowhere)\n")
    targets = LINK.findall(page.read_text())
    assert targets == ["p.md#title", "missing.md", "p.md#nowhere"]
    assert "title" in _anchors(page) and "nowhere" not in _anchors(page)
    assert not (tmp_path / "missing.md").exists()


def test_cli_reference_is_generated_from_the_parser():
    committed = (DOCS / "reference" / reference.FILE).read_text()
    assert committed == reference.render(), (
        "docs/reference/cli.md is stale: run `python -m fuzz.cli.reference --write docs/reference`")


def test_environment_table_is_generated_from_the_registry():
    committed = (DOCS / "reference" / reference.ENV_FILE).read_text()
    assert committed == reference.with_env_table(committed), (
        "docs/reference/environment.md's table is stale: run `python -m fuzz.cli.reference --write docs/reference`")


def test_environment_table_refresh_replaces_only_the_marked_block():
    page = f"# Env\nbefore\n{reference.ENV_BEGIN}\nstale row\n{reference.ENV_END}\nafter\n"
    out = reference.with_env_table(page)
    assert "stale row" not in out and "| `TBE_FUZZ_ALLOW_FAULTS` |" in out
    assert out.startswith("# Env\nbefore\n") and out.endswith(f"|\n\n{reference.ENV_END}\nafter\n")
    with pytest.raises(ValueError, match="markers"):
        reference.with_env_table("# no markers\n")


def test_cli_reference_lists_every_option_of_every_command():
    text = reference.render()
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, cmd in sub.choices.items():
        assert f"## {name}\n" in text
        for action in cmd._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in text or f", {flag}" in text, f"{name} {flag} missing from cli.md"


def _env_vars_in_code() -> set[str]:
    found = set()
    for folder in CODE_DIRS:
        for path in (REPO / folder).rglob("*.py"):
            found |= set(ENV_VAR.findall(path.read_text()))
    return found


def test_every_tbe_variable_read_in_the_code_is_documented():
    variables = _env_vars_in_code()
    assert {"TBE_FUZZ_ALLOW_FAULTS", "TBE_FUZZ_SANITIZE", "TBE_WEAK_MEMORY_SEED"} <= variables  # the scan works
    documented = set(ENV_VAR.findall((DOCS / "reference" / "environment.md").read_text()))
    missing = sorted(variables - documented)
    assert not missing, f"read in the code but not in docs/reference/environment.md: {missing}"


def test_every_planted_fault_is_documented():
    from tbe import faults

    text = (DOCS / "reference" / "faults.md").read_text()
    missing = sorted(name for name in faults.KNOWN if f"`{name}`" not in text)
    assert not missing, f"planted faults missing from docs/reference/faults.md: {missing}"
    assert "TBE_FUZZ_ALLOW_FAULTS" in text


def _documented_commands() -> list[tuple[str, list[str]]]:
    """(page, argv after the program) of every `tbe-fuzz CMD ...` or `python -m fuzz CMD ...` in the docs."""
    found = []
    for page in _pages():
        for line in page.read_text().splitlines():
            for m in re.finditer(r"(?:tbe-fuzz|python -m fuzz)\s+([a-z]+)(.*?)(?=$|[`#|;(]|tbe-fuzz|python -m)", line):
                try:
                    words = shlex.split(m.group(2))
                except ValueError:
                    words = m.group(2).split()
                found.append((str(page.relative_to(REPO)), [m.group(1), *words]))
    return found


def test_every_documented_option_exists():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    commands = _documented_commands()
    assert len(commands) > 20  # the scan finds the documented commands
    wrong = []
    for page, (cmd, *words) in commands:
        if cmd not in sub.choices:
            continue  # prose such as "tbe-fuzz replays ..." or another module's command
        flags = {f for a in sub.choices[cmd]._actions for f in a.option_strings}
        for w in words:
            flag = w.split("=")[0].strip("[],.;:")
            if flag.startswith("-") and flag not in flags:
                wrong.append(f"{page}: tbe-fuzz {cmd} {flag}")
    assert not wrong, f"documented options that the parser does not have: {wrong}"
