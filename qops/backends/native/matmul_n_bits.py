"""MatMulNBits on the compiled kernels (kernels/_matmul_n_bits.pxi).

Nothing here validates (:mod:`qops.ops.matmul_n_bits` has) and nothing loops
over elements: this layer interleaves B by panels of 16 columns (once, for a
compiled operator), turns the scales and zero points into float32 vectors per
panel and block, and widens A to float32 (exact from float16 and bfloat16).
"""

from __future__ import annotations

import numpy as np

from qops.backends.contract import Prepared
from qops.backends.native import variants as _simd
from qops.reference.n_bits import int8_rule_may_apply, scales_of, zero_points_of

__all__ = ["prepare", "supported"]

_COLUMNS = 16


def supported(call):
    """Every validated call: an empty B is zeros plus the bias here too."""
    return True


def _per_panel(values, n, k_blocks):
    """(N, k_blocks) float32 values as (panels, k_blocks * 16): each panel's
    16 columns per block, columns past N zero."""
    panels = -(-n // _COLUMNS)
    padded = np.zeros((panels * _COLUMNS, k_blocks), np.float32)
    padded[:n] = values
    return np.ascontiguousarray(
        padded.reshape(panels, _COLUMNS, k_blocks).transpose(0, 2, 1)).reshape(panels, -1)


#: The least magnitude of a nonzero scale whose sixteenth is exact in float32
#: (a sixteenth below 2**-126 would be subnormal, and may round).
_SIXTEENTH_EXACT = np.float32(2.0 ** -122)


def whole_zeros_hold(zeros, scales, bits):
    """Whether 4-bit weights' zero points are all whole numbers from 0 to 15
    and every finite nonzero scale at least 2**-122 in magnitude, so that
    ``scale / 16`` is exact: the streaming row kernels' shorter form of the rule
    (``qops_nbits_row_panels_4bit_whole``) then gives the same values."""
    if bits != 4:
        return False
    magnitudes = np.abs(scales)
    return bool(np.all((zeros >= 0) & (zeros <= 15) & (zeros == np.floor(zeros)))
                and np.all((magnitudes >= _SIXTEENTH_EXACT) | (magnitudes == 0)
                           | ~np.isfinite(magnitudes)))


def prepare(call, variant=None):
    """``run(call, out, n_threads)`` for MatMulNBits calls of this signature.

    A compiled operator's B, scales and zero points are bound together: its
    B as the rule's kernels read it and its per-panel parameters are made on
    its first call and kept (``call.packed``); a plain call makes them each
    time."""
    attributes = call.attributes
    k, n, bits, block_size = (attributes[name] for name in ("k", "n", "bits", "block_size"))
    k_blocks = -(-k // block_size)
    empty = attributes["empty"]
    kernels = _simd.quantize_module(variant)
    level = attributes["accuracy_level"]

    def parameters(arrays):
        zeros = _per_panel(zero_points_of(arrays["zero_points"], n, k_blocks, bits), n,
                           k_blocks)
        scales = _per_panel(scales_of(arrays["scales"], n, k_blocks), n, k_blocks)
        # The level-4 rule's zero points are integers of at most 8 bits (float
        # ones take the float rule): a byte each, a quarter of int32's stream.
        return zeros, scales, zeros.astype(np.uint8), whole_zeros_hold(zeros, scales, bits)

    def kept(call, key, make):
        """``make()``, kept under ``key`` for a compiled B (``call.packed``)."""
        if call.packed is None:
            return make()
        return call.packed.get((key, variant), make)

    def interleaved(call, n_threads):
        return kernels.matmul_n_bits_interleave(np.ascontiguousarray(call.arrays["b"]),
                                                n_threads)

    def float_weights(call, n_threads):
        """B interleaved, as the float rule's kernels read it."""
        return kept(call, "B by panels", lambda: interleaved(call, n_threads))

    def level_four_weights(call, n_threads):
        """B as the level-4 kernels read it: 4-bit codes in their own layout
        where the kernels have one (the interleaved copy it is made from then
        not kept: a compiled B that only meets the level-4 rule is held
        once), else interleaved."""
        if bits != 4 or not kernels.LEVEL_FOUR_QUADS:
            return float_weights(call, n_threads)
        return kept(call, "level-4 codes as quads", lambda: kernels.matmul_n_bits_quads(
            interleaved(call, n_threads), n_threads))

    def run(call, out, n_threads):
        arrays = call.arrays
        bias = arrays["bias"]
        bias32 = None if bias is None else np.ascontiguousarray(bias, np.float32).reshape(n)
        result = out.reshape(-1, n)
        target = result if result.dtype == np.float32 else np.empty(result.shape, np.float32)
        if empty:
            target[...] = 0 if bias32 is None else bias32
        else:
            rows = np.ascontiguousarray(np.asarray(arrays["a"]).reshape(-1, k), np.float32)
            zeros, scales, integer_zeros, whole_zeros = kept(call, "parameters by panels",
                                                             lambda: parameters(arrays))
            # The level-4 rule's A, None where a value is not finite (the
            # float rule then, as qops.reference.n_bits.takes_int8_rule says).
            quantized = (kernels.matmul_n_bits_quantize_rows(rows, block_size, n_threads)
                         if int8_rule_may_apply(arrays["zero_points"], block_size, level)
                         else None)
            if quantized is not None:
                codes, a_scales, a_sums = quantized
                kernels.matmul_n_bits_int8(codes, a_scales, a_sums,
                                           level_four_weights(call, n_threads),
                                           integer_zeros, scales, bias32, n, bits,
                                           block_size, target, n_threads)
            else:
                kernels.matmul_n_bits(rows, float_weights(call, n_threads), zeros, scales,
                                      bias32, n, bits, block_size, target, n_threads,
                                      whole_zeros)
        if target is not result:
            result[...] = target  # one rounding, from float32 to A's type
        return out

    return Prepared(run)
