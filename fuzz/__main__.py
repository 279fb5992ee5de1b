"""``python -m fuzz``: the tbe-fuzz command line."""

from fuzz.cli import main

raise SystemExit(main())
