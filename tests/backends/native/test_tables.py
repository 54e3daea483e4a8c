"""The QOperator tables' kernels (qops.backends.native.tables) on every
quantize variant: byte lookups against NumPy's indexing, QLinearSoftmax's
rows against the rule written out here and against qops.onnx's NumPy
statement, bit for bit, on 1 and 2 threads."""

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qops.backends.native import tables
from qops.backends.native import variants as _simd
from qops.onnx import _qoperator

VARIANTS = _simd.quantize_variants()
RANGES = {np.uint8: (0, 255), np.int8: (-128, 127)}


def stated_softmax(rows, table, multiplier, zero_point):
    """QLinearSoftmax's rule, element by element: e = table[255 + x - max(x)]
    of each row, their float32 sum taken left to right, then
    rint(float64(e) * multiplier / float64(sum)) + zero_point clamped to the
    type (0 before the zero point where e is 0)."""
    low, high = RANGES[rows.dtype.type]
    out = np.empty(rows.shape, rows.dtype)
    for i, row in enumerate(rows.astype(np.int64)):
        e = table[255 + row - row.max()]
        total = np.float32(0)
        for value in e:
            total = np.float32(total + value)
        for j, value in enumerate(e):
            quotient = 0.0 if value == 0 else float(value) * multiplier / float(total)
            out[i, j] = min(max(round(quotient) + zero_point, low), high)
    return out


@st.composite
def softmax_calls(draw):
    dtype = draw(st.sampled_from([np.uint8, np.int8]))
    low, high = RANGES[dtype]
    rows = draw(st.integers(1, 5))
    # 2000 x 5 rows is enough work for two threads.
    length = draw(st.sampled_from([1, 2, 7, 64, 128, 511, 512, 513, 700, 2000]))
    # Wide scales make the smallest entries underflow to 0 (e = 0); narrow
    # rows of equal values make every quotient the multiplier itself.
    x_scale = draw(st.sampled_from([1e-3, 0.02, 0.1, 0.5, 2.0]))
    spread = draw(st.sampled_from([0, 3, 255]))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    centre = int(rng.integers(low, high + 1))
    x = np.clip(centre + rng.integers(-spread, spread + 1, (rows, length)), low, high)
    y_scale = draw(st.sampled_from([1 / 256, 1 / 255, 1e-3, 0.3, 1.0]))
    multiplier = float(np.floor(np.divide(np.float32(1), np.float32(y_scale),
                                          dtype=np.float32)))
    zero_point = draw(st.integers(low, high))
    return (x.astype(dtype), _qoperator.softmax_table(x_scale, length), multiplier,
            zero_point)


@pytest.mark.parametrize("variant", VARIANTS)
@settings(max_examples=40, deadline=None)
@given(call=softmax_calls(), n_threads=st.sampled_from([1, 2]))
def test_softmax_rows_follow_the_stated_rule(variant, call, n_threads):
    rows, table, multiplier, zero_point = call
    got = tables.softmax_rows(rows, table, multiplier, zero_point, n_threads=n_threads,
                              variant=variant)
    assert got.dtype == rows.dtype
    assert np.array_equal(got, stated_softmax(rows, table, multiplier, zero_point))
    assert np.array_equal(got, _qoperator._softmax_rows(rows, table, multiplier, zero_point))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("multiplier, zero_point, expected", [(5.0, 0, 2), (7.0, 0, 4),
                                                              (5.0, 10, 12), (7.0, -3, 1)])
def test_softmax_quotients_halfway_round_to_even(variant, multiplier, zero_point, expected):
    # Two equal values: each quotient is exactly multiplier / 2.
    dtype = np.int8 if zero_point < 0 else np.uint8
    rows = np.full((3, 2), 7, dtype)
    table = _qoperator.softmax_table(0.1, 2)
    got = tables.softmax_rows(rows, table, multiplier, zero_point, variant=variant)
    assert np.array_equal(got, np.full((3, 2), expected, dtype))
    assert np.array_equal(got, stated_softmax(rows, table, multiplier, zero_point))


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_table_of_zeros_gives_the_zero_point(variant):
    """Every e 0, so every sum 0: each quotient is 0 (not 0 / 0), as the
    NumPy statement has it."""
    rows = np.arange(24, dtype=np.uint8).reshape(4, 6)
    table = np.zeros(256, np.float32)
    got = tables.softmax_rows(rows, table, 255.0, 9, variant=variant)
    assert np.array_equal(got, np.full((4, 6), 9, np.uint8))
    assert np.array_equal(got, _qoperator._softmax_rows(rows, table, 255.0, 9))


