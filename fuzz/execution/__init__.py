"""Running cases where a crash cannot take the driver down: the supervisor and its worker processes,
several workers over GPUs, a failing case's artifact directory (save, load, replay command), the verdict
of a case inside a test, and failures forced on purpose to test all of that."""

from fuzz.lazy import face

__all__, __getattr__, __dir__ = face(__name__, {
    ".supervisor": ("Supervisor", "shared", "leftover_pending", "CaseInterrupted", "CaseTimedOut"),
    ".envelope": ("timeout_for", "limits", "expected_seconds", "stall_for"),
    ".artifacts": ("save_result", "save_failure", "load_case", "load_tensors", "replay_command"),
    ".workers": ("run_workers", "default_workers", "merged_text"),
    ".verdict": ("assert_passes",),
    ".gpu_pin": ("pin_xdist_worker", "core_share"),
    ".worker_process": ("start_early", "end_early"),
    ".stats": ("CampaignStats", "InputForm"),
})
