"""The tbe-fuzz command line: one parser with a subcommand each (run, warmup, replay, gate, tune,
selftest, mutate), their handlers, and the entry point ``main`` that loads the Hypothesis profile first."""

from fuzz.cli.parser import build_parser, main

__all__ = ["build_parser", "main"]
