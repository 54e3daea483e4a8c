"""CONVOLUTION_INTEGER and MATRIX_MULTIPLY_INTEGER on the GEMM kernels' raw
(int32) epilogue, and MATRIX_MULTIPLY_INTEGER_TO_FLOAT on its float32 form,
for every SIMD variant and thread count."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_cases import TYPES, VARIANTS, _native, random_values, reference, run_variant

from qops.ops import integer, integer_to_float


def _exact_matmul(slots):
    """(a - a_zp) @ (b - b_zp) in Python integers' range (int64 here is exact)."""
    def centred(value, zero):
        wide = value.astype(np.int64)
        return wide if zero is None else wide - np.asarray(zero).astype(np.int64)

    return np.matmul(centred(slots["a"], slots["a_zero_point"]),
                     centred(slots["b"], slots["b_zero_point"]))


@st.composite
def matmul_integer_calls(draw):
    rank = draw(st.integers(2, 4))
    rows, depth, columns = (draw(st.integers(1, 40)) for _ in range(3))
    batch = [draw(st.integers(1, 3)) for _ in range(rank - 2)]
    a_batch = [b if draw(st.booleans()) else 1 for b in batch]
    b_batch = [b if draw(st.booleans()) else 1 for b in batch]
    a_type, b_type = (draw(st.sampled_from(TYPES)) for _ in range(2))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    a_zero_shape = (1,) * (rank - 2) + ((rows, 1) if draw(st.booleans()) else (1, 1))
    b_zero_shape = (1,) * (rank - 2) + ((1, columns) if draw(st.booleans()) else (1, 1))
    slots = dict(a=random_values(rng, tuple(a_batch) + (rows, depth), a_type),
                 a_zero_point=random_values(rng, a_zero_shape, a_type),
                 b=random_values(rng, tuple(b_batch) + (depth, columns), b_type),
                 b_zero_point=random_values(rng, b_zero_shape, b_type))
    if draw(st.booleans()):
        slots["a_zero_point"] = None
    if draw(st.booleans()):
        slots["b_zero_point"] = None
    return slots


@pytest.mark.parametrize("n_threads", [1, 2])
@settings(max_examples=50, deadline=None)
@given(slots=matmul_integer_calls())
def test_matrix_multiply_integer_every_variant_matches_exact_sums(slots, n_threads):
    call = integer.prepare_matrix_multiply_integer(slots, {}, "4_0")
    expected = _exact_matmul(slots)
    assert np.array_equal(reference(call), expected)
    for variant in VARIANTS:
        got = run_variant(_native.run_matmul, call, variant, n_threads)
        assert got.dtype == np.int32
        assert np.array_equal(got, expected), variant



@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("a_type", TYPES)
@pytest.mark.parametrize("depth", [64, 66])
def test_raw_sums_of_a_last_block_of_one_or_two_rows(variant, a_type, depth, monkeypatch):
    """The raw epilogue where the last one or two rows go with the block
    above them (run_unit's tail: MR + 1 or MR + 2 rows in the variant's
    passes, the first and last MR rows written as two tiles): M = 7, 8, 13,
    14 in one unit, 49 and 50 folded into the unit above, 104 in a unit of
    two blocks; A read where it lies (uint8, K = 64) or packed; N = 200 ends
    in a partial panel."""
    monkeypatch.setattr(_native, "WORK_PER_THREAD", 1)
    rng = np.random.default_rng(depth)
    for rows in (7, 8, 13, 14, 49, 50, 104):
        slots = dict(a=random_values(rng, (rows, depth), a_type),
                     a_zero_point=random_values(rng, (), a_type),
                     b=random_values(rng, (depth, 200), np.int8),
                     b_zero_point=random_values(rng, (1, 200), np.int8))
        call = integer.prepare_matrix_multiply_integer(slots, {}, "4_0")
        expected = _exact_matmul(slots)
        for n_threads in (1, 2):
            got = run_variant(_native.run_matmul, call, variant, n_threads)
            assert np.array_equal(got, expected), (rows, n_threads)

def _stated_to_float(slots):
    """The rule in NumPy's float32, one rounding per step: float32(acc), times
    float32(a_scale * b_scale), plus the bias."""
    acc = _exact_matmul(slots).astype(np.float32)
    multiplier = np.multiply(slots["a_scale"], slots["b_scale"], dtype=np.float32)
    with np.errstate(over="ignore"):
        value = np.multiply(acc, multiplier, dtype=np.float32)
        return (value if slots.get("bias") is None
                else np.add(value, slots["bias"], dtype=np.float32))


