"""Systems under test: the protocol every TBE implements (capabilities, parameters, the registry of
entry points), the adapters (this project's Triton TBE, FBGEMM on CPU and CUDA, plain torch, TorchRec's
Triton TBE from a source tree), fitting a drawn case to what a SUT supports, and building the Triton
module a case describes."""

from fuzz.lazy import face

__all__, __getattr__, __dir__ = face(__name__, {
    ".protocol": ("SUT", "Capabilities", "TBEParams", "DEFAULT", "get", "batch_kwargs", "names", "address", "split_address",
                  "require", "params_for", "packed_weights", "packed_momentum", "warnings_count"),
    ".fit": ("fit_case", "fit_strategy", "refusal"),
    ".build": ("build_module", "device_batch"),
})
