"""Find and import TorchRec's Triton TBE from where the user keeps it, without touching its files.

Where it looks, in order: a source tree the user names (a torchrec checkout, or a folder holding
``torchrec/distributed/triton_tbe/``, or that folder itself); else an installed ``torchrec`` that has
the module. Each source is imported as its own package (``tbe_fuzz_torchrec_<digest>``), so two versions
can live in one process (the gate runs a baseline and a candidate side by side) and an installed torchrec
is left as it was.

Three stand-ins make the module importable and runnable outside its authors' tree; each is named in
``Loaded.stand_ins`` when used, so a summary can say so once:

* ``ads_mkl.ops.triton.amd...``: a private module imported at module level whose names are used only on
  AMD (``torch.version.hip``); a stand-in module gives those names, each raising if it is ever called.
* ``fbgemm_gpu.config.FeatureGateName`` members the installed fbgemm_gpu lacks (from 1fb0a9f9 on the
  module reads ``DISABLE_OFFSETS_ADJUSTMENT``, absent from fbgemm-gpu 1.6.0): read as off.
* ``record_forward_event`` makes a ``torch.cuda.Event``: on a CPU the adapter skips it
  (``Loaded.cpu_event_skip``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, Optional

from fuzz.errors import SUTError
from tbe.env import Kind, register

TORCHREC_SNAPSHOTS = register(
    "TBE_FUZZ_TORCHREC_SNAPSHOTS", Kind.PATH, None,
    "a folder of TorchRec Triton TBE versions, one folder per commit, that the tests and benchmarks run "
    "--sut torchrec-triton against (default: ../shared/third_party/torchrec-triton-tbe beside the repository)")

PACKAGE = ("torchrec", "distributed", "triton_tbe")
MAIN = "triton_table_batched_embeddings"
FILES = (MAIN, "triton_tbe_backward_utils", "triton_tbe_backward_long_run_fused")
AMD_MODULE = "ads_mkl.ops.triton.amd.triton_table_batched_embeddings"


@dataclasses.dataclass(frozen=True)
class Loaded:
    """One imported version: its main module, where it came from and what stood in for missing pieces."""

    module: Any
    origin: str                 # "source" (a folder the user named) or "installed"
    path: str                   # the folder holding the three files
    version: str                # a commit where one is known, else the files' digest
    digest: str                 # sha256 of the three files, first 12 hex digits
    stand_ins: tuple[str, ...]  # what was supplied, in words

    def describe(self) -> str:
        where = f"{self.path}" if self.origin == "source" else f"installed torchrec ({self.path})"
        return f"TorchRec Triton TBE {self.version} from {where}"


def module_folder(source: str | Path) -> Path:
    """The folder holding the three files, for a checkout, a snapshot folder or the folder itself."""
    root = Path(source).expanduser()
    for folder in (root.joinpath(*PACKAGE), root):
        if (folder / f"{MAIN}.py").is_file():
            return folder.resolve()
    if not root.exists():
        raise SUTError(f"--sut-source {source}: no such folder")
    raise SUTError(f"--sut-source {source}: holds no {'/'.join(PACKAGE)}/{MAIN}.py "
                   f"(give a torchrec checkout, a folder holding torchrec/, or the triton_tbe folder itself)")


def digest(folder: Path) -> str:
    h = hashlib.sha256()
    for name in FILES:
        f = folder / f"{name}.py"
        h.update(name.encode())
        h.update(f.read_bytes() if f.is_file() else b"")
    return h.hexdigest()[:12]


def version_of(folder: Path, files_digest: str) -> str:
    """The commit of the torchrec git checkout holding ``folder`` (with ``+dirty`` where the three files have
    uncommitted changes), else the name of the folder holding ``torchrec/`` when it reads as a commit (a
    snapshot folder), else the three files' digest."""
    top = folder.parents[len(PACKAGE) - 1] if folder.name == PACKAGE[-1] else folder
    try:
        root = subprocess.run(["git", "-C", str(top), "rev-parse", "--show-toplevel"], capture_output=True,
                              text=True, timeout=10)
        if root.returncode == 0 and Path(root.stdout.strip()).resolve() == top.resolve():
            head = subprocess.run(["git", "-C", str(top), "rev-parse", "--short=8", "HEAD"], capture_output=True,
                                  text=True, timeout=10).stdout.strip()
            dirty = subprocess.run(["git", "-C", str(top), "status", "--porcelain", "--", str(folder)],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            if head:
                return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    if 7 <= len(top.name) <= 40 and all(c in "0123456789abcdef" for c in top.name):
        return top.name
    return f"sha256:{files_digest}"


class _AbsentOnThisMachine:
    """A name of the AMD-only module: importable, and raising if a kernel path ever reaches it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise SUTError(f"TorchRec's TBE called {AMD_MODULE}.{self.name}, a stand-in (the module is used only on AMD)")

    def __getitem__(self, grid: Any) -> "_AbsentOnThisMachine":
        return self


def _stand_in_name(name: str) -> _AbsentOnThisMachine:
    """Any public name of the AMD module; dunder names stay absent (tools that walk sys.modules read them)."""
    if name.startswith("__"):
        raise AttributeError(name)
    return _AbsentOnThisMachine(name)


def _amd_stand_in() -> Optional[str]:
    """Install the AMD module's stand-in unless the real one imports; the stand-in's description, or None."""
    try:
        importlib.import_module(AMD_MODULE)
        return None
    except ImportError:
        pass
    parts = AMD_MODULE.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__path__ = []  # a package, so the next part imports beneath it
            sys.modules[name] = mod
    leaf = sys.modules[AMD_MODULE]
    leaf._FIXED_GRID = 1  # a number the module reads at import; its AMD grid, never used off AMD
    leaf.__getattr__ = _stand_in_name  # PEP 562
    return f"{AMD_MODULE} (private, used only on AMD): a stand-in module"


class _OffGate:
    def __init__(self, name: str) -> None:
        self.name = name

    def is_enabled(self) -> bool:
        return False


class _Gates:
    """``FeatureGateName`` with the members the installed fbgemm_gpu lacks read as off (and remembered)."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.missing: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self._real, name)
        except AttributeError:
            self.missing.add(name)
            return _OffGate(name)


def _import_from(folder: Path, package: str) -> Any:
    """Import the three files of ``folder`` as ``package.torchrec.distributed.triton_tbe``; the files' own
    absolute imports (``torchrec.distributed.triton_tbe....``) resolve to them while they load."""
    saved = {k: v for k, v in sys.modules.items() if k == "torchrec" or k.startswith("torchrec.")}
    for k in saved:
        del sys.modules[k]
    created: list[str] = []
    try:
        for i in range(1, len(PACKAGE) + 1):
            name = ".".join(PACKAGE[:i])
            mod = types.ModuleType(name)
            mod.__path__ = [str(folder)] if i == len(PACKAGE) else []
            sys.modules[name] = mod
            created.append(name)
        main = importlib.import_module(".".join(PACKAGE + (MAIN,)))
        loaded = [k for k in sys.modules if k == "torchrec" or k.startswith("torchrec.")]
        for k in loaded:  # keep them under this source's own name
            sys.modules[f"{package}.{k}"] = sys.modules.pop(k)
        return main
    finally:
        for k in [k for k in sys.modules if k == "torchrec" or k.startswith("torchrec.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def _installed_folder() -> Optional[Path]:
    try:
        spec = importlib.util.find_spec(".".join(PACKAGE + (MAIN,)))
    except (ImportError, ValueError):
        return None
    return Path(spec.origin).parent if spec is not None and spec.origin else None


@functools.lru_cache(maxsize=None)
def load(source: Optional[str] = None) -> Loaded:
    """TorchRec's Triton TBE from ``source`` (a folder; see ``module_folder``), else from an installed
    torchrec. SUTError (naming what was looked for) when neither has it or it does not import."""
    if source is not None:
        folder, origin = module_folder(source), "source"
    else:
        found = _installed_folder()
        if found is None:
            raise SUTError("no installed torchrec has torchrec/distributed/triton_tbe; name a source tree with "
                           "--sut-source DIR (a torchrec checkout or a snapshot folder)")
        folder, origin = found, "installed"
    files_digest = digest(folder)
    stand_ins = [s for s in (_amd_stand_in(),) if s]
    try:
        import fbgemm_gpu  # noqa: F401  (its ops: bounds check, transpose, VBE metadata)
    except Exception as e:  # noqa: BLE001  (any failure to import means it is not usable here)
        raise SUTError(f"TorchRec's Triton TBE needs fbgemm_gpu, which does not import ({type(e).__name__}: {e})")
    try:
        module = _import_from(folder, f"tbe_fuzz_torchrec_{files_digest}")
    except SUTError:
        raise
    except Exception as e:  # noqa: BLE001  (its import failing is a fact about it here, said with its cause)
        raise SUTError(f"TorchRec's Triton TBE in {folder} does not import: {type(e).__name__}: {e}") from e
    gates = getattr(module, "FeatureGateName", None)
    if gates is not None and not isinstance(gates, _Gates):
        module.FeatureGateName = _Gates(gates)
    return Loaded(module, origin, str(folder), version_of(folder, files_digest), files_digest, tuple(stand_ins))


def gate_stand_ins(loaded: Loaded) -> tuple[str, ...]:
    """The feature gates read as off so far (known once a module has been built)."""
    gates = getattr(loaded.module, "FeatureGateName", None)
    missing = sorted(gates.missing) if isinstance(gates, _Gates) else []
    return tuple(f"fbgemm_gpu FeatureGateName.{m} (absent from this fbgemm_gpu): read as off" for m in missing)


def snapshots_root() -> Optional[Path]:
    """The folder of version snapshots (``TBE_FUZZ_TORCHREC_SNAPSHOTS``, else ``../shared/third_party/
    torchrec-triton-tbe`` beside the repository), or None where there is none."""
    root = TORCHREC_SNAPSHOTS.path() or Path(__file__).resolve().parents[3].parent / "shared" / "third_party" \
        / "torchrec-triton-tbe"
    return root if root.is_dir() else None


def snapshots(root: Optional[Path] = None) -> list[Path]:
    """The snapshot folders under ``root`` (each holding torchrec/distributed/triton_tbe/), oldest first where
    the folder's README table gives the order, else by name."""
    root = root or snapshots_root()
    if root is None:
        return []
    found = [p for p in root.iterdir() if p.is_dir() and (p.joinpath(*PACKAGE) / f"{MAIN}.py").is_file()]
    readme = root / "README.md"
    order = readme.read_text() if readme.is_file() else ""
    return sorted(found, key=lambda p: (order.find(f"| {p.name} |") if f"| {p.name} |" in order else len(order), p.name))
