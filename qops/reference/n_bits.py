"""MatMulNBits (onnxruntime's ``com.microsoft`` contrib operator), stated in NumPy.

The rule, for accuracy levels 0 to 3:

1. Each weight is dequantized as DEQUANTIZE does it, in float32:
   ``w[k, n] = (q[k, n] - zero_point[n, k // block_size]) * scale[n, k // block_size]``,
   the difference exact (or, for a float zero point, rounded to float32) and
   the product rounded to float32.
2. Each output is one float32 sum, ``s = fma(a[m, k], w[k, n], s)`` for k
   ascending from ``s = 0``: one rounding per step, whatever the CPU's width
   or the thread count.
3. The bias is added (one float32 rounding), then the float32 result is
   rounded once to A's type (float16, bfloat16).

The fused multiply-add is stated exactly (:func:`fused_multiply_add`), so
that any kernel that keeps this order matches it bit for bit.
"""

from __future__ import annotations

import numpy as np


def unpack_bits(packed, bits, count):
    """The first ``count`` unsigned values of each row of ``packed`` (uint8,
    last axis the bytes), ``bits`` (2, 4 or 8) each, low bits first."""
    packed = np.asarray(packed, np.uint8)
    per_byte = 8 // bits
    shifts = (np.arange(per_byte, dtype=np.uint8) * bits).astype(np.uint8)
    mask = np.uint8((1 << bits) - 1)
    values = (packed[..., :, None] >> shifts) & mask
    return values.reshape(*packed.shape[:-1], packed.shape[-1] * per_byte)[..., :count]


def fused_multiply_add(a, b, c):
    """``a * b + c`` rounded once to float32 (C's ``fmaf``), elementwise.

    The product of two float32 values is exact in float64, and TwoSum gives
    the float64 sum ``s`` and its exact error ``e``.  Rounding ``s`` to float32
    gives the correctly rounded ``s + e`` unless ``s`` lies exactly halfway
    between two float32 values and ``e`` is not zero; then ``e``'s sign picks
    the neighbour.  Finite values only.
    """
    a, b, c = (np.asarray(x, np.float32) for x in (a, b, c))
    product = a.astype(np.float64) * b.astype(np.float64)
    addend = c.astype(np.float64)
    total = product + addend
    # TwoSum: total + error == product + addend exactly.
    virtual = total - product
    error = (product - (total - virtual)) + (addend - virtual)
    rounded = total.astype(np.float32)
    back = rounded.astype(np.float64)
    toward = np.nextafter(rounded, np.where(total > back, np.float32(np.inf),
                                            np.float32(-np.inf)).astype(np.float32))
    halfway = (total != back) & (total == (back + toward.astype(np.float64)) / 2)
    # At a tie, the error breaks it: toward the neighbour when it points there.
    past = halfway & (error != 0) & ((error > 0) == (toward.astype(np.float64) > back))
    return np.where(past, toward, rounded).astype(np.float32)


def dequantized_weights(b, scales, zero_points, *, k, n, bits, block_size):
    """The float32 weight matrix, K x N, each value ``(q - zp) * scale`` in float32.

    ``b`` is (N, k_blocks, blob_size) uint8; ``scales`` N * k_blocks values
    (any shape, row-major); ``zero_points`` None (2**(bits - 1)), packed
    uint8 (N, ceil(k_blocks * bits / 8)) or float (N * k_blocks values).
    """
    k_blocks = -(-k // block_size)
    q = unpack_bits(np.asarray(b).reshape(n, k_blocks, -1), bits, block_size)
    q = q.reshape(n, k_blocks * block_size)[:, :k].astype(np.float32)
    scale = np.asarray(scales).astype(np.float32).reshape(n, k_blocks)
    if zero_points is None:
        zero = np.full((n, k_blocks), 2 ** (bits - 1), np.float32)
    elif np.asarray(zero_points).dtype == np.uint8:
        zero = unpack_bits(np.asarray(zero_points).reshape(n, -1), bits, k_blocks)
        zero = zero.astype(np.float32)
    else:
        zero = np.asarray(zero_points).astype(np.float32).reshape(n, k_blocks)
    block_of = np.arange(k) // block_size
    weights = (q - zero[:, block_of]) * scale[:, block_of]
    return np.ascontiguousarray(weights.T, dtype=np.float32)


def matmul_n_bits(a, b, scales, zero_points=None, bias=None, *, k, n, bits, block_size):
    """``a @ dequantized(b) + bias`` by the rule above, in A's type.

    ``a`` is (..., K) float32, float16 or bfloat16; the result (..., N) has
    its type.  An empty ``b`` (a projection left out) gives zeros plus the
    bias.
    """
    a = np.asarray(a)
    out_dtype = a.dtype
    lead = a.shape[:-1]
    rows = a.reshape(-1, k).astype(np.float32)
    total = np.zeros((rows.shape[0], n), np.float32)
    if np.asarray(b).size:
        weights = dequantized_weights(b, scales, zero_points, k=k, n=n, bits=bits,
                                      block_size=block_size)
        for index in range(k):
            total = fused_multiply_add(rows[:, index:index + 1], weights[index], total)
    if bias is not None:
        total = (total + np.asarray(bias).astype(np.float32).reshape(n)).astype(np.float32)
    return total.astype(out_dtype).reshape(*lead, n)