@pytest.mark.parametrize("variant", VARIANTS)
def test_many_softmax_rows_do_not_depend_on_the_thread_count(variant):
    rng = np.random.default_rng(5)
    rows = rng.integers(-128, 128, (1536, 128), dtype=np.int8)
    table = _qoperator.softmax_table(0.07, 128)
    one = tables.softmax_rows(rows, table, 255.0, -128, n_threads=1, variant=variant)
    assert np.array_equal(one, _qoperator._softmax_rows(rows, table, 255.0, -128))
    assert np.array_equal(tables.softmax_rows(rows, table, 255.0, -128, n_threads=2,
                                              variant=variant), one)


def _lookup_paths():
    """(variant, VBMI) pairs: each variant's lookups on their vector rows, and
    on AVX-512 VBMI as well where the variant's build and the CPU take it."""
    paths = []
    for variant in VARIANTS:
        paths.append(pytest.param(variant, False, id=f"{variant}-rows"))
        if _simd.quantize_module(variant).lookup_takes_vbmi(True):
            paths.append(pytest.param(variant, True, id=f"{variant}-vbmi"))
    return paths


LOOKUP_PATHS = _lookup_paths()


@contextlib.contextmanager
def _lookups_on(variant, vbmi):
    """The variant's lookups on the path asked for, then back to the default."""
    module = _simd.quantize_module(variant)
    assert module.lookup_takes_vbmi(vbmi) == vbmi
    try:
        yield
    finally:
        module.lookup_takes_vbmi(True)


@pytest.mark.parametrize("variant, vbmi", LOOKUP_PATHS)
@settings(max_examples=30, deadline=None)
@given(dtype=st.sampled_from([np.uint8, np.int8]),
       shape=st.sampled_from([(0,), (1,), (17,), (3, 5000), (70000,)]),
       pairs=st.booleans(), seed=st.integers(0, 2 ** 32 - 1),
       n_threads=st.sampled_from([1, 2]))
def test_lookups_equal_numpy_s_indexing(variant, vbmi, dtype, shape, pairs, seed, n_threads):
    rng = np.random.default_rng(seed)
    low, high = RANGES[dtype]
    first = rng.integers(low, high + 1, shape).astype(dtype)
    second = rng.integers(low, high + 1, shape).astype(dtype) if pairs else None
    table = rng.integers(low, high + 1, 65536 if pairs else 256).astype(dtype)
    with _lookups_on(variant, vbmi):
        got = tables.lookup(first, table, second, n_threads=n_threads, variant=variant)
    index = first.view(np.uint8).astype(np.int64)
    if pairs:
        index = index * 256 + second.view(np.uint8)
    assert got.dtype == dtype and got.shape == shape
    assert np.array_equal(got, table[index])


@pytest.mark.parametrize("variant", VARIANTS)
def test_arrays_that_do_not_cover_the_output_are_refused(variant):
    module = _simd.quantize_module(variant)
    x = np.zeros(8, np.uint8)
    with pytest.raises(ValueError, match="cover"):
        module.lookup_bytes(x, None, np.zeros(255, np.uint8), np.empty(8, np.uint8), 1)
    with pytest.raises(ValueError, match="cover"):
        module.lookup_bytes(x, x, np.zeros(256, np.uint8), np.empty(8, np.uint8), 1)
    with pytest.raises(ValueError, match="cover"):
        module.lookup_bytes(x, np.zeros(7, np.uint8), np.zeros(65536, np.uint8),
                            np.empty(8, np.uint8), 1)
    with pytest.raises(ValueError, match="cover"):
        module.lookup_bytes(x, None, np.zeros(256, np.uint8), np.empty(9, np.uint8), 1)
    rows = np.zeros((2, 4), np.uint8)
    table = np.ones(256, np.float32)
    with pytest.raises(ValueError, match="cover"):
        module.softmax_rows(rows, False, table, 255.0, 0, np.empty((2, 5), np.uint8), 1)
    with pytest.raises(ValueError, match="cover"):
        module.softmax_rows(rows, False, table[:255], 255.0, 0, np.empty((2, 4), np.uint8), 1)
    with pytest.raises(ValueError, match="cover"):
        module.softmax_rows(rows, False, table, float("inf"), 0, np.empty((2, 4), np.uint8), 1)


