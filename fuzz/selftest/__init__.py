"""The self-test: each planted fault switched on in turn, and every detector that applies to it (a
campaign, the race stress, the static sync check, the weak-memory stress, int32 and large-run checks,
out-of-bounds checks) must catch it, or say why it cannot run here."""

from fuzz.lazy import face

__all__, __getattr__, __dir__ = face(__name__, {
    ".run": ("FaultResult", "run_selftest", "all_ok", "counts", "default_jobs"),
    ".detectors": ("CAUGHT", "MISSED", "MASKED", "SKIPPED", "Context", "Detection", "Detector", "detectors_for",
                   "register", "campaign_config"),
    ".report": ("selftest_text", "selftest_json"),
})
