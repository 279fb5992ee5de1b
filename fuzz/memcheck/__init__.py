"""Memory and synchronisation checks of the kernels: the interpreter sanitizer (every access in bounds),
the weak-memory interpreter mode, PTX parsing and the static sync check of the fused long tier's sm_90
code, and the race stress that runs the fused tier on a GPU."""

from fuzz.lazy import face

__all__, __getattr__, __dir__ = face(__name__, {
    ".sync_check": ("check_config", "check_launches", "reachable_launches"),
    ".race_stress": ("VARIANTS", "Variant", "barrier_gap", "catch", "run_stress"),
    ".sanitizer": ("SANITIZE",),
})