@st.composite
def integer_to_float_calls(draw):
    """Products over the float epilogue's paths: up to 3 unit rows of tiles
    and tails of 1 to 5 rows, several units of columns, K past one block
    (1024, or 3072 on the variants with longer blocks), batches broadcasting either way, scales and zero points per
    tensor, row or column, and a bias per column (the kernels' epilogue),
    per element (NumPy's steps after the raw sums) or none.  Scales may make
    the multiplier 0 or the products overflow to infinity, and a bias may
    hold -0.0 (N = 1 too)."""
    rows = draw(st.integers(1, 140))
    depth = draw(st.one_of(st.integers(1, 80), st.integers(1000, 1300),
                           st.integers(3073, 3140)))
    columns = draw(st.one_of(st.just(1), st.integers(1, 300)))
    batch = draw(st.sampled_from([(), (2,), (2, 3)]))
    a_batch = tuple(size if draw(st.booleans()) else 1 for size in batch)
    b_batch = tuple(size if draw(st.booleans()) else 1 for size in batch)
    ones = (1,) * len(batch)
    dtype = draw(st.sampled_from(TYPES))  # one type for both, as the page has it
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    per_row, per_column = draw(st.booleans()), draw(st.booleans())
    # Mostly ordinary scales; else a multiplier that underflows to 0 (2**-160:
    # the products are then +-0) or products past float32's range (infinities).
    magnitude = draw(st.sampled_from([-10, -10, -10, -80, 120]))
    slots = dict(
        a=random_values(rng, a_batch + (rows, depth), dtype),
        a_scale=(rng.uniform(0.5, 2, ones + ((rows, 1) if per_row else (1, 1)))
                 * 2.0 ** magnitude).astype(np.float32),
        b=random_values(rng, b_batch + (depth, columns), dtype),
        b_scale=(rng.uniform(0.5, 2, ones + ((1, columns) if per_column else (1, 1)))
                 * 2.0 ** (-80 if magnitude == -80 else -6)).astype(np.float32))
    if draw(st.booleans()):
        slots["a_zero_point"] = random_values(rng, ones + ((rows, 1) if per_row else (1, 1)),
                                              dtype)
    if draw(st.booleans()):
        slots["b_zero_point"] = random_values(rng, ones + ((1, columns) if per_column else (1, 1)),
                                              dtype)
    bias = draw(st.sampled_from(["none", "column", "element"]))
    out_batch = tuple(max(x, y) for x, y in zip(a_batch, b_batch))
    if bias != "none":
        values = rng.standard_normal(
            (columns,) if bias == "column" else out_batch + (rows, columns)).astype(np.float32)
        if draw(st.booleans()):
            values[...] = -0.0
        slots["bias"] = values
    return slots


@pytest.mark.parametrize("n_threads", [1, 2])
@settings(max_examples=40, deadline=None)
@given(slots=integer_to_float_calls())
def test_integer_to_float_every_variant_matches_the_rule(slots, n_threads):
    call = integer_to_float.prepare(slots, {})
    full = dict({"a_zero_point": None, "b_zero_point": None, "bias": None}, **slots)
    expected = _stated_to_float(full)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_native, "WORK_PER_THREAD", 1)  # two threads on small products too
        for variant in VARIANTS:
            got = run_variant(_native.run_integer_to_float, call, variant, n_threads)
            assert got.dtype == np.float32
            assert np.array_equal(got.view(np.uint32), expected.view(np.uint32)), variant


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("columns", [20, 70])
def test_the_float_epilogue_rounds_the_product_before_the_bias(variant, n_threads, columns,
                                                              monkeypatch):
    """acc = 127 * 66053 = 8388731, odd and in [2**23, 2**24), times
    1 + 2**-23 is 8388732.0000147: float32 rounds it to 8388732, and the
    bias -8388732 then gives 0.  A fused multiply-add (one rounding) would
    give 0.0000147: the kernels are built without contraction.  (N = 70
    holds a whole tile of every variant, N = 20 a part of the widest.)"""
    monkeypatch.setattr(_native, "WORK_PER_THREAD", 1)
    depth, rows = 600, 7
    column = np.zeros(depth, np.int8)
    column[:520], column[520] = 127, 13
    multiplier = np.float32(1 + 2.0 ** -23)
    product = np.float32(np.float32(8388731) * multiplier)
    slots = dict(a=np.full((rows, depth), 127, np.int8), a_scale=multiplier,
                 b=np.repeat(column[:, None], columns, axis=1), b_scale=np.float32(1),
                 bias=np.full(columns, -product, np.float32))
    assert 127 * int(column.astype(np.int64).sum()) == 8388731
    assert 8388731 * (1 + 2.0 ** -23) - float(product) > 1e-5  # the case tells them apart
    call = integer_to_float.prepare(slots, {})
    got = run_variant(_native.run_integer_to_float, call, variant, n_threads)
    assert np.array_equal(got, np.zeros((rows, columns), np.float32))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("columns", [1, 5, 70])
