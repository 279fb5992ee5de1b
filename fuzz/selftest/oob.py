"""Self-test detectors for faults that read or write out of range (outside a table or a buffer).

Both run a campaign on bad-id batches only (``strategies.space.bad_id_cases``: ids at -1, E, E + 1, the
dtype's limits), where such a fault shows; every case runs supervised, so a crash, a CUDA error or a
silent wrong row is a caught failure. ``bad-id campaign`` runs on either backend. ``sanitizer`` runs
the workers with the interpreter sanitizer (``fuzz.memcheck.sanitizer``) and catches a fault only when the
sanitizer itself names the access (a mismatch does not count there); on compiled kernels it is skipped.
"""

from __future__ import annotations

from typing import Optional

from fuzz.campaign import CampaignOptions, CampaignRunner
from fuzz.selftest.detectors import CAUGHT, MISSED, Context, Detection, Detector, campaign_detection, register
from strategies.space import bad_id_cases
from fuzz.execution import Supervisor
from fuzz.status import FailureKind
from tbe import KernelConfig
from tbe.backend import INTERPRETED

OUT_OF_RANGE_FAULTS = ("bounds_check_off_by_one",)


def _campaign(fault: str, ctx: Context, name: str, sanitize: bool) -> Detection:
    sup = Supervisor(sanitize=sanitize)
    try:
        res = CampaignRunner(KernelConfig(faults=(fault,)), ctx.budget, ctx.seed, CampaignOptions(
            artifacts_dir=ctx.artifacts_dir, strategy=bad_id_cases(), use_database=False, supervisor=sup,
            meta={"source": "selftest", "fault": fault, "detector": name}, shrink=ctx.shrink)).run()
    finally:
        sup.close()
    det = campaign_detection(name, res)
    if det.status == CAUGHT:
        det.detail = f"{res.failure.kind}: " + (res.failure.error or res.failure.text()).splitlines()[0]
        if sanitize and res.failure.kind != FailureKind.SANITIZER:
            return Detection(name, MISSED, f"the campaign failed by a {res.failure.kind}; the sanitizer named no "
                                           f"access", res.seconds, res.examples, campaign=res)
    return det


def _sanitizer_skip(fault: str) -> Optional[str]:
    return None if INTERPRETED else "the sanitizer checks the Triton interpreter's accesses; kernels here are compiled"


for _fault in OUT_OF_RANGE_FAULTS:
    register(_fault, Detector("bad-id campaign", lambda f, c: _campaign(f, c, "bad-id campaign", False)))
    register(_fault, Detector("sanitizer", lambda f, c: _campaign(f, c, "sanitizer", True), _sanitizer_skip))
