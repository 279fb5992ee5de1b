"""TorchRec's Triton TBE as a system under test: find and import it (``loader``), the CPU ops it needs
there (``cpu_ops``), the instance that drives it (``adapter``) and its ``SUT`` record (``sut``)."""

from fuzz.lazy import face

__all__, __getattr__, __dir__ = face(__name__, {
    ".sut": ("factory", "CAPABILITIES_CPU", "CAPABILITIES_CUDA", "device", "install_cpu_stand_ins"),
    ".loader": ("load", "Loaded"),
    ".cpu_ops": ("ensure_registered",),
})
