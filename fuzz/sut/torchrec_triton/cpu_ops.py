"""CPU kernels for the two ops TorchRec's Triton TBE calls that have none on the CPU: FBGEMM's
``transpose_embedding_input`` (fbgemm-gpu-cpu registers it for no CPU backend) and torch's ``mm.dtype`` (an
fp16 product with an fp32 result, which the saved-histogram Adagrad uses; CUDA-only in torch).

Each is registered only where no CPU kernel exists, so FBGEMM's or torch's own always wins. ``mm.dtype``
multiplies in fp32 (fp16 products are exact there) and sums in fp32, as the GPU's fp32-accumulating
product does, then casts to ``out_dtype``.

``transpose_embedding_input`` is used in TorchRec's backward (or its forward, with the transpose hoisted). It is built
on this project's transpose (``tbe.transpose.linearize``: the bag and the linear index ``hash_size_cumsum[t] +
id`` of every lookup) and reproduces FBGEMM's CUDA op output for output, for the pooled (bag) form:

* ``infos``: int32 words ``t << info_B_num_bits | b`` (from ``vbe_b_t_map`` under VBE);
* the sort: stable, by the low ``total_hash_size_bits`` bits of the key (a radix sort over those bits;
  all of them compare as signed);
* run-length encoding of the sorted keys: runs, their lengths (int32, zero past the last run), the number
  of runs (int32 [1]) and the complete cumulative sum of the lengths (int32 [N + 1]).

Padding past the last run (FBGEMM leaves it unwritten) is zero here.
"""

from __future__ import annotations

from typing import Optional

import torch

OP = "fbgemm::transpose_embedding_input"
MM_DTYPE = "aten::mm.dtype"
_LIBRARIES: dict[str, torch.library.Library] = {}  # kept alive: dropping one unregisters its kernel


def sort_key(linear: torch.Tensor, bits: int) -> torch.Tensor:
    """The key a radix sort over bits [0, ``bits``) orders by: the low bits, or the signed value when the
    sort spans every bit of the dtype (a radix sort flips the sign bit of signed keys)."""
    width = 8 * linear.element_size()
    if bits >= width:
        return linear.to(torch.int64)
    return linear.to(torch.int64) & ((1 << max(0, bits)) - 1)


def transpose_embedding_input(hash_size_cumsum: torch.Tensor, total_hash_size_bits: int, indices: torch.Tensor,
                              offsets: torch.Tensor, nobag: bool = False, vbe_b_t_map: Optional[torch.Tensor] = None,
                              info_B_num_bits: int = 26, info_B_mask: int = 0, total_unique_indices: int = -1,
                              is_index_select: bool = False, total_L_offsets: Optional[torch.Tensor] = None,
                              fixed_L_per_warp: int = 0, num_warps_per_feature: int = 0):
    """FBGEMM's seven outputs for the pooled form (see the module docstring)."""
    from tbe.transpose import linearize

    if nobag or is_index_select or total_unique_indices != -1:
        raise ValueError(f"{OP} on the CPU (tbe-fuzz's kernel): only the pooled form, got nobag={nobag}, "
                         f"is_index_select={is_index_select}, total_unique_indices={total_unique_indices}")
    T = hash_size_cumsum.numel() - 1
    total_B = offsets.numel() - 1
    n = indices.numel()
    if vbe_b_t_map is None:
        B = total_B // max(T, 1)
        bag_of, linear = linearize(hash_size_cumsum, indices, offsets, max(B, 1), indices.dtype)
        bag = bag_of.to(torch.int64)
        t, b = bag // max(B, 1), bag % max(B, 1)
        infos = (t << info_B_num_bits) | b
    else:
        bag_of, _ = linearize(hash_size_cumsum, indices, offsets, max(total_B, 1), indices.dtype)
        infos = vbe_b_t_map.to(torch.int64)[bag_of.to(torch.int64)] & 0xFFFFFFFF
        t = infos >> info_B_num_bits
        linear = (hash_size_cumsum.to(torch.int64)[t] + indices.to(torch.int64)).to(indices.dtype)
    infos32 = ((infos + 2**31) % 2**32 - 2**31).to(torch.int32)  # the uint32 word, as int32
    perm = torch.sort(sort_key(linear, total_hash_size_bits), stable=True).indices
    linear_sorted = linear[perm]
    infos_sorted = infos32[perm]
    runs, counts = torch.unique_consecutive(linear_sorted, return_counts=True)
    num_runs = runs.numel()
    run = torch.zeros_like(indices)
    run[:num_runs] = runs
    lengths = torch.zeros(n, dtype=torch.int32, device=indices.device)
    lengths[:num_runs] = counts.to(torch.int32)
    cumulative = torch.zeros(n + 1, dtype=torch.int32, device=indices.device)
    cumulative[1:] = torch.cumsum(lengths, 0, dtype=torch.int32)
    return (linear, linear_sorted, infos_sorted, run, lengths,
            torch.tensor([num_runs], dtype=torch.int32, device=indices.device), cumulative)


def mm_dtype(self: torch.Tensor, mat2: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """``torch.mm(self, mat2, out_dtype=...)``: fp32 products and sums, cast to ``out_dtype``."""
    return torch.mm(self.to(torch.float32), mat2.to(torch.float32)).to(out_dtype)


def has_cpu_kernel(op: str = OP) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op, "CPU")


def ensure_registered() -> tuple[str, ...]:
    """Register each CPU kernel where none exists; the ops this process's stand-ins serve (registered by this
    call or an earlier one)."""
    import fbgemm_gpu  # noqa: F401  (defines the transpose op's schema)

    for op, namespace, name, kernel in ((OP, "fbgemm", "transpose_embedding_input", transpose_embedding_input),
                                        (MM_DTYPE, "aten", "mm.dtype", mm_dtype)):
        if op not in _LIBRARIES and not has_cpu_kernel(op):
            _LIBRARIES[op] = torch.library.Library(namespace, "IMPL")
            _LIBRARIES[op].impl(name, kernel, "CPU")
    return tuple(_LIBRARIES)
