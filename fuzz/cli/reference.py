"""The CLI reference in Markdown, generated from ``tbe-fuzz``'s argparse parser so it cannot drift.

``python -m fuzz.cli.reference --write docs/reference`` writes ``cli.md`` and refreshes the variables table
of ``environment.md`` (between its markers, from ``tbe.env.markdown()``); without ``--write`` it prints ``cli.md``.
It renders the parser's actions itself rather than ``format_help()``: argparse's help layout changes
between Python versions and terminal widths, and the reference must be the same on every machine.
argparse has no public way to list a parser's options, so this reads ``_actions`` (stable since 3.2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

FILE = "cli.md"
ENV_FILE = "environment.md"
ENV_BEGIN = "<!-- generated from tbe.env.markdown() by `python -m fuzz.cli.reference --write docs/reference` -->"
ENV_END = "<!-- end of the generated table -->"
HEADER = """# CLI reference

Generated from the argparse parser by `python -m fuzz.cli.reference --write docs/reference`;
`tests/test_docs.py` fails when this file and the parser disagree. `tbe-fuzz CMD` and
`python -m fuzz CMD` are the same command. Exit codes: [exit-codes.md](exit-codes.md).
"""


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each subcommand, in the order the parser declares them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def _usage(action: argparse.Action) -> str:
    """How an option is written: its flags and, if it takes a value, the metavar or the choices."""
    if not action.option_strings:
        return str(action.metavar or action.dest)
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    if action.metavar is not None:
        value = str(action.metavar)
    elif action.choices is not None:
        value = "{" + ",".join(str(c) for c in action.choices) + "}"
    else:
        value = action.dest.upper()
    return ", ".join(f"{flag} {value}" for flag in action.option_strings)


def _help(action: argparse.Action) -> str:
    text = " ".join((action.help or "").split())
    if "%(" in text:
        text = text % {**vars(action), "default": action.default}
    notes = []
    if action.required and action.option_strings:
        notes.append("required")
    if isinstance(action, argparse._AppendAction) and "repeatable" not in text:
        notes.append("repeatable")
    if action.choices is not None and action.metavar is not None:
        notes.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
    return text + (f" ({'; '.join(notes)})" if notes else "")


def _command_section(name: str, summary: str, parser: argparse.ArgumentParser) -> list[str]:
    lines = [f"## {name}", ""]
    if summary:
        lines += [summary[0].upper() + summary[1:] + ".", ""]
    rows = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    positionals = [a for a in rows if not a.option_strings]
    options = [a for a in rows if a.option_strings]
    required = [_usage(a) for a in options if a.required]
    call = " ".join([f"tbe-fuzz {name}"] + [_usage(a).upper() for a in positionals] + required
                    + (["[options]"] if len(options) > len(required) else []))
    lines += [f"`{call}`", ""]
    for a in positionals + options:
        lines.append(f"- `{_usage(a)}`: {_help(a)}")
    return lines + [""]


def render(parser: Optional[argparse.ArgumentParser] = None) -> str:
    """The whole reference: the program, then one section per subcommand."""
    if parser is None:
        from fuzz.cli.parser import build_parser

        parser = build_parser()
    subs = _subcommands(parser)
    lines = [HEADER, f"{parser.description}", "", "| command | does |", "|---|---|"]
    lines += [f"| [`{name}`](#{name}) | {summary} |" for name, summary, _ in subs]
    lines.append("")
    top = [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
    if top:
        lines += ["Options before the command:", ""] + [f"- `{_usage(a)}`: {_help(a)}" for a in top] + [""]
    for name, summary, sub in subs:
        lines += _command_section(name, summary, sub)
    return "\n".join(lines).rstrip() + "\n"


# the modules that register environment variables (tbe.env.register), each its own; tests/tbe/test_env.py holds the
# list to every call of register in the repository
ENV_OWNERS = ("tbe.env", "oracles.error_model", "fuzz.profiles", "fuzz.compile.cuda_target",
              "fuzz.compile.kernel_cache", "fuzz.memcheck.sanitizer", "fuzz.memcheck.weak_memory",
              "fuzz.execution.forced_crash", "fuzz.execution.verdict", "fuzz.execution.worker_env",
              "fuzz.sut.torchrec_triton.loader")


def registry() -> dict:
    """Every environment variable the project reads (``tbe.env.REGISTRY`` once each owner is imported)."""
    import importlib

    from tbe import env

    for owner in ENV_OWNERS:
        importlib.import_module(owner)
    return env.REGISTRY


def with_env_table(page: str) -> str:
    """``page`` with the text between ``ENV_BEGIN`` and ``ENV_END`` replaced by the registry's table."""
    from tbe.env import markdown

    registry()

    head, sep, rest = page.partition(ENV_BEGIN + "\n")
    _, sep2, tail = rest.partition(ENV_END)
    if not sep or not sep2:
        raise ValueError(f"{ENV_FILE} lacks the markers {ENV_BEGIN!r} ... {ENV_END!r}")
    return head + sep + markdown() + "\n" + sep2 + tail  # a blank line ends the table before the marker


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fuzz.cli.reference", description=__doc__.splitlines()[0])
    p.add_argument("--write", type=Path, default=None, metavar="DIR",
                   help=f"write DIR/{FILE} (and refresh DIR/{ENV_FILE}'s variables table) instead of printing")
    args = p.parse_args(argv)
    text = render()
    if args.write is None:
        sys.stdout.write(text)
    else:
        args.write.mkdir(parents=True, exist_ok=True)
        (args.write / FILE).write_text(text)
        print(f"wrote {args.write / FILE}")
        env = args.write / ENV_FILE
        if env.is_file():
            env.write_text(with_env_table(env.read_text()))
            print(f"refreshed the variables table of {env}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
