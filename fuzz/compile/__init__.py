"""Compiling ahead of the search: the kernel launches a case makes (recorded by probe runs), their
specializations, the warm-up that compiles them in parallel before a campaign, the stamp that says a
warm-up is still valid, its dry run (specializations counted, nothing compiled), the compile watch, the
kernel cache managers (one build per kernel per machine, Redis for fleets), and sm_90 compiles on any
machine for the static checks."""

from fuzz.lazy import face

__all__, __getattr__, __dir__ = face(__name__, {
    ".launches": ("Launch", "Probe", "run_probe", "recording", "launch_hook", "bound_arguments"),
    ".cuda_target": ("SM90", "Compiled", "compile_launches", "triton_version"),
    ".warmup": ("WarmCase", "warm_campaigns", "default_processes", "campaign_units", "unit_groups", "run_group"),
    ".dry_run": ("count_specializations", "DryRunResult", "keys_by_kernel", "reach_cases"),
    ".watch": ("CompileCounts",),
})