def test_the_float_epilogue_keeps_the_sign_of_zero(variant, columns):
    """A multiplier that underflows to 0 (2**-80 * 2**-80) makes every product
    a signed zero, -0.0 where acc < 0; plus a bias of -0.0 that stays -0.0
    there and is +0.0 elsewhere (one value or a row of them, N = 1 and 5,
    and N = 70, whole tiles of every variant)."""
    rng = np.random.default_rng(columns)
    slots = dict(a=random_values(rng, (9, 40), np.int8), a_scale=np.float32(2.0 ** -80),
                 b=random_values(rng, (40, columns), np.int8), b_scale=np.float32(2.0 ** -80),
                 bias=np.full(columns, -0.0, np.float32))
    slots["a"][0] = 0  # acc = 0 in the first row
    expected = _stated_to_float(dict(slots, a_zero_point=None, b_zero_point=None))
    signs = np.signbit(expected)
    assert signs.any() and not signs.all()  # both zeros are there to tell apart
    call = integer_to_float.prepare(slots, {})
    for n_threads in (1, 2):
        got = run_variant(_native.run_integer_to_float, call, variant, n_threads)
        assert np.array_equal(got.view(np.uint32), expected.view(np.uint32)), n_threads


@st.composite
def convolution_integer_calls(draw):
    groups = draw(st.integers(1, 3))
    group_channels = draw(st.integers(1, 6))
    per_group = draw(st.integers(1, 5))
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    strides = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilations = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    start = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    end = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    size = tuple(max(draw(st.integers(1, 9)), (k - 1) * d + 1)
                 for k, d in zip(kernel, dilations))
    if draw(st.integers(0, 2)) == 0:  # a pointwise product (1 x 1, one group, no padding)
        groups, kernel, start, end = 1, (1, 1), (0, 0), (0, 0)
        size = (draw(st.integers(1, 9)), draw(st.integers(1, 40)))
    x_type, w_type = (draw(st.sampled_from(TYPES)) for _ in range(2))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    out_channels = groups * per_group
    slots = dict(
        input=random_values(rng, (draw(st.integers(1, 2)), groups * group_channels) + size, x_type),
        input_zero_point=random_values(rng, (1, 1, 1, 1), x_type),
        filter=random_values(rng, (out_channels, group_channels) + kernel, w_type),
        filter_zero_point=random_values(
            rng, (1, out_channels, 1, 1) if draw(st.booleans()) else (1, 1, 1, 1), w_type))
    if draw(st.booleans()):
        slots["input_zero_point"] = None
    attributes = dict(strides=strides, dilations=dilations, start_padding=start,
                      end_padding=end, group_count=groups)
    return slots, attributes


@pytest.mark.parametrize("n_threads", [1, 2])
@settings(max_examples=50, deadline=None)
@given(case=convolution_integer_calls())
def test_convolution_integer_every_variant_matches_the_reference(case, n_threads):
    slots, attributes = case
    call = integer.prepare_convolution_integer(slots, attributes, "4_0")
    expected = reference(call)
    assert expected.dtype == np.int32
    runs = [_native.run_convolution]
    if (call.arrays["filter"].shape[2:] == (1, 1) and attributes["group_count"] == 1
            and attributes["strides"] == (1, 1)
            and not any(attributes["start_padding"] + attributes["end_padding"])):
        runs.append(_native.run_pointwise)
    for variant in VARIANTS:
        for run in runs:
            got = run_variant(run, call, variant, n_threads)
            assert np.array_equal(got, expected), (variant, run.__name__)


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_largest_k_the_kernels_take_is_exact_at_the_int32_edge(variant):
    """K = 33025 is the largest K whose sums always fit int32; at the extreme
    product (255 * 255 per term) the sum is 2147450625, just under 2**31."""
    depth = 2147483647 // (255 * 255)
    slots = dict(a=np.full((2, depth), 255, np.uint8), a_zero_point=np.uint8(0),
                 b=np.full((depth, 3), 0, np.uint8), b_zero_point=np.uint8(255))
    call = integer.prepare_matrix_multiply_integer(slots, {}, "4_0")
    assert _native.fits_int32(depth) and not _native.fits_int32(depth + 1)
    got = run_variant(_native.run_matmul, call, variant, 2)
    assert np.array_equal(got, np.full((2, 3), -255 * 255 * depth, np.int64))