def test_the_qoperator_functions_give_the_numpy_statements_bytes():
    """qlinear_softmax, qlinear_mul (by one value and by its table of every
    product) and the lookup-table nodes take the kernels from 1024 elements
    on: the same bytes as their NumPy forms."""
    assert tables.built()
    rng = np.random.default_rng(11)
    x = rng.integers(0, 256, (3, 40, 64), dtype=np.uint8)
    table = _qoperator.softmax_table(0.05, 40)
    multiplier = float(np.floor(np.float32(1) / np.float32(1 / 256)))
    moved = np.moveaxis(x, 1, -1)
    expected = np.moveaxis(
        _qoperator._softmax_rows(moved.reshape(-1, 40), table, multiplier, 7)
        .reshape(moved.shape), -1, 1)
    assert np.array_equal(_qoperator.qlinear_softmax(x, 0.05, 1 / 256, 7, axis=1), expected)
    # 200 x 300 pairs: past _MUL_TABLE_MIN_SIZE, so through the table.
    a = rng.integers(-128, 128, (200, 300), dtype=np.int8)
    b = rng.integers(-128, 128, (200, 300), dtype=np.int8)
    multiplier = np.float32(np.float32(np.float32(0.1) * np.float32(0.26)) / np.float32(2.0))
    stated = _qoperator._mul_values(a, b, (3, -4, 5), multiplier)
    assert np.array_equal(_qoperator.qlinear_mul(a, 0.1, 3, b, 0.26, -4, 2.0, 5), stated)
    one = np.array(-17, np.int8)
    stated = _qoperator._mul_values(a, one, (3, -4, 5), multiplier)
    assert np.array_equal(_qoperator.qlinear_mul(a, 0.1, 3, one, 0.26, -4, 2.0, 5), stated)
    lookup = rng.integers(-128, 128, 256).astype(np.int8)
    assert np.array_equal(_qoperator.apply_lookup_table(a, lookup),
                          lookup[a.view(np.uint8).astype(np.int64)])


def stated_mul(a, b, zero_points, multiplier):
    """QLinearMul's rule, element by element in Python: the exact product of
    the differences, times the multiplier in float32, plus the output's zero
    point in float32, rounded half to even and clamped to the type."""
    low, high = RANGES[a.dtype.type]
    out = np.empty(a.shape, a.dtype)
    for i, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        product = (x - zero_points[0]) * (y - zero_points[1])
        value = np.float32(np.float32(product) * multiplier) + np.float32(zero_points[2])
        # Clamped first (the bounds are integers: the same as after rounding).
        out[i] = round(min(max(float(np.float32(value)), low), high))
    return out


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_mul_of_every_pair_is_the_rule(variant, dtype):
    """Every pair of bytes, for zero points at and inside the type's ends and
    multipliers from ones that round every product to 0 to ones that
    saturate most: the kernel equals qops.onnx's NumPy statement, and a
    sample of the pairs the rule written out here, on 1 and 2 threads."""
    values = np.arange(256, dtype=np.uint8).view(dtype)
    a, b = np.repeat(values, 256), np.tile(values, 256)
    low, high = RANGES[dtype]
    sample = np.random.default_rng(0).choice(a.size, 600, replace=False)
    for multiplier in (np.float32(1e-9), np.float32(0.0123), np.float32(1 / 255),
                       np.float32(3.7), np.float32(3e38)):
        for zero_points in ((0, 0, 0), (low, high, low), (high, low + 3, 17), (5, -1 % 7, high)):
            want = _qoperator._mul_values(a, b, zero_points, multiplier)
            for threads in (1, 2):
                got = tables.mul(a, b, zero_points, multiplier, n_threads=threads,
                                 variant=variant)
                assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), (
                    multiplier, zero_points, threads)
            np.testing.assert_array_equal(
                got[sample], stated_mul(a[sample], b[sample], zero_points, multiplier))


def test_mul_refuses_an_infinite_multiplier_and_mismatched_operands():
    """An infinite multiplier takes the rule's zero-product case, which the
    kernel does not state: it refuses one (qlinear_mul keeps the table then)."""
    a = np.zeros(4, np.uint8)
    with pytest.raises(ValueError, match="not finite"):
        tables.mul(a, a, (0, 0, 0), np.float32(np.inf))
    with pytest.raises(ValueError):
        tables.mul(a, np.zeros(5, np.uint8), (0, 0, 0), np.float32(1))


@pytest.mark.parametrize("variant, vbmi", LOOKUP_PATHS)
def test_a_256_entry_lookup_of_every_length_past_a_vector_and_every_byte(variant, vbmi):
    """The vector lookup (64 or 32 bytes a step) and the byte loop after it:
    every length up to two vectors and more, each byte value in every lane
    position, against NumPy's indexing."""
    with _lookups_on(variant, vbmi):
        _every_length_and_byte(variant)


