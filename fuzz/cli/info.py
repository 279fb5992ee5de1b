"""What the tool can say about itself: its version, the planted faults, the default KernelConfig.

Each answer is read from its one source (package metadata, ``tbe.faults.KNOWN``,
``KernelConfig()``), never from a copy. ``tbe`` is imported only when an answer needs it: it
loads torch and Triton, which ``--version`` and building the parser must not wait for.
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from typing import Any

DIST = "tbe-fuzz"


def version() -> str:
    """The installed distribution's version; from a source tree without an install, pyproject.toml's."""
    try:
        return metadata.version(DIST)
    except metadata.PackageNotFoundError:
        pass
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        import tomllib

        return str(tomllib.loads(pyproject.read_text())["project"]["version"])
    except (ImportError, OSError, KeyError, ValueError):
        return "unknown (not installed, no pyproject.toml)"


def faults() -> dict[str, str]:
    """Planted fault name -> the bug it plants, in registration order."""
    from tbe import faults as registry

    return dict(registry.KNOWN)


def faults_text() -> str:
    from tbe import faults as registry

    known = faults()
    width = max(map(len, known), default=0)
    return "\n".join([f"planted faults ({len(known)}; a config naming one is refused unless {registry.ALLOW_FAULTS.name}=1):"]
                     + [f"  {name:<{width}}  {what}" for name, what in known.items()])


def faults_epilog() -> str:
    """The fault paragraph of ``run``/``selftest --help``."""
    from tbe import faults as registry

    return (f"planted faults (KernelConfig.faults; refused unless {registry.ALLOW_FAULTS.name}=1, which selftest sets for "
            f"itself): {', '.join(faults())}. `tbe-fuzz selftest --list` says what each plants.")


def default_config() -> dict[str, Any]:
    from tbe import KernelConfig

    return KernelConfig().to_dict()


def default_config_json() -> str:
    """The default KernelConfig as the JSON ``KernelConfig.load`` reads (what ``--config`` takes)."""
    from tbe import KernelConfig

    return KernelConfig().to_json()


def default_config_text() -> str:
    data = default_config()
    width = max(map(len, data))
    return "\n".join(["default KernelConfig (`tbe-fuzz config --defaults --json > config.json` writes it as "
                      "a --config file; a file may name only the fields it changes):"]
                     + [f"  {k:<{width}} = {json.dumps(v)}" for k, v in data.items()])
