"""Round-to-nearest-even stores, identical on the GPU and in the interpreter.

Triton's interpreter converts fp32 to bf16 by truncation (triton 3.9.0, with or without
``fp_downcast_rounding="rtne"``) while compiled kernels round to nearest even. Kernels
cast through ``to_storage`` so both backends store the same bits.
"""

import triton
import triton.language as tl


@triton.jit
def to_storage(x, dtype: tl.constexpr):
    """Cast fp32 ``x`` to ``dtype`` rounding to nearest even (bf16 by integer rounding on the bits)."""
    if dtype == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bias = 0x7FFF + ((bits >> 16) & 1)
        rounded = ((bits + bias) >> 16).to(tl.uint16)
        rounded = tl.where(x != x, 0x7FC0, rounded).to(tl.uint16)  # keep NaN a NaN
        return rounded.to(tl.bfloat16, bitcast=True)
    else:
        return x.to(dtype)
