"""Mutation testing of the kernels: operators that change one site of a kernel's source, the kernel
graph that says which tests reach it, the runner that checks each mutant in a fresh process, and the
score report."""

from fuzz.lazy import face

__all__, __getattr__, __dir__ = face(__name__, {
    ".runner": ("Check", "Runner", "check_sources_hash", "probe_hash", "sources_hash"),
})
