"""MatMulNBits: its stated rule, its kernels on every variant and thread
count, its validation, and onnxruntime as a peer.

The oracles are independent of the code under test: C's fmaf (through
ctypes) for the reference's fused multiply-add, a float64 product of A and
weights unpacked here bit by bit for the rule's error bound, and the rule
itself for the kernels (bit for bit)."""

import ctypes
import ctypes.util

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qops
from qops.backends import dispatch
from qops.backends.native import matmul_n_bits as native
from qops.backends.native import variants
from qops.ops import matmul_n_bits as front
from qops.reference.n_bits import fused_multiply_add

FLOATS = (np.float32, np.float16, ml_dtypes.bfloat16)


def codes_of(b, bits, k):
    """The K x N codes of packed B, unpacked here value by value."""
    n, k_blocks, blob = b.shape
    per_byte = 8 // bits
    codes = np.zeros((n, k_blocks * blob * per_byte), np.int64)
    for index in range(codes.shape[1]):
        byte = b.reshape(n, -1)[:, index // per_byte].astype(np.int64)
        codes[:, index] = (byte >> (bits * (index % per_byte))) & ((1 << bits) - 1)
    return codes[:, :k].T


def zero_points_of(zero_points, bits, n, k_blocks):
    if zero_points is None:
        return np.full((n, k_blocks), 2 ** (bits - 1), np.float64)
    if zero_points.dtype == np.uint8:
        return codes_of(zero_points.reshape(n, 1, -1), bits, k_blocks).T.astype(np.float64)
    return zero_points.astype(np.float64).reshape(n, k_blocks)


def case(rng, m, k, n, bits, block_size, zero_kind, with_bias, dtype=np.float32):
    k_blocks = -(-k // block_size)
    b = rng.integers(0, 256, (n, k_blocks, block_size * bits // 8), dtype=np.uint8)
    scales = (rng.random((n, k_blocks)) * 0.2 - 0.1).astype(dtype)
    zero_points = None
    if zero_kind == "packed":
        zero_points = rng.integers(0, 256, (n, -(-k_blocks * bits // 8)), dtype=np.uint8)
    elif zero_kind == "float":
        zero_points = (rng.random((n, k_blocks)) * 2 ** bits).astype(dtype)
    bias = rng.standard_normal(n).astype(dtype) if with_bias else None
    a = rng.standard_normal((m, k)).astype(dtype)
    return a, b, scales, zero_points, bias


def call_of(a, b, scales, zero_points, bias, **attributes):
    slots = dict(a=a, b=b, scales=scales, zero_points=zero_points, g_idx=None, bias=bias)
    return front.prepare(slots, dict(dict(accuracy_level=0, weight_prepacked=0), **attributes))


# -- the rule's parts ---------------------------------------------------------------------


def test_fused_multiply_add_is_fmaf():
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libm.fmaf.restype = ctypes.c_float
    libm.fmaf.argtypes = [ctypes.c_float] * 3
    rng = np.random.default_rng(7)
    a = rng.standard_normal(3000).astype(np.float32)
    b = rng.standard_normal(3000).astype(np.float32)
    c = (rng.standard_normal(3000) * 10.0 ** rng.integers(-9, 9, 3000)).astype(np.float32)
    # Addends that cancel the product: the ties and near-ties of the rounding.
    c[::2] = -(a[::2].astype(np.float64) * b[::2]).astype(np.float32)
    c[1::4] = np.nextafter(c[::2][:c[1::4].size], np.float32(np.inf))
    want = np.array([libm.fmaf(*values) for values in zip(a.tolist(), b.tolist(), c.tolist())],
                    np.float32)
    got = fused_multiply_add(a, b, c)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_a_tie_goes_where_the_exact_sum_lies():
    # (1 + 2**-12)**2 = 1 + 2**-11 + 2**-24: halfway between two float32
    # values; the addend's sign decides.
    a = np.float32(1 + 2 ** -12)
    up = fused_multiply_add(a, a, np.float32(2 ** -40))
    down = fused_multiply_add(a, a, np.float32(-(2 ** -40)))
    assert up == np.float32(1 + 2 ** -11 + 2 ** -23)
    assert down == np.float32(1 + 2 ** -11)


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("zero_kind", ["none", "packed", "float"])
def test_the_rule_is_within_its_bound_of_the_exact_product(bits, zero_kind):
    """The rule against a float64 product of A and weights dequantized here:
    within K * 2**-24 of the products' magnitudes (each weight's own rounding
    included, a relative 2**-24 of its product)."""
    rng = np.random.default_rng(bits)
    k, n, block_size = 200, 24, 32
    a, b, scales, zero_points, bias = case(rng, 5, k, n, bits, block_size, zero_kind, True)
    k_blocks = -(-k // block_size)
    block_of = np.arange(k) // block_size
    weights = ((codes_of(b, bits, k) - zero_points_of(zero_points, bits, n, k_blocks).T[block_of])
               * scales.astype(np.float64).T[block_of])
    exact = a.astype(np.float64) @ weights + bias
    magnitude = np.abs(a.astype(np.float64)) @ np.abs(weights) + np.abs(bias)
    got = qops.reference.matmul_n_bits(a, b, scales, zero_points, bias=bias, k=k, n=n, bits=bits,
                                       block_size=block_size)
    assert np.all(np.abs(got - exact) <= (k + 2) * 2.0 ** -24 * magnitude)


def test_the_rule_is_a_chain_of_fmas_in_order():
    """One output, stated step by step here with fmaf's emulation."""
    rng = np.random.default_rng(3)
    a, b, scales, zero_points, bias = case(rng, 1, 48, 1, 4, 16, "packed", True)
    weights = ((codes_of(b, 4, 48)[:, 0].astype(np.float32)
                - zero_points_of(zero_points, 4, 1, 3)[0, np.arange(48) // 16].astype(np.float32))
               * scales[0, np.arange(48) // 16]).astype(np.float32)
    acc = np.float32(0)
    for index in range(48):
        acc = fused_multiply_add(a[0, index], weights[index], acc)
    want = np.float32(acc + bias[0])
    got = qops.reference.matmul_n_bits(a, b, scales, zero_points, bias=bias, k=48, n=1, bits=4,
                                       block_size=16)
    assert got[0, 0].view(np.uint32) == want.view(np.uint32)


def test_level_four_quantizes_a_block_as_stated():
    """A block's codes and scale, worked by hand: amax 2.54, so the scale is
    float32(2.54 / 127) and each code round_half_even(float32(a * float32(127 / 2.54)))."""
    from qops.reference.n_bits import quantize_a_blocks

    row = np.zeros((1, 16), np.float32)
    row[0, :4] = [2.54, -1.27, 0.01, -0.03]
    codes, scales, sums = quantize_a_blocks(row, 16)
    inverse = np.float32(127) / np.float32(2.54)
    assert scales[0, 0] == np.float32(2.54) / np.float32(127)
    assert codes[0, :4].tolist() == [int(np.rint(np.float32(v) * inverse))
                                     for v in (2.54, -1.27, 0.01, -0.03)] == [127, -64, 0, -2]
    assert sums[0, 0] == 127 - 64 - 2 and not codes[0, 4:].any()
    empty_codes, empty_scales, _ = quantize_a_blocks(np.zeros((1, 16), np.float32), 16)
    assert not empty_codes.any() and empty_scales[0, 0] == 0


@pytest.mark.parametrize("variant", variants.quantize_variants())
@settings(deadline=None)
@given(m=st.integers(1, 40), k=st.integers(1, 600), block_log=st.integers(4, 8),
       spread=st.sampled_from([1e-40, 1e-3, 1.0, 1e30]), seed=st.integers(0, 2 ** 32 - 1))
def test_the_kernels_quantize_a_as_the_rule_states(variant, m, k, block_log, spread, seed):
    """Level 4's A on the kernels (each variant, every thread count) is
    quantize_a_blocks' codes, scales and sums bit for bit: blocks of zeros,
    subnormal and huge spreads, ties of the rounding, K past a block's end."""
    from qops.reference.n_bits import quantize_a_blocks

    rng = np.random.default_rng(seed)
    block_size = 2 ** block_log
    rows = (rng.normal(0, 1, (m, k)) * spread).astype(np.float32)
    rows[:, : min(k, 16)] = 0 if seed % 3 == 0 else rows[:, : min(k, 16)]
    if seed % 3 == 1:
        # 127 / amax = 1 with amax 127: every half integer is a tie
        rows[:, :min(k, block_size)] = rng.integers(-254, 255, (m, min(k, block_size))) / 2
        rows[:, 0] = 127
    kernels = variants.quantize_module(variant)
    want = quantize_a_blocks(rows, block_size)
    for n_threads in (1, 2, 3):
        got = kernels.matmul_n_bits_quantize_rows(rows, block_size, n_threads)
        for name, mine, theirs in zip(("codes", "scales", "sums"), got, want):
            assert mine.dtype == theirs.dtype and mine.shape == theirs.shape, name
            np.testing.assert_array_equal(mine.view(np.uint8), theirs.view(np.uint8), name)


@pytest.mark.parametrize("variant", variants.quantize_variants())
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_the_kernels_leave_an_a_with_a_value_not_finite_to_the_float_rule(variant, bad):
    kernels = variants.quantize_module(variant)
    rows = np.ones((70, 600), np.float32)
    rows[69, 599] = bad
    assert kernels.matmul_n_bits_quantize_rows(rows, 32, 2) is None
    assert kernels.matmul_n_bits_quantize_rows(rows[:69], 32, 2) is not None


def test_level_four_is_exact_block_sums_then_fmas_in_order():
    """One output by the level-4 rule, stated here with Python integers."""
    from qops.reference.n_bits import quantize_a_blocks

    rng = np.random.default_rng(21)
    a, b, scales, zero_points, _ = case(rng, 1, 40, 1, 4, 16, "packed", False)
    codes, a_scales, _ = quantize_a_blocks(a, 16)
    q = codes_of(b, 4, 40)[:, 0]
    zero = zero_points_of(zero_points, 4, 1, 3)[0]
    acc = np.float32(0)
    for j in range(3):
        exact = sum(int(codes[0, k]) * (int(q[k]) - int(zero[j]))
                    for k in range(16 * j, min(40, 16 * j + 16)))
        acc = fused_multiply_add(np.float32(exact), np.float32(a_scales[0, j] * scales[0, j]),
                                 acc)
    got = qops.matmul_n_bits(a, b, scales, zero_points, k=40, n=1, block_size=16,
                             accuracy_level=4)
    assert got[0, 0].view(np.uint32) == acc.view(np.uint32)


# -- the kernels -----------------------------------------------------------------------------


def every_variant_and_thread_count_gives(call, want):
    """The kernels of every variant this CPU runs, on 1 and 2 threads, give
    ``want`` bit for bit."""
    for variant in variants.quantize_variants():
        for threads in (1, 2):
            prepared = native.prepare(call, variant)
            # NaN first, so that an output a kernel leaves unwritten shows.
            got = np.full(call.output_shape, np.nan, call.output_dtype)
            prepared.run_once(call, got, threads)
            assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), (variant, threads)


@pytest.mark.parametrize("k_groups", [2, 3, 16])
def test_level_four_layout_puts_a_columns_quads_in_one_int32(k_groups):
    """Level 4's layout of 4-bit codes (where a variant's kernels read it):
    each 64 bytes of a panel, k 8g .. 8g + 7, hold column c's int32 at
    (c // 8) * 32 + (c % 8) * 4, its byte i codes k 8g + i (low nibble) and
    8g + i + 4 (high), stated here on the codes themselves."""
    rng = np.random.default_rng(k_groups)
    k, panels = 8 * k_groups, 3
    codes = rng.integers(0, 16, (panels, k, 16), dtype=np.uint8)
    # Interleaved: line p holds k 2p (low nibble) and 2p + 1 (high) of 16 columns.
    interleaved = (codes[:, 0::2] | codes[:, 1::2] << 4).reshape(panels, -1)
    want = np.zeros((panels, k_groups, 2, 8, 4), np.uint8)
    for g in range(k_groups):
        for c in range(16):
            for i in range(4):
                want[:, g, c // 8, c % 8, i] = (codes[:, 8 * g + i, c]
                                                | codes[:, 8 * g + i + 4, c] << 4)
    laid_out = 0
    for variant in variants.quantize_variants():
        module = variants.quantize_module(variant)
        if not module.LEVEL_FOUR_QUADS:
            continue
        laid_out += 1
        got = module.matmul_n_bits_quads(np.ascontiguousarray(interleaved), 2)
        assert np.array_equal(got, want.reshape(panels, -1)), variant
    if not laid_out:
        pytest.skip("no variant this CPU runs reads level 4's layout")


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 70), k=st.integers(1, 300), n=st.integers(1, 40),
       bits=st.sampled_from([2, 4, 8]), block_log=st.integers(4, 7),
       zero_kind=st.sampled_from(["none", "packed", "float"]), with_bias=st.booleans(),
       dtype=st.sampled_from(FLOATS), level=st.sampled_from([0, 4]),
       seed=st.integers(0, 2 ** 32 - 1))
def test_every_variant_and_thread_count_gives_the_rule_bit_for_bit(m, k, n, bits, block_log,
                                                                   zero_kind, with_bias, dtype,
                                                                   level, seed):
    rng = np.random.default_rng(seed)
    block_size = 2 ** block_log
    a, b, scales, zero_points, bias = case(rng, m, k, n, bits, block_size, zero_kind, with_bias,
                                           dtype)
    if level == 4 and seed % 5 == 0:
        a[:, :16] = 0  # a block of zeros: scale 0, codes 0
    call = call_of(a, b, scales, zero_points, bias, k=k, n=n, bits=bits, block_size=block_size,
                   accuracy_level=level)
    want = qops.reference.matmul_n_bits(a, b, scales, zero_points, bias=bias, k=k, n=n, bits=bits,
                                        block_size=block_size, accuracy_level=level)
    assert want.dtype == np.dtype(dtype)
    every_variant_and_thread_count_gives(call, want)


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("n", [64, 65, 96, 100, 112, 130])
def test_one_row_over_four_panels_at_a_time_by_the_rule(bits, n):
    """One row of A takes four panels of 16 columns at a time where the
    variant has the registers (AVX-512), else two: N of 4 to 9 panels, the
    last partial or whole, leaves one, two or three past the last four,
    and every variant and thread count gives the rule's bytes, a bias and
    each kind of zero point included."""
    rng = np.random.default_rng(n * bits)
    for zero_kind, with_bias in (("none", False), ("packed", True), ("float", True)):
        a, b, scales, zero_points, bias = case(rng, 1, 97, n, bits, 32, zero_kind, with_bias,
                                               np.float32)
        call = call_of(a, b, scales, zero_points, bias, k=97, n=n, bits=bits, block_size=32,
                       accuracy_level=0)
        want = qops.reference.matmul_n_bits(a, b, scales, zero_points, bias=bias, k=97, n=n,
                                            bits=bits, block_size=32, accuracy_level=0)
        every_variant_and_thread_count_gives(call, want)


@pytest.mark.parametrize("m", [2, 3, 4, 5])
@pytest.mark.parametrize("n, bits", [(16, 4), (20, 4), (60, 4), (90, 4), (100, 4), (128, 4),
                                     (40, 2), (50, 8)])
def test_few_rows_streamed_together_by_the_rule(m, n, bits):
    """Two to four rows of A on 4-bit codes stream each panel pass together
    (AVX-512: up to four rows' chains over two panels; AVX2: up to three),
    each weight made once for all of them; more rows, and 2- and 8-bit
    codes, take the tiles.  N of one panel, of a partial second one, and of
    a lone partial last panel after pairs (16, 20, 100); K of 301 ends the
    last block at odd length; every kind of zero point; every variant and
    thread count gives the rule's bytes."""
    rng = np.random.default_rng(m * n * bits)
    for zero_kind, with_bias in (("none", False), ("packed", True), ("float", True)):
        a, b, scales, zero_points, bias = case(rng, m, 301, n, bits, 32, zero_kind, with_bias)
        call = call_of(a, b, scales, zero_points, bias, k=301, n=n, bits=bits, block_size=32,
                       accuracy_level=0)
        want = qops.reference.matmul_n_bits(a, b, scales, zero_points, bias=bias, k=301, n=n,
                                            bits=bits, block_size=32, accuracy_level=0)
        every_variant_and_thread_count_gives(call, want)


@pytest.mark.parametrize("n", [60, 90])
@pytest.mark.parametrize("scale_exponent", [-122, -123, -125])
@pytest.mark.parametrize("zero_kind", ["none", "packed", "whole floats"])
def test_one_row_whole_zero_points_by_the_rule(zero_kind, scale_exponent, n):
    """One row of A with whole zero points (absent, packed, or floats that
    are whole numbers) takes the one-row kernel's shorter form (AVX-512)
    where every scale's sixteenth is exact: scales from 2**-122 take it,
    smaller ones (some of whose sixteenths would round) the general form;
    both are the rule's bytes on every variant and thread count.  N of 60
    and 90 end the four panels of a task, or the two after them, in a
    partial panel."""
    from qops.backends.native.matmul_n_bits import _per_panel, whole_zeros_hold
    from qops.reference import n_bits

    rng = np.random.default_rng(-scale_exponent * n)
    k = 301
    a, b, scales, zero_points, bias = case(rng, 1, k, n, 4, 32,
                                           "packed" if zero_kind == "packed" else "none", False)
    if zero_kind == "whole floats":
        zero_points = rng.integers(0, 16, scales.shape).astype(np.float32)
    # Full mantissas, so that a sixteenth below 2**-126 loses bits.
    scales = (np.sign(scales) * (1 + rng.random(scales.shape)) * 2.0 ** scale_exponent
              ).astype(np.float32)
    # Products near 1, so that a weight's last bit shows in the sums.
    a = (a * 2.0 ** (-scale_exponent - 2)).astype(np.float32)
    k_blocks = scales.shape[1]
    zeros = _per_panel(n_bits.zero_points_of(zero_points, n, k_blocks, 4), n, k_blocks)
    panel_scales = _per_panel(scales, n, k_blocks)
    assert whole_zeros_hold(zeros, panel_scales, 4) == (scale_exponent >= -122)
    call = call_of(a, b, scales, zero_points, bias, k=k, n=n, bits=4, block_size=32,
                   accuracy_level=0)
    want = qops.reference.matmul_n_bits(a, b, scales, zero_points, bias=bias, k=k, n=n, bits=4,
                                        block_size=32, accuracy_level=0)
    every_variant_and_thread_count_gives(call, want)
    if scale_exponent >= -122 or "avx512vnni" not in variants.quantize_variants():
        return
    # The short form forced on these scales: other bytes, which is why it
    # is not taken for them.
    kernels = variants.quantize_module("avx512vnni")
    forced = np.empty((1, n), np.float32)
    kernels.matmul_n_bits(a, kernels.matmul_n_bits_interleave(np.ascontiguousarray(b), 1),
                          zeros, panel_scales, None, n, 4, 32, forced, 1, True)
    assert not np.array_equal(forced.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("level", [0, 4])
@pytest.mark.parametrize("m, k, block_size", [(263, 600, 128), (197, 290, 16), (32, 513, 64),
                                              (16, 300, 256), (131, 4100, 1024)])
def test_many_rows_cross_chunks_and_tiles_by_the_rule(m, k, block_size, level):
    """Many rows of A take packed groups of rows (level 0 from 32 rows: up to
    192 (AVX2) or 256 (AVX-512) a task, tiles of 256 k; level 4 on 4-bit
    codes from 16 rows: up to 128 a task, runs of 256 k of a block): the
    fewest such rows, row counts past one and two chunks (ragged last
    group), K past one and two tiles or runs (ragged last block, blocks
    longer than a run), every variant and thread count, bit for bit the
    rule."""
    rng = np.random.default_rng(m)
    a, b, scales, zero_points, bias = case(rng, m, k, 37, 4, block_size, "packed", True)
    call = call_of(a, b, scales, zero_points, bias, k=k, n=37, bits=4, block_size=block_size,
                   accuracy_level=level)
    want = qops.reference.matmul_n_bits(a, b, scales, zero_points, bias=bias, k=k, n=37, bits=4,
                                        block_size=block_size, accuracy_level=level)
    every_variant_and_thread_count_gives(call, want)


@pytest.mark.parametrize("sign", [1, -1])
@pytest.mark.parametrize("m", [1, 3, 20])
@pytest.mark.parametrize("block_size", [128, 4096])
@pytest.mark.parametrize("code, zero", [(15, 0), (0, 15)])
def test_level_four_holds_its_largest_block_sums_exactly(sign, m, block_size, code, zero):
    """Every code of B 15 with zero points 0, or 0 with zero points 15, and
    every code of A +-127 (A one value per row, the largest of its blocks):
    each pair of k adds 2 * 15 * 127 to a column's sum, the most the 4-bit
    kernels' int16 steps carry before they widen, and a block of 4096 k
    reaches the largest sums and zero-point terms the rule allows (15 * 127
    * 4096, below 2**23, where the many-row kernel takes their difference in
    float32); one and three rows, and twenty (the many-row kernel), on every
    variant and thread count, bit for bit the rule."""
    k, n = 2 * block_size, 20
    a = np.full((m, k), sign * 3.0, np.float32)
    b = np.full((n, 2, block_size // 2), code * 0x11, np.uint8)
    scales = np.full((n, 2), 0.01, np.float32)
    zero_points = np.full((n, 1), zero * 0x11, np.uint8)  # packed: both blocks' zero
    call = call_of(a, b, scales, zero_points, None, k=k, n=n, bits=4, block_size=block_size,
                   accuracy_level=4)
    want = qops.reference.matmul_n_bits(a, b, scales, zero_points, k=k, n=n, bits=4,
                                        block_size=block_size, accuracy_level=4)
    assert np.allclose(want, sign * 3.0 * (code - zero) * 0.01 * k, rtol=1e-5)
    every_variant_and_thread_count_gives(call, want)


def test_the_function_runs_the_kernels_and_keeps_batch_dimensions():
    rng = np.random.default_rng(11)
    a, b, scales, zero_points, bias = case(rng, 6, 64, 20, 4, 32, "packed", True)
    a = a.reshape(2, 3, 64)
    call = call_of(a, b, scales, zero_points, bias, k=64, n=20, bits=4, block_size=32)
    assert dispatch.select(call).name == "kernels"
    got = qops.matmul_n_bits(a, b, scales, zero_points, None, bias, k=64, n=20, block_size=32)
    want = qops.reference.matmul_n_bits(a, b, scales, zero_points, bias=bias, k=64, n=20, bits=4,
                                        block_size=32)
    assert got.shape == (2, 3, 20) and np.array_equal(got, want)
    out = np.empty((2, 3, 20), np.float32)
    assert qops.matmul_n_bits(a, b, scales, zero_points, bias=bias, k=64, n=20, block_size=32,
                              out=out) is out
    assert np.array_equal(out, want)


def test_a_one_dimensional_a_gives_one_row():
    rng = np.random.default_rng(12)
    a, b, scales, _, _ = case(rng, 1, 32, 5, 4, 16, "none", False)
    got = qops.matmul_n_bits(a[0], b, scales, k=32, n=5, block_size=16)
    assert got.shape == (5,)
    assert np.array_equal(got, qops.matmul_n_bits(a, b, scales, k=32, n=5, block_size=16)[0])


@pytest.mark.parametrize("empty_shape", [(0, 2, 8), (3, 0, 8), (3, 2, 0), (0, 0, 0)])
def test_an_empty_b_gives_zeros_plus_the_bias(empty_shape):
    a = np.ones((4, 32), np.float32)
    bias = np.array([1.5, -2.0, 0.25], np.float32)
    b = np.zeros(empty_shape, np.uint8)
    got = qops.matmul_n_bits(a, b, np.zeros((0,), np.float32), bias=bias, k=32, n=3,
                             block_size=16)
    assert np.array_equal(got, np.broadcast_to(bias, (4, 3)))
    assert np.array_equal(qops.matmul_n_bits(a, b, np.zeros((0,), np.float32), k=32, n=3,
                                             block_size=16), np.zeros((4, 3), np.float32))


@pytest.mark.parametrize("scales_shape", [(3, 2), (6,), (0, 2), (3, 0), (0,)])
def test_an_empty_b_takes_scales_of_the_stated_shape_or_with_dimensions_0(scales_shape):
    a = np.ones((4, 32), np.float32)
    b = np.zeros((3, 2, 0), np.uint8)
    got = qops.matmul_n_bits(a, b, np.ones(scales_shape, np.float32), k=32, n=3, block_size=16)
    assert np.array_equal(got, np.zeros((4, 3), np.float32))


@pytest.mark.parametrize("scales_shape", [(5, 7), (3, 3), (4,), (2, 0)])
def test_an_empty_b_refuses_scales_of_another_shape(scales_shape):
    with pytest.raises(qops.ValidationError, match=r"MatMulNBits: scales has shape .* it must be "
                                                    r"\(3, 2\) or \(6,\) \(or either with "
                                                    r"dimensions 0, beside an empty b\)"):
        qops.matmul_n_bits(np.ones((4, 32), np.float32), np.zeros((3, 2, 0), np.uint8),
                           np.ones(scales_shape, np.float32), k=32, n=3, block_size=16)


def test_flat_scales_and_zero_points_are_the_same_values():
    rng = np.random.default_rng(13)
    a, b, scales, zero_points, _ = case(rng, 3, 64, 7, 4, 16, "packed", False)
    shaped = qops.matmul_n_bits(a, b, scales, zero_points, k=64, n=7, block_size=16)
    flat = qops.matmul_n_bits(a, b, scales.reshape(-1), zero_points.reshape(-1), k=64, n=7,
                              block_size=16)
    assert np.array_equal(shaped, flat)


def test_trivial_g_idx_is_the_blocks_in_order():
    rng = np.random.default_rng(14)
    a, b, scales, _, _ = case(rng, 2, 64, 4, 4, 32, "none", False)
    g_idx = (np.arange(64) // 32).astype(np.int32)
    assert np.array_equal(qops.matmul_n_bits(a, b, scales, g_idx=g_idx, k=64, n=4, block_size=32),
                          qops.matmul_n_bits(a, b, scales, k=64, n=4, block_size=32))


# -- validation ------------------------------------------------------------------------------


def _valid():
    rng = np.random.default_rng(15)
    a, b, scales, zero_points, bias = case(rng, 2, 64, 4, 4, 32, "packed", True)
    return dict(a=a, b=b, scales=scales, zero_points=zero_points, bias=bias, k=64, n=4,
                block_size=32)


@pytest.mark.parametrize("change, slot, words", [
    (dict(a=np.ones((2, 63), np.float32)), "a", "last dimension must be K = 64"),
    (dict(a=np.ones((2, 64), np.float64)), "a", "float64"),
    (dict(b=np.zeros((4, 2, 15), np.uint8)), "b", "(4, 2, 16)"),
    (dict(b=np.zeros((4, 2, 16), np.int8)), "b", "int8"),
    (dict(scales=np.ones((4, 3), np.float32)), "scales", "(4, 2) or (8,)"),
    (dict(scales=np.ones((4, 2), np.float16)), "scales", "same data type"),
    (dict(zero_points=np.zeros((4, 2), np.uint8)), "zero_points", "(4, 1) or (4,)"),
    (dict(zero_points=np.zeros((4, 2), np.int32)), "zero_points", "int32"),
    (dict(bias=np.ones(5, np.float32)), "bias", "(4,)"),
    (dict(g_idx=np.zeros(64, np.int32)), "g_idx", "only the blocks in order"),
    (dict(g_idx=np.zeros(63, np.int32)), "g_idx", "(64,)"),
    (dict(block_size=48), "block_size", "power of two"),
    (dict(block_size=8, b=np.zeros((4, 8, 4), np.uint8)), "block_size", "16"),
    (dict(bits=3), "bits", "3"),
    (dict(accuracy_level=5), "accuracy_level", "5"),
    (dict(weight_prepacked=1), "weight_prepacked", "1"),
    (dict(k=None), "k", "k is required"),
    (dict(scales=np.full((4, 2), np.nan, np.float32)), "scales", "NaN"),
    (dict(zero_points=np.full((4, 2), np.inf, np.float32)), "zero_points", "infinite"),
])
def test_bad_calls_name_the_operator_and_the_slot(change, slot, words):
    arguments = dict(_valid(), **change)
    with pytest.raises(qops.ValidationError) as error:
        qops.matmul_n_bits(**arguments)
    message = str(error.value)
    assert message.startswith("MatMulNBits:") and slot in message and words in message, message


@settings(max_examples=60, deadline=None)
@given(data=st.data(), bits=st.sampled_from([2, 4, 8]),
       block_size=st.sampled_from([16, 32, 64]), k=st.integers(1, 150), n=st.integers(1, 9),
       fault=st.sampled_from(["k", "n", "b", "scales", "zero_points", "bias", "a",
                              "block_size", "bits"]))
def test_any_call_broken_in_one_place_names_that_place(data, bits, block_size, k, n, fault):
    """A valid call of any shape with one slot or attribute made wrong: a
    ValidationError naming the operator and that slot or attribute, never
    a result or another exception."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    a, b, scales, zero_points, bias = case(rng, 2, k, n, bits, block_size, "packed", True)
    arguments = dict(a=a, b=b, scales=scales, zero_points=zero_points, bias=bias, k=k, n=n,
                     bits=bits, block_size=block_size)
    qops.matmul_n_bits(**arguments)  # the call as drawn is valid
    off = data.draw(st.sampled_from([-1, 1]))
    if fault in ("k", "n"):  # one more or one fewer, never 0
        arguments[fault] += off if arguments[fault] + off > 0 else 1
    elif fault in ("block_size", "bits"):
        arguments[fault] = data.draw(st.sampled_from([block_size * 3 // 2, 8, 17] if fault ==
                                                     "block_size" else [1, 3, 5, 16]))
    else:
        # One dimension one longer or shorter (A's rows may be any number:
        # its last); never 0, which would leave an empty B's projection out.
        value = arguments[fault]
        axis = value.ndim - 1 if fault == "a" else data.draw(st.integers(0, value.ndim - 1))
        shape = list(value.shape)
        shape[axis] += off if shape[axis] + off > 0 else 1
        arguments[fault] = np.zeros(shape, value.dtype)
    with pytest.raises(qops.ValidationError) as error:
        qops.matmul_n_bits(**arguments)
    # The slot the error names: the one changed, or for K and N (which only
    # say what the tensors' shapes must be) the tensor that no longer fits.
    named = {"k": ("a",), "n": ("b",), "block_size": ("block_size", "b"),
             "bits": ("bits", "b")}.get(fault, (fault,))
    assert str(error.value).startswith("MatMulNBits:") and error.value.slot in named, (
        fault, error.value.slot, str(error.value))


def test_out_is_checked():
    arguments = _valid()
    with pytest.raises(qops.ValidationError, match="out"):
        qops.matmul_n_bits(**arguments, out=np.empty((2, 4), np.float16))


# -- onnxruntime, a peer -------------------------------------------------------------------


def _onnxruntime_result(a, b, scales, zero_points, bias, k, n, bits, block_size, level=0):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    initializers = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales, "scales")]
    names = ["A", "B", "scales"]
    if zero_points is not None:
        initializers.append(numpy_helper.from_array(zero_points, "zero_points"))
        names.append("zero_points")
    if bias is not None:
        names += [""] * (4 - len(names)) + ["", "bias"]
        initializers.append(numpy_helper.from_array(bias, "bias"))
    node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft", K=k, N=n,
                            bits=bits, block_size=block_size, accuracy_level=level)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, a.shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"A": a})[0]


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("zero_kind", ["none", "packed", "float"])
def test_onnxruntime_agrees_within_float32_rounding(bits, zero_kind):
    """onnxruntime's level 0 sums in its own order: within the rule's bound."""
    if bits == 8 and zero_kind == "float":
        pytest.skip("onnxruntime's CPU MatMulNBits refuses 8-bit weights with float zero points")
    rng = np.random.default_rng(100 + bits)
    k, n, block_size = 160, 24, 32
    a, b, scales, zero_points, bias = case(rng, 3, k, n, bits, block_size, zero_kind, True)
    ours = qops.matmul_n_bits(a, b, scales, zero_points, bias=bias, k=k, n=n, bits=bits,
                              block_size=block_size)
    theirs = _onnxruntime_result(a, b, scales, zero_points, bias, k, n, bits, block_size)
    k_blocks = -(-k // block_size)
    block_of = np.arange(k) // block_size
    weights = ((codes_of(b, bits, k) - zero_points_of(zero_points, bits, n, k_blocks).T[block_of])
               * scales.astype(np.float64).T[block_of])
    magnitude = np.abs(a.astype(np.float64)) @ np.abs(weights) + np.abs(bias)
    assert np.all(np.abs(ours - theirs) <= 2 * (k + 2) * 2.0 ** -24 * magnitude)


# -- the C at each width, on this CPU ------------------------------------------------------

HARNESS = """
#include <stdlib.h>
#include "qops_matmul_n_bits.h"
void interleave(const uint8_t* b, ptrdiff_t n, ptrdiff_t k_blocks, ptrdiff_t blob,
                uint8_t* panels) {
    qops_nbits_interleave(b, n, k_blocks, blob, k_blocks * blob, 0,
                          (n + QOPS_NBITS_COLUMNS - 1) / QOPS_NBITS_COLUMNS, panels);
}
void panel(const float* a, ptrdiff_t rows, const uint8_t* weights, ptrdiff_t k, int bits,
           ptrdiff_t block_size, const float* zeros, const float* scales, const float* bias,
           ptrdiff_t columns, float* out, ptrdiff_t out_stride) {
    qops_nbits_panel(a, k, rows, weights, k, bits, block_size, block_size * bits / 8, zeros,
                     scales, bias, columns, out, out_stride);
}
void rows_panels(const float* a, ptrdiff_t rows, const uint8_t* weights, ptrdiff_t panel_bytes,
                 ptrdiff_t count, ptrdiff_t k, int bits, ptrdiff_t block_size,
                 const float* zeros, const float* scales, const float* bias, ptrdiff_t columns,
                 float* out, ptrdiff_t out_stride, float* packed, void* sums) {
    qops_nbits_pack_rows(a, k, rows, k, packed);
    qops_nbits_rows_panels(packed, rows, weights, panel_bytes, count, k, bits, block_size,
                           block_size * bits / 8, zeros, scales,
                           ((k + block_size - 1) / block_size) * QOPS_NBITS_COLUMNS, bias,
                           columns, out, out_stride, sums);
}
ptrdiff_t row_group(void) { return QOPS_NBITS_ROW_GROUP; }
void rows_int8(const int8_t* codes, ptrdiff_t padded_k, const float* a_scales,
               const int32_t* a_sums, ptrdiff_t rows, const uint8_t* weights,
               ptrdiff_t block_size, const uint8_t* zeros, const float* scales,
               const float* bias, ptrdiff_t columns, float* out, ptrdiff_t out_stride,
               int32_t* packed) {
    /* The panel in level 4's layout where the kernels read that. */
    uint8_t* laid = malloc((size_t)(padded_k / 2 * QOPS_NBITS_COLUMNS));
    if (QOPS_NBITS_QUADS) {
        qops_nbits_quads_layout(weights, padded_k / 2 * QOPS_NBITS_COLUMNS, laid);
    } else {
        memcpy(laid, weights, (size_t)(padded_k / 2 * QOPS_NBITS_COLUMNS));
    }
    qops_nbits_pack_codes(codes, padded_k, rows, packed);
    qops_nbits_rows_panel_int8_4bit(packed, padded_k, a_scales, a_sums, rows, laid,
                                    padded_k / block_size, block_size, block_size / 2, zeros,
                                    scales, bias, columns, out, out_stride);
    free(laid);
}
void rows_two_panels(const float* a, ptrdiff_t rows, ptrdiff_t k, const uint8_t* weights,
                     ptrdiff_t panel_bytes, int bits, ptrdiff_t block_size, const float* zeros,
                     const float* scales, ptrdiff_t parameters, int whole_zeros,
                     const float* bias, ptrdiff_t columns, float* out, ptrdiff_t out_stride) {
    qops_nbits_rows_two_panels(a, k, rows, k, weights, panel_bytes, bits, block_size,
                               block_size * bits / 8, zeros, scales, parameters, whole_zeros,
                               bias, columns, out, out_stride);
}
void two_panels(const float* row, ptrdiff_t k, const uint8_t* weights, ptrdiff_t panel_bytes,
                int bits, ptrdiff_t block_size, const float* zeros, const float* scales,
                ptrdiff_t parameters, int whole_zeros, const float* bias, ptrdiff_t columns,
                float* out) {
    qops_nbits_row_two_panels(row, k, weights, panel_bytes, bits, block_size,
                              block_size * bits / 8, zeros, scales, parameters, whole_zeros,
                              bias, columns, out);
}
"""

@pytest.fixture(scope="module", params=["scalar", "avx2", "avx512", "avx512-vnni"])
def c_kernels(request, tmp_path_factory):
    """The header compiled alone at one width (the AVX-512 one runs here
    wherever the CPU has AVX-512F, VNNI or not)."""
    from c_compiler import compiler, library_at_width

    if compiler() is None:
        pytest.skip("no C compiler")
    library = library_at_width(HARNESS, request.param, tmp_path_factory.mktemp(request.param))
    if library is None:
        pytest.skip(f"this CPU cannot run the {request.param} width")
    return library


def interleaved_by_header(c_kernels, b, n, k_blocks):
    """B (n, k_blocks, blob) interleaved by the header's qops_nbits_interleave."""
    interleaved = np.zeros((-(-n // 16), k_blocks * b.shape[2] * 16), np.uint8)
    pointer = ctypes.c_void_p
    c_kernels.interleave.argtypes = [pointer, ctypes.c_ssize_t, ctypes.c_ssize_t,
                                     ctypes.c_ssize_t, pointer]
    c_kernels.interleave(np.ascontiguousarray(b).ctypes.data, n, k_blocks, b.shape[2],
                         interleaved.ctypes.data)
    return interleaved


def panel_values(values, columns, k_blocks, dtype):
    """A panel's (k_blocks, 16) parameters from (n, k_blocks) values: the
    panel's columns, zero past them."""
    panel = np.zeros((k_blocks, 16), dtype)
    panel[:, :columns.stop - columns.start] = np.asarray(values)[columns].T
    return panel


@settings(max_examples=15, deadline=None)
@given(m=st.integers(1, 9), k=st.integers(1, 600), n=st.integers(1, 35),
       bits=st.sampled_from([2, 4, 8]), block_log=st.integers(4, 7), seed=st.integers(0, 2 ** 16))
def test_the_header_at_each_width_gives_the_rule(c_kernels, m, k, n, bits, block_log, seed):
    rng = np.random.default_rng(seed)
    block_size = 2 ** block_log
    a, b, scales, zero_points, bias = case(rng, m, k, n, bits, block_size, "float", True)
    k_blocks = -(-k // block_size)
    panels = -(-n // 16)
    interleaved = interleaved_by_header(c_kernels, b, n, k_blocks)
    pointer = ctypes.c_void_p
    c_kernels.panel.argtypes = [pointer, ctypes.c_ssize_t, pointer, ctypes.c_ssize_t,
                                ctypes.c_int, ctypes.c_ssize_t, pointer, pointer, pointer,
                                ctypes.c_ssize_t, pointer, ctypes.c_ssize_t]
    c_kernels.row_group.restype = ctypes.c_ssize_t
    group = c_kernels.row_group()
    out = np.zeros((m, n), np.float32)
    for panel in range(panels):
        columns = slice(panel * 16, min(n, panel * 16 + 16))
        width = columns.stop - columns.start
        zeros = panel_values(zero_points, columns, k_blocks, np.float32)
        block_scales = panel_values(scales, columns, k_blocks, np.float32)
        panel_bias = panel_values(bias[:, None], columns, 1, np.float32)[0]
        c_kernels.panel(a.ctypes.data, m, interleaved[panel].ctypes.data, k, bits, block_size,
                        zeros.ctypes.data, block_scales.ctypes.data, panel_bias.ctypes.data,
                        width, out[:, columns.start:].ctypes.data, n)
    want = qops.reference.matmul_n_bits(a, b, scales, zero_points, bias=bias, k=k, n=n, bits=bits,
                                        block_size=block_size)
    assert np.array_equal(out.view(np.uint32), want.view(np.uint32))
    # Many rows' path: the rows packed in whole groups (zero past m), a
    # guard of NaN after them that no sum may read, and every panel in one
    # call (the kernels' tasks take up to eight).  The panels' parameters
    # side by side serve the one-row path below too.
    all_zeros = np.zeros((panels, k_blocks, 16), np.float32)
    all_scales = np.zeros((panels, k_blocks, 16), np.float32)
    padded_bias = np.zeros(panels * 16, np.float32)
    for panel in range(panels):
        columns = slice(panel * 16, min(n, panel * 16 + 16))
        all_zeros[panel, :, :columns.stop - columns.start] = zero_points[columns].T
        all_scales[panel, :, :columns.stop - columns.start] = scales[columns].T
    padded_bias[:n] = bias
    packed = np.full(-(-m // group) * group * k + 64, np.nan, np.float32)
    sums = np.empty(-(-m // group) * group * panels * 16 + 16, np.float32)
    sums_at = sums[(-sums.ctypes.data % 64) // 4:]
    by_rows = np.zeros((m, n), np.float32)
    c_kernels.rows_panels.argtypes = [pointer, ctypes.c_ssize_t, pointer, ctypes.c_ssize_t,
                                      ctypes.c_ssize_t, ctypes.c_ssize_t, ctypes.c_int,
                                      ctypes.c_ssize_t, pointer, pointer, pointer,
                                      ctypes.c_ssize_t, pointer, ctypes.c_ssize_t, pointer,
                                      pointer]
    c_kernels.rows_panels(a.ctypes.data, m, interleaved.ctypes.data, interleaved.shape[1],
                          panels, k, bits, block_size, all_zeros.ctypes.data,
                          all_scales.ctypes.data, padded_bias.ctypes.data, n,
                          by_rows.ctypes.data, n, packed.ctypes.data, sums_at.ctypes.data)
    assert np.array_equal(by_rows.view(np.uint32), want.view(np.uint32))
    if panels < 2:
        return
    # One row over two panels at once (the kernels' path for one row of A).
    pair = np.zeros(32, np.float32)
    second = min(16, n - 16)
    two_panels(c_kernels, a[0], k, interleaved, bits, block_size, all_zeros, all_scales,
               False, padded_bias, second, pair)
    assert np.array_equal(pair[:16 + second].view(np.uint32),
                          want[0, :16 + second].view(np.uint32))
    if m > 4:
        return
    # Up to four rows over two panels at once (AVX-512 streams 4-bit codes'
    # rows together), in the general form and, where the zero points allow
    # it, the whole one.
    from qops.backends.native.matmul_n_bits import whole_zeros_hold

    for whole_zeros in {False, whole_zeros_hold(all_zeros, all_scales, bits)}:
        pairs = np.zeros((m, 32), np.float32)
        c_kernels.rows_two_panels.argtypes = [
            pointer, ctypes.c_ssize_t, ctypes.c_ssize_t, pointer, ctypes.c_ssize_t, ctypes.c_int,
            ctypes.c_ssize_t, pointer, pointer, ctypes.c_ssize_t, ctypes.c_int, pointer,
            ctypes.c_ssize_t, pointer, ctypes.c_ssize_t]
        c_kernels.rows_two_panels(a.ctypes.data, m, k, interleaved.ctypes.data,
                                  interleaved.shape[1], bits, block_size, all_zeros.ctypes.data,
                                  all_scales.ctypes.data, k_blocks * 16, int(whole_zeros),
                                  padded_bias.ctypes.data, second, pairs.ctypes.data, 32)
        assert np.array_equal(pairs[:, :16 + second].view(np.uint32),
                              want[:, :16 + second].view(np.uint32))


def two_panels(c_kernels, row, k, interleaved, bits, block_size, zeros, scales, whole_zeros,
               bias, second, out):
    """The header's one row over the first two panels (second: the second
    panel's columns), into out."""
    pointer = ctypes.c_void_p
    c_kernels.two_panels.argtypes = [pointer, ctypes.c_ssize_t, pointer, ctypes.c_ssize_t,
                                     ctypes.c_int, ctypes.c_ssize_t, pointer, pointer,
                                     ctypes.c_ssize_t, ctypes.c_int, pointer, ctypes.c_ssize_t,
                                     pointer]
    c_kernels.two_panels(row.ctypes.data, k, interleaved.ctypes.data, interleaved.shape[1],
                         bits, block_size, zeros.ctypes.data, scales.ctypes.data,
                         zeros.shape[1] * 16, int(whole_zeros),
                         None if bias is None else bias.ctypes.data, second, out.ctypes.data)


@settings(max_examples=20, deadline=None)
@given(k=st.integers(1, 300), block_log=st.integers(4, 7), zero=st.sampled_from([0, 8, 15, None]),
       magnitude=st.sampled_from([-122, -100, -1, 0, 30, 100, 127]),
       seed=st.integers(0, 2 ** 16))
def test_the_header_one_row_whole_zero_points_form_at_each_width(c_kernels, k, block_log, zero,
                                                                 magnitude, seed):
    """The one-row kernel's form for whole zero points (AVX-512 takes it:
    codes or'd into 2**23's mantissa, the high nibble's times 16 and its
    scale / 16; the other widths have only the general form, so there the
    two calls are one) gives the bytes of the general form, at every width: codes
    0 and 15 against zero points 0 to 15, scales of either sign from the
    smallest whose sixteenth is exact (2**-122) to the largest, infinite
    and NaN ones, odd K (a last block of odd length).  Where every value is
    finite, both are the rule's."""
    from qops.backends.native.matmul_n_bits import whole_zeros_hold
    from qops.reference import n_bits

    rng = np.random.default_rng(seed)
    block_size = 2 ** block_log
    n, k_blocks = 32, -(-k // block_size)
    codes = rng.choice(np.array([0, 15, 7, 8], np.uint8), size=(n, k_blocks * block_size))
    b = (codes[:, 0::2] | (codes[:, 1::2] << 4)).reshape(n, k_blocks, block_size // 2)
    scales = (rng.choice([-1.0, 1.0], size=(n, k_blocks))
              * rng.uniform(1.0, 1.99, size=(n, k_blocks)) * 2.0 ** magnitude).astype(np.float32)
    zeros = (np.full((n, k_blocks), zero, np.float32) if zero is not None
             else rng.integers(0, 16, size=(n, k_blocks)).astype(np.float32))
    all_zeros = np.ascontiguousarray(zeros.reshape(2, 16, k_blocks).transpose(0, 2, 1))
    all_scales = np.ascontiguousarray(scales.reshape(2, 16, k_blocks).transpose(0, 2, 1))
    assert whole_zeros_hold(all_zeros, all_scales, 4)
    a = (rng.standard_normal((1, k)) * 2.0 ** rng.integers(-20, 20)).astype(np.float32)
    interleaved = interleaved_by_header(c_kernels, b, n, k_blocks)
    general, whole = np.zeros(32, np.float32), np.zeros(32, np.float32)
    two_panels(c_kernels, a[0], k, interleaved, 4, block_size, all_zeros, all_scales, False,
               None, 16, general)
    two_panels(c_kernels, a[0], k, interleaved, 4, block_size, all_zeros, all_scales, True,
               None, 16, whole)
    assert np.array_equal(whole.view(np.uint32), general.view(np.uint32))
    with np.errstate(over="ignore"):
        weights = n_bits.dequantized_weights(b, scales, zeros, k=k, n=n, bits=4,
                                             block_size=block_size)
    if np.all(np.isfinite(weights)) and np.all(np.isfinite(general)):
        want = qops.reference.matmul_n_bits(a, b, scales, zeros, k=k, n=n, bits=4,
                                            block_size=block_size)
        assert np.array_equal(whole.view(np.uint32), want[0].view(np.uint32))
    # Infinite and NaN scales: the same bytes, NaNs included.
    special = all_scales.copy()
    special[0, 0, :4] = [np.inf, -np.inf, np.nan, 0.0]
    two_panels(c_kernels, a[0], k, interleaved, 4, block_size, all_zeros, special, False, None,
               16, general)
    two_panels(c_kernels, a[0], k, interleaved, 4, block_size, all_zeros, special, True, None,
               16, whole)
    assert np.array_equal(whole.view(np.uint32), general.view(np.uint32))


@pytest.mark.parametrize("m", [2, 3, 4])
@pytest.mark.parametrize("n", [20, 32])
def test_the_header_rows_streamed_together_at_each_width(c_kernels, m, n):
    """Two to four rows over two panels (qops_nbits_rows_two_panels; the
    widths that stream them, AVX-512 and AVX2, and the scalar one that takes
    them in turn), with whole zero points in both forms and float ones, K
    of 301 (a last block of odd length), a partial second panel: the rule's
    bytes."""
    from qops.backends.native.matmul_n_bits import whole_zeros_hold
    from qops.reference import n_bits

    rng = np.random.default_rng(m * n)
    k, block_size = 301, 32
    k_blocks = -(-k // block_size)
    for zero_kind in ("packed", "float"):
        a, b, scales, zero_points, bias = case(rng, m, k, n, 4, block_size, zero_kind, True)
        want = qops.reference.matmul_n_bits(a, b, scales, zero_points, bias=bias, k=k, n=n, bits=4,
                                            block_size=block_size)
        zeros = native._per_panel(n_bits.zero_points_of(zero_points, n, k_blocks, 4), n,
                                  k_blocks)
        panel_scales = native._per_panel(scales, n, k_blocks)
        padded_bias = np.zeros(32, np.float32)
        padded_bias[:n] = bias
        interleaved = interleaved_by_header(c_kernels, b, n, k_blocks)
        forms = {False, whole_zeros_hold(zeros, panel_scales, 4)}
        assert (True in forms) == (zero_kind == "packed")
        for whole_zeros in forms:
            rows = np.full((m, 32), np.nan, np.float32)
            pointer = ctypes.c_void_p
            c_kernels.rows_two_panels.argtypes = [
                pointer, ctypes.c_ssize_t, ctypes.c_ssize_t, pointer, ctypes.c_ssize_t,
                ctypes.c_int, ctypes.c_ssize_t, pointer, pointer, ctypes.c_ssize_t, ctypes.c_int,
                pointer, ctypes.c_ssize_t, pointer, ctypes.c_ssize_t]
            c_kernels.rows_two_panels(a.ctypes.data, m, k, interleaved.ctypes.data,
                                      interleaved.shape[1], 4, block_size, zeros.ctypes.data,
                                      panel_scales.ctypes.data, k_blocks * 16, int(whole_zeros),
                                      padded_bias.ctypes.data, n - 16, rows.ctypes.data, 32)
            assert np.array_equal(rows[:, :n].view(np.uint32), want.view(np.uint32))
            assert np.all(np.isnan(rows[:, n:]))


@settings(max_examples=15, deadline=None)
@given(m=st.integers(1, 40), k=st.integers(1, 700), n=st.integers(1, 35),
       block_log=st.integers(4, 9), zero_kind=st.sampled_from(["none", "packed"]),
       seed=st.integers(0, 2 ** 16))
def test_the_header_level_four_rows_at_each_width(c_kernels, m, k, n, block_log, zero_kind,
                                                  seed):
    """Level 4's many-row kernel on 4-bit codes (AVX2's prefill path; the
    plain statement at the scalar width) on the reference's codes of A, one
    panel a call, against the level-4 rule."""
    from qops.reference import n_bits

    rng = np.random.default_rng(seed)
    block_size = 2 ** block_log
    a, b, scales, zero_points, bias = case(rng, m, k, n, 4, block_size, zero_kind, True)
    k_blocks = -(-k // block_size)
    panels = -(-n // 16)
    codes, a_scales, a_sums = n_bits.quantize_a_blocks(a, block_size)
    integer_zeros = n_bits.zero_points_of(zero_points, n, k_blocks, 4).astype(np.uint8)
    interleaved = interleaved_by_header(c_kernels, b, n, k_blocks)
    pointer = ctypes.c_void_p
    c_kernels.rows_int8.argtypes = [pointer, ctypes.c_ssize_t, pointer, pointer,
                                    ctypes.c_ssize_t, pointer, ctypes.c_ssize_t, pointer,
                                    pointer, pointer, ctypes.c_ssize_t, pointer,
                                    ctypes.c_ssize_t, pointer]
    packed = np.empty(-(-m // 4) * 4 * codes.shape[1] // 4, np.int32)
    out = np.zeros((m, n), np.float32)
    for panel in range(panels):
        columns = slice(panel * 16, min(n, panel * 16 + 16))
        width = columns.stop - columns.start
        zeros = panel_values(integer_zeros, columns, k_blocks, np.uint8)
        block_scales = panel_values(np.asarray(scales).reshape(n, k_blocks), columns, k_blocks,
                                    np.float32)
        panel_bias = panel_values(bias[:, None], columns, 1, np.float32)[0]
        c_kernels.rows_int8(codes.ctypes.data, codes.shape[1], a_scales.ctypes.data,
                            a_sums.ctypes.data, m, interleaved[panel].ctypes.data, block_size,
                            zeros.ctypes.data, block_scales.ctypes.data, panel_bias.ctypes.data,
                            width, out[:, columns.start:].ctypes.data, n, packed.ctypes.data)
    want = qops.reference.matmul_n_bits(a, b, scales, zero_points, bias=bias, k=k, n=n, bits=4,
                                        block_size=block_size, accuracy_level=4)
    assert np.array_equal(out.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("zero_kind", ["none", "packed"])
def test_onnxruntime_level_four_agrees_within_its_quantization_of_a(zero_kind):
    """Both quantize A to int8 per block (their roundings may differ by one
    code): within one code of each block of A (its largest magnitude over
    127) times the weights' magnitudes, plus float32 rounding."""
    rng = np.random.default_rng(300)
    k, n, block_size = 256, 32, 32
    a, b, scales, zero_points, _ = case(rng, 2, k, n, 4, block_size, zero_kind, False)
    ours = qops.matmul_n_bits(a, b, scales, zero_points, k=k, n=n, block_size=block_size,
                              accuracy_level=4)
    theirs = _onnxruntime_result(a, b, scales, zero_points, None, k, n, 4, block_size, level=4)
    k_blocks = k // block_size
    block_of = np.arange(k) // block_size
    weights = ((codes_of(b, 4, k) - zero_points_of(zero_points, 4, n, k_blocks).T[block_of])
               * scales.astype(np.float64).T[block_of])
    a_step = np.abs(a).reshape(2, k_blocks, block_size).max(axis=2) / 127
    bound = (a_step[:, block_of] @ np.abs(weights)) + (k + 2) * 2.0 ** -22 * (
        np.abs(a.astype(np.float64)) @ np.abs(weights))
    assert np.all(np.abs(ours - theirs) <= bound)


def test_the_reference_takes_the_function_s_arguments_g_idx_of_the_blocks_own_order_only():
    rng = np.random.default_rng(401)
    k, n, block_size = 64, 8, 32
    a, b, scales, zero_points, bias = case(rng, 2, k, n, 4, block_size, "packed", True)
    plain = qops.reference.matmul_n_bits(a, b, scales, zero_points, bias=bias, k=k, n=n,
                                         block_size=block_size)
    ordered = qops.reference.matmul_n_bits(a, b, scales, zero_points, np.arange(k) // block_size,
                                           bias, k=k, n=n, block_size=block_size)
    np.testing.assert_array_equal(ordered, plain)
    np.testing.assert_array_equal(plain, qops.matmul_n_bits(
        a, b, scales, zero_points, None, bias, k=k, n=n, block_size=block_size))
    with pytest.raises(ValueError, match="g_idx is not the blocks' own order"):
        qops.reference.matmul_n_bits(a, b, scales, zero_points, np.arange(k) % 2, bias, k=k,
                                     n=n, block_size=block_size)
