"""Replay a saved case: from an artifact's saved tensors (default) or re-materialized from its spec.

An artifact directory supplies case.json, config.json and tensors.pt; a bare case.json (or a
pending directory a dead driver left) is re-materialized and runs under ``--config`` (or a
config.json beside it, or the default). The verdict is the same ``run_case`` a campaign uses, in a
supervised worker, so a crash, a CUDA error or a hang is reported as the campaign reported it;
against the SUT the artifact records (meta.json) unless ``--sut`` names another. Failures triaged
for that SUT (``fuzz.judge.known``) are reported as known and do not fail the replay.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional

import torch

from fuzz.execution import artifacts
from cases import CaseTensors, tensors
from fuzz.judge import CaseResult
from fuzz.judge import explain
from fuzz.execution import Supervisor, shared
from fuzz.sut import DEFAULT as DEFAULT_SUT
from fuzz.sut import get as get_sut
from fuzz.sut import address, require, split_address
from fuzz.sut import refusal
from oracles.error_model import ErrorModel, from_env
from tbe import KernelConfig


@dataclasses.dataclass
class ReplayResult:
    result: CaseResult
    source: str        # "saved tensors" or "re-materialized spec"
    case_path: Path
    config_path: Optional[Path]
    config: KernelConfig
    notes: list[str]
    sut: str = "triton"
    known: Optional[tuple] = None  # the known findings (fuzz.judge.known) that explain every failure, if any

    @property
    def ok(self) -> bool:
        """Passes, or fails only with findings triaged for its SUT."""
        return self.result.ok or self.known is not None


def _same(a: CaseTensors, b: CaseTensors) -> bool:
    def eq(x, y):
        return (x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))

    return (eq(a.indices, b.indices) and eq(a.offsets, b.offsets) and eq(a.per_sample_weights, b.per_sample_weights)
            and len(a.grad_outputs) == len(b.grad_outputs)
            and all(eq(x, y) for x, y in zip(a.grad_outputs, b.grad_outputs)))


def resolve(target: Path, config_path: Optional[Path]) -> tuple[Path, Optional[Path], Optional[Path]]:
    """(case.json, config.json or None, tensors.pt or None) for an artifact dir or a case.json."""
    target = Path(target)
    if target.is_dir():
        case_path = target / "case.json"
        if not case_path.is_file():
            raise ValueError(f"replay: {target} is not an artifact directory (no case.json)")
        saved = target / "tensors.pt"
        cfg = config_path or (target / "config.json" if (target / "config.json").is_file() else None)
        return case_path, cfg, saved if saved.is_file() else None
    if not target.is_file():
        raise ValueError(f"replay: {target} does not exist")
    sibling = target.parent / "config.json"
    return target, config_path or (sibling if sibling.is_file() else None), None


def _saved_model(case_path: Path) -> Optional[ErrorModel]:
    """The bound model a campaign recorded in the artifact's meta.json, if any."""
    meta = case_path.parent / "meta.json"
    try:
        kind = json.loads(meta.read_text()).get("bound") if meta.is_file() else None
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    return ErrorModel(kind) if kind in ("worst", "probabilistic") else None


def recorded_sut(case_path: Path) -> str:
    """The SUT an artifact was found on (its meta.json), or the default for older artifacts and bare cases."""
    meta = Path(case_path).parent / "meta.json"
    try:
        return str(json.loads(meta.read_text()).get("sut") or DEFAULT_SUT) if meta.is_file() else DEFAULT_SUT
    except (json.JSONDecodeError, AttributeError, OSError):
        return DEFAULT_SUT


def replay(target: Path, config_path: Optional[Path] = None, rematerialize: bool = False,
           model: Optional[ErrorModel] = None, supervisor: Optional[Supervisor] = None,
           sut: Optional[str] = None, sut_source: Optional[str] = None) -> ReplayResult:
    """Re-run a saved case against ``sut`` (default: the SUT the artifact records, at the source it records);
    ``sut_source`` loads that SUT from another source tree (another version of it); ``model`` defaults
    to the bound the artifact was judged under."""
    case_path, cfg_path, saved_path = resolve(target, config_path)
    model = model or _saved_model(case_path) or from_env()
    sut = sut or recorded_sut(case_path)
    if sut_source is not None:
        sut = address(split_address(sut)[0], sut_source)
    require(sut, kernel_config=cfg_path is not None and config_path is not None)
    try:
        case = artifacts.load_case(case_path)
    except (json.JSONDecodeError, TypeError, KeyError) as e:
        raise ValueError(f"replay: {case_path} is not a valid case ({e})") from e
    config = KernelConfig.load(cfg_path) if cfg_path is not None else KernelConfig()
    notes = []
    saved = None
    if saved_path is not None and not rematerialize:
        try:
            saved = artifacts.load_tensors(saved_path.parent)
        except Exception as e:  # a truncated or foreign file: say which, suggest the spec
            raise ValueError(f"{saved_path} cannot be read ({type(e).__name__}: {e}); "
                             f"--rematerialize replays from case.json instead") from e
        try:
            fresh = tensors(case)
        except ValueError as e:
            fresh = None
            notes.append(f"the spec no longer materializes ({e}); replaying the saved tensors")
        if fresh is not None and not _same(saved, fresh):
            notes.append("the spec now materializes differently from the saved tensors "
                         "(materialization code changed); replaying the saved tensors")
        if fresh is not None and not torch.equal(fresh.initial_weights, saved.initial_weights):
            notes.append("the saved initial weights differ from the spec's seeded weights; "
                         "the check started from the saved ones")
    why = refusal(case, get_sut(sut).capabilities)
    if why is not None:
        raise ValueError(f"SUT {sut!r} cannot run this case: {why}")
    try:
        result = (supervisor or shared()).run(case, config, saved_path.parent if saved is not None else None,
                                              model=model, sut=sut)
    except ValueError as e:
        raise ValueError(f"{case_path}: the spec cannot be materialized ({e})") from e
    if model.kind != "worst":
        notes.append(f"judged under the {model.describe()} bound")
    source = "saved tensors" if saved is not None else "re-materialized spec"
    return ReplayResult(result, source, case_path, cfg_path, config, notes, sut, explain(sut, result))
