"""The driver's closed vocabularies: statuses, failure kinds, stop reasons, decisions.

Each is a ``StrEnum`` whose values are the strings the JSON summaries and reports have always
carried, so a member compares equal to, formats as and serializes as its value.
"""

from __future__ import annotations

import enum


class Status(enum.StrEnum):
    """A check or gate level: passed, failed, could not run (never counted as a pass), or had nothing to check
    (a step whose subject the config lacks: it counts neither way)."""

    PASS = "pass"
    FAIL = "fail"
    NOT_RUN = "not run"
    NOT_APPLICABLE = "not applicable"


class FailureKind(enum.StrEnum):
    """How one case ended (``CaseResult.kind``)."""

    OK = "ok"
    MISMATCH = "mismatch"          # some Report failed
    EXCEPTION = "exception"        # the check raised
    SANITIZER = "sanitizer"        # an out-of-range access the sanitizer stopped
    CUDA_ERROR = "cuda_error"      # the worker's CUDA context is unusable after it
    CRASH = "crash"                # the worker died (a signal or an exit)
    HANG = "hang"                  # the worker did not answer in time


class StopReason(enum.StrEnum):
    """Why a campaign's search ended."""

    FAILURE = "failure"
    TIME = "time"
    EXAMPLES = "examples"
    INTERRUPTED = "interrupted"    # a Ctrl-C (fuzz.execution.interrupt); the smallest failure so far is kept


class OracleVerdict(enum.StrEnum):
    """The gate's oracle level on one case: the second oracle against the FP64 reference."""

    AGREES = "agrees"
    TRIAGED = "agrees (parts triaged)"
    NOT_APPLICABLE = "not applicable"
    DISAGREES = "DISAGREES"


class Decision(enum.StrEnum):
    """The gate's overall decision on a candidate config."""

    ACCEPT = "ACCEPT"
    KEEP = "KEEP"
    UNVERIFIED = "UNVERIFIED"


class DetectionStatus(enum.StrEnum):
    """What one self-test detector did with one planted fault."""

    CAUGHT = "caught"
    MISSED = "missed"
    MASKED = "masked"
    SKIPPED = "skipped"
