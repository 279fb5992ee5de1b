"""Two places where Triton's interpreter (3.9.0) does not do what a compiled kernel does, made to for TorchRec's.

* A splat takes the type of its operand's handle instead of its result type: a scalar comparison
  (``program_id < N``) keeps its operand's int32 handle type, so ``(row < N) & (cols < D)`` becomes an int32
  array, which ``tl.load`` refuses as a mask ("mask has unsupported dtype"; TorchRec's saved-histogram
  Adagrad writes exactly that). The patched splat builds its result type.
* fp32 to bf16 casts truncate (its "rtne" mode rounds ties up and can lose the carry into the exponent),
  while an NVIDIA build converts with ``cvt.rn.bf16.f32``. This project's kernels cast through
  ``tbe.rounding.to_storage`` and never meet the difference; TorchRec's store fp32 values into bf16 tensors
  directly, so on the CPU every bf16 weight update and bf16 output would differ from what the GPU writes,
  by up to one unit in the last place: a false alarm. The patch rounds on the bits (the same integer
  rounding as ``to_storage``), NaN kept a quiet NaN.

Every other operation is the interpreter's own. Installed only in processes that run TorchRec's TBE.
"""

from __future__ import annotations

import numpy as np

_INSTALLED = False


def round_to_nearest_even(data: np.ndarray) -> np.ndarray:
    """fp32 values (any shape) as bf16 bit patterns (uint16), rounded to nearest even."""
    bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32)
    rounded = ((bits.astype(np.uint64) + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(data), np.uint16(0x7FC0) | ((bits >> 16) & 0x8000).astype(np.uint16), rounded)


def install() -> bool:
    """Patch the interpreter's builder (idempotent); False where this Triton's interpreter has another shape."""
    global _INSTALLED
    if _INSTALLED:
        return True
    import triton.language as tl
    from triton.runtime import interpreter as itp

    builder = getattr(itp, "InterpreterBuilder", None)
    handle = getattr(itp, "TensorHandle", None)
    np_dtype = getattr(itp, "_get_np_dtype", None)
    if builder is None or handle is None or np_dtype is None or not all(
            hasattr(builder, f) for f in ("cast_impl", "create_fp_to_fp", "create_splat")):
        return False
    cast_impl, fp_to_fp = builder.cast_impl, builder.create_fp_to_fp

    def patched_splat(self, ret_ty, arg):
        value = arg.data[0] if isinstance(arg.dtype, tl.block_type) or getattr(arg.data, "ndim", 0) else arg.data
        return handle(np.full(ret_ty.shape, value, dtype=np_dtype(ret_ty.scalar)), ret_ty.scalar)

    def to_bf16(src, dst_type):
        return src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16

    def patched_cast(self, src, dst_type):
        if to_bf16(src, dst_type):
            return handle(round_to_nearest_even(src.data), dst_type.scalar)
        return cast_impl(self, src, dst_type)

    def patched_fp_to_fp(self, src, dst_type, rounding_mode):
        if to_bf16(src, dst_type) and rounding_mode != getattr(itp._ir.ROUNDING_MODE, "RTZ", object()):
            return handle(round_to_nearest_even(src.data), dst_type.scalar)
        return fp_to_fp(self, src, dst_type, rounding_mode)

    builder.cast_impl, builder.create_fp_to_fp, builder.create_splat = patched_cast, patched_fp_to_fp, patched_splat
    _INSTALLED = True
    return True
