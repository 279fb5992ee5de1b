"""Compiling ahead of the search: the kernel launches a case makes (recorded by probe runs), their
specializations, the warm-up that compiles them in parallel before a campaign, the stamp that says a
warm-up is still valid, the compile watch, and sm_90 compiles on any machine for the static checks."""

from fuzz.lazy import face

__all__, __getattr__, __dir__ = face(__name__, {
    ".launches": ("Launch", "Probe", "run_probe", "recording"),
    ".cuda_target": ("SM90", "Compiled", "compile_launches", "triton_version"),
    ".warmup": ("WarmCase", "warm_campaigns", "default_processes"),
    ".watch": ("CompileCounts",),
})
