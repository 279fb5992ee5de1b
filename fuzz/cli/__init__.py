"""The tbe-fuzz command line."""

from fuzz.cli.parser import build_parser, main

__all__ = ["build_parser", "main"]