def _every_length_and_byte(variant):
    table = np.random.default_rng(3).permutation(256).astype(np.uint8)
    values = ((np.arange(300) * 97) % 256).astype(np.uint8)
    for count in range(0, 140):
        for offset in (0, 1, 31):
            first = values[offset:offset + count]
            got = tables.lookup(first, table, variant=variant)
            assert np.array_equal(got, table[first]), (count, offset)
    every = np.arange(256, dtype=np.uint8)
    for shift in range(64):
        first = np.roll(every, shift)
        assert np.array_equal(tables.lookup(first, table, variant=variant), table[first])


@pytest.mark.parametrize("length", [1, 15, 16, 17, 768, 1000])
def test_layer_normalization_rows_are_one_rule_at_every_width_and_thread_count(length):
    """The kernel's rows: the same bits on every variant and thread count
    (its sums in sixteen lanes, a fixed order), within float32 rounding of
    the float64 normalization, with and without a bias."""
    rng = np.random.default_rng(length)
    rows = rng.normal(3.0, 2.0, (300, length)).astype(np.float32)
    scale = rng.normal(0, 1, length).astype(np.float32)
    bias = rng.normal(0, 1, length).astype(np.float32)
    wide = rows.astype(np.float64)
    centred = wide - wide.mean(axis=1, keepdims=True)
    normal = centred / np.sqrt((centred ** 2).mean(axis=1, keepdims=True) + 1e-5)
    for with_bias in (False, True):
        want = normal * scale + (bias if with_bias else 0)
        first = None
        for variant in VARIANTS:
            for threads in (1, 2):
                got = tables.layer_normalization(rows, scale, bias if with_bias else None, 1e-5,
                                                 n_threads=threads, variant=variant)
                first = got if first is None else first
                assert np.array_equal(got.view(np.uint32), first.view(np.uint32)), (
                    variant, threads)
        np.testing.assert_allclose(first, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("variant", VARIANTS)
@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from([np.uint8, np.int8]), batch=st.integers(1, 2),
       channels=st.sampled_from([1, 3, 16, 31, 32, 33, 64, 70]), height=st.integers(1, 12),
       width=st.integers(1, 12), kernel=st.tuples(st.integers(1, 4), st.integers(1, 4)),
       strides=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       dilations=st.tuples(st.integers(1, 2), st.integers(1, 2)),
       start=st.tuples(st.integers(0, 3), st.integers(0, 3)),
       end=st.tuples(st.integers(0, 4), st.integers(0, 4)), seed=st.integers(0, 2**32 - 1))
def test_the_max_pooling_of_channels_last_images_is_the_rule(
        variant, dtype, batch, channels, height, width, kernel, strides, dilations, start, end,
        seed):
    """Every channel of a (N, H, W, C) image pooled as MaxPool's rule states
    it (each window's largest value over its positions inside the image, the
    lowest value where it has none: padding at either end, wider than the
    window), at chunks of channels with a last one that overlaps and at
    fewer channels than a chunk; the planes' kernel gives the same."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    image = rng.integers(info.min, info.max + 1, (batch, channels, height, width), dtype=dtype)
    outputs = tuple((size + first + last - dilation * (k - 1) - 1) // stride + 1
                    for size, first, last, dilation, k, stride
                    in zip((height, width), start, end, dilations, kernel, strides))
    if min(outputs) < 1:
        return
    want = np.full((batch, channels) + outputs, info.min, dtype)
    for oy in range(outputs[0]):
        for ox in range(outputs[1]):
            rows = [oy * strides[0] - start[0] + k * dilations[0] for k in range(kernel[0])]
            columns = [ox * strides[1] - start[1] + k * dilations[1] for k in range(kernel[1])]
            rows = [r for r in rows if 0 <= r < height]
            columns = [c for c in columns if 0 <= c < width]
            if rows and columns:
                want[:, :, oy, ox] = image[:, :, rows][:, :, :, columns].max(axis=(2, 3))
    got = tables.max_pool_channels_last(np.ascontiguousarray(image.transpose(0, 2, 3, 1)),
                                        kernel, strides, dilations, start, outputs,
                                        variant=variant)
    assert got.dtype == image.dtype
    np.testing.assert_array_equal(got.transpose(0, 3, 1, 2), want)
    np.testing.assert_array_equal(
        tables.max_pool_bytes(image, kernel, strides, dilations, start, outputs,
                              variant=variant), want)
