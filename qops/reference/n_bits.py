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

At accuracy level 4 (the least accuracy a runtime may take: A in int8), with
integer zero points (packed uint8 or absent), blocks of at most 4096 and a
finite A, A is quantized instead (:func:`quantize_a_blocks`):

1. Each row of A, per block of K: ``amax = max |a|``; ``a_scale =
   float32(amax / 127)``; ``code = round_half_even(float32(a *
   float32(127 / amax)))`` clamped to [-127, 127] (all 0 where amax is 0;
   where amax is below 127 / FLT_MAX its inverse is infinite, and a zero
   ``a`` gives code 0, not the NaN of 0 * inf).
2. Each block's sum is exact: ``s = sum(code * q) - zp * sum(code)``.
3. ``acc = fma(float32(s), float32(a_scale * scale), acc)`` over the blocks
   in order from 0; then the bias and the rounding to A's type as above.

Other level-4 calls (float zero points, longer blocks, NaN or infinity in A)
take the float32 rule.  The fused multiply-add is stated exactly
(:func:`fused_multiply_add`), so that any kernel that keeps these orders
matches them bit for bit.
"""

from __future__ import annotations

import numpy as np

#: The longest block the level-4 rule takes: its sums fit int32 (127 * 255 * 4096).
INT8_BLOCK_LIMIT = 4096


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


def scales_of(scales, n, k_blocks):
    """The scales as float32 (N, k_blocks)."""
    return np.asarray(scales).astype(np.float32).reshape(n, k_blocks)


def zero_points_of(zero_points, n, k_blocks, bits):
    """The zero points as float32 (N, k_blocks): absent, 2**(bits - 1);
    packed uint8 (N, ceil(k_blocks * bits / 8)) unpacked; float ones as they
    are (each exact in float32)."""
    if zero_points is None:
        return np.full((n, k_blocks), 2 ** (bits - 1), np.float32)
    zero_points = np.asarray(zero_points)
    if zero_points.dtype == np.uint8:
        return unpack_bits(zero_points.reshape(n, -1), bits, k_blocks).astype(np.float32)
    return zero_points.astype(np.float32).reshape(n, k_blocks)


def dequantized_weights(b, scales, zero_points, *, k, n, bits, block_size):
    """The float32 weight matrix, K x N, each value ``(q - zp) * scale`` in float32.

    ``b`` is (N, k_blocks, blob_size) uint8; ``scales`` N * k_blocks values
    (any shape, row-major); ``zero_points`` None (2**(bits - 1)), packed
    uint8 (N, ceil(k_blocks * bits / 8)) or float (N * k_blocks values).
    """
    k_blocks = -(-k // block_size)
    q = unpack_bits(np.asarray(b).reshape(n, k_blocks, -1), bits, block_size)
    q = q.reshape(n, k_blocks * block_size)[:, :k].astype(np.float32)
    scale = scales_of(scales, n, k_blocks)
    zero = zero_points_of(zero_points, n, k_blocks, bits)
    block_of = np.arange(k) // block_size
    weights = (q - zero[:, block_of]) * scale[:, block_of]
    return np.ascontiguousarray(weights.T, dtype=np.float32)


def int8_rule_may_apply(zero_points, block_size, accuracy_level):
    """Whether a call's attributes and zero points take the level-4 rule
    (see above), which its A then takes where every value is finite."""
    return (accuracy_level == 4 and block_size <= INT8_BLOCK_LIMIT
            and (zero_points is None or np.asarray(zero_points).dtype == np.uint8))


def takes_int8_rule(rows, zero_points, block_size, accuracy_level):
    """Whether a call is computed by the level-4 rule (see above)."""
    return (int8_rule_may_apply(zero_points, block_size, accuracy_level)
            and bool(np.isfinite(rows).all()))


def quantize_a_blocks(rows, block_size):
    """Rows of A (M x K float32) in int8 per block of K, by the level-4 rule:
    ``(codes, scales, sums)``: codes (M, k_blocks * block_size) int8, zero
    past K; each block's scale (M, k_blocks) float32 and sum of codes (M,
    k_blocks) int32."""
    m, k = rows.shape
    k_blocks = -(-k // block_size)
    padded = np.zeros((m, k_blocks * block_size), np.float32)
    padded[:, :k] = rows
    blocks = padded.reshape(m, k_blocks, block_size)
    amax = np.abs(blocks).max(axis=2)
    nonzero = amax > 0
    safe = np.where(nonzero, amax, np.float32(1))
    inverse = np.where(nonzero, np.float32(127) / safe, np.float32(0)).astype(np.float32)
    scales = np.where(nonzero, safe / np.float32(127), np.float32(0)).astype(np.float32)
    with np.errstate(invalid="ignore"):  # 0 * inf: the zero's code is 0 (see above)
        products = (blocks * inverse[..., None]).astype(np.float32)
    codes = np.clip(np.nan_to_num(np.rint(products), nan=0.0), -127, 127).astype(np.int8)
    return (codes.reshape(m, -1), scales,
            codes.astype(np.int32).sum(axis=2, dtype=np.int32))


def _int8_rule(rows, b, scales, zero_points, *, k, n, bits, block_size):
    """The level-4 sums (M x N float32, before the bias)."""
    k_blocks = -(-k // block_size)
    codes, a_scales, a_sums = quantize_a_blocks(rows, block_size)
    q = unpack_bits(np.asarray(b).reshape(n, k_blocks, -1), bits, block_size).astype(np.int64)
    # Integers here (the rule takes packed or default zero points only).
    zero = zero_points_of(zero_points, n, k_blocks, bits).astype(np.int64)
    blocks = codes.reshape(-1, k_blocks, block_size).astype(np.int64)
    exact = (np.einsum("mjt,njt->mjn", blocks, q)
             - zero.T[None, :, :] * a_sums.astype(np.int64)[:, :, None])
    block_scales = scales_of(scales, n, k_blocks)
    total = np.zeros((rows.shape[0], n), np.float32)
    for j in range(k_blocks):
        scale = (a_scales[:, j:j + 1] * block_scales[:, j][None, :]).astype(np.float32)
        total = fused_multiply_add(exact[:, j, :].astype(np.float32), scale, total)
    return total


def matmul_n_bits(a, b, scales, zero_points=None, g_idx=None, bias=None, *, k, n, bits=4,
                  block_size, accuracy_level=0):
    """``a @ dequantized(b) + bias`` by the rules above, in A's type, with
    :func:`qops.matmul_n_bits`' arguments.

    ``a`` is (..., K) float32, float16 or bfloat16; the result (..., N) has
    its type.  An empty ``b`` (a projection left out) gives zeros plus the
    bias.  ``g_idx``, the block of each k, may only be the blocks' own order
    (``k // block_size``), the one the rules state (ValueError otherwise).
    """
    if (g_idx is not None and np.asarray(b).size
            and not np.array_equal(np.asarray(g_idx), np.arange(k) // block_size)):
        raise ValueError("matmul_n_bits: g_idx is not the blocks' own order, k // block_size "
                         "(K values)")
    a = np.asarray(a)
    out_dtype = a.dtype
    lead = a.shape[:-1]
    rows = a.reshape(-1, k).astype(np.float32)
    total = np.zeros((rows.shape[0], n), np.float32)
    if np.asarray(b).size and takes_int8_rule(rows, zero_points, block_size, accuracy_level):
        total = _int8_rule(rows, b, scales, zero_points, k=k, n=n, bits=bits,
                           block_size=block_size)
    elif np.asarray(b).size:
        weights = dequantized_weights(b, scales, zero_points, k=k, n=n, bits=bits,
                                      block_size=block_size)
        for index in range(k):
            total = fused_multiply_add(rows[:, index:index + 1], weights[index], total)
    if bias is not None:
        total = (total + np.asarray(bias).astype(np.float32).reshape(n)).astype(np.float32)
    return total.astype(out_dtype).reshape(*lead, n)
