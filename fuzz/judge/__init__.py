"""Judging one case: run it on a SUT and check every output, weight and state against the oracles under
the derived error bounds (``CaseResult``), the differential checks themselves, the known findings a
failure may match, the FBGEMM sample, and the teeth table of how close errors come to their bounds."""

from fuzz.lazy import face

__all__, __getattr__, __dir__ = face(__name__, {
    ".check": ("CaseResult", "run_case", "case_result", "draw_device"),
    ".coverage": ("Cell", "Coverage", "merge_json", "reachable", "EdgeGroup", "loop_cells"),
    ".loop_use": ("run_observed",),
    ".differential": ("check_case", "failures"),
    ".known": ("KnownFinding", "explain", "for_sut", "TRIAGE"),
    ".teeth": ("Teeth",),
    ".margins": ("ratio_text", "RATIO_NOTE", "Margins"),
    ".fbgemm_sample": ("CHECKED", "RULE"),
})
