"""Bad input for every operator: a clear ValidationError (nothing written into
``out``) or, where the contract allows the input, the correct result.

Each operator has one valid call; every test changes one thing about it.
The expected results come from the NumPy reference run on the clean call.
"""

import numpy as np
import pytest
from calls import CALLS, IDS, expected, i8, main_slot, run, u8  # noqa: F401

import qops


def assert_rejected(name, slots, attributes, match=None, **keywords):
    """The call raises a ValidationError and leaves a valid ``out`` untouched."""
    _, clean, clean_attributes = dict(zip(IDS, CALLS))[name]()
    shape_source = expected(name, clean, clean_attributes)
    out = np.full(shape_source.shape, 7).astype(shape_source.dtype)
    before = out.copy()
    with pytest.raises(qops.ValidationError, match=match):
        run(name, slots, attributes, out=out, **keywords)
    assert np.array_equal(out.view(np.uint8), before.view(np.uint8))


# -- wrong types --------------------------------------------------------------------------

@pytest.mark.parametrize("make", CALLS, ids=IDS)
@pytest.mark.parametrize("dtype", [np.float64, np.bool_, object, np.int16, np.complex64])
def test_a_main_input_of_a_wrong_dtype_is_refused(make, dtype):
    name, slots, attributes = make()
    slot = main_slot(slots)
    if dtype is np.int16 and name == "dequantize_linear":
        pytest.skip("int16 is a DequantizeLinear input type")
    bad = dict(slots, **{slot: slots[slot].astype(dtype)})
    assert_rejected(name, bad, attributes)


@pytest.mark.parametrize("make", CALLS, ids=IDS)
def test_masked_arrays_and_matrices_are_refused_or_computed_correctly(make):
    name, slots, attributes = make()
    slot = main_slot(slots)
    want = expected(name, slots, attributes)
    subclasses = [np.ma.masked_array(slots[slot], mask=False)]
    if slots[slot].ndim == 2:
        subclasses.append(np.matrix(slots[slot]))
    for value in subclasses:
        try:
            got = run(name, dict(slots, **{slot: value}), attributes)
        except qops.ValidationError:
            continue
        assert np.array_equal(np.asarray(got), want), type(value).__name__


# -- layouts: correct results --------------------------------------------------------------

def _layouts(array):
    yield "fortran", np.asfortranarray(array)
    reversed_copy = np.ascontiguousarray(array[..., ::-1])
    yield "negative stride", reversed_copy[..., ::-1]
    doubled = np.repeat(array, 2, axis=-1)
    yield "every other element", doubled[..., ::2]
    read_only = array.copy()
    read_only.flags.writeable = False
    yield "read-only", read_only


@pytest.mark.parametrize("make", CALLS, ids=IDS)
def test_non_contiguous_and_read_only_inputs_give_the_correct_result(make):
    name, slots, attributes = make()
    want = expected(name, slots, attributes)
    for slot, value in slots.items():
        if not isinstance(value, np.ndarray) or value.ndim == 0:
            continue
        for layout, variant in _layouts(value):
            got = run(name, dict(slots, **{slot: variant}), attributes)
            assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), (slot, layout)


@pytest.mark.parametrize("make", CALLS, ids=IDS)
def test_zero_size_dimensions_give_empty_outputs_of_the_right_shape(make):
    name, slots, attributes = make()
    slot = main_slot(slots)
    empty = dict(slots, **{slot: slots[slot][:0]})
    got = run(name, empty, attributes)
    want = expected(name, empty, attributes)
    assert got.shape == want.shape and got.size == 0 and got.dtype == want.dtype


# -- scales and zero points ---------------------------------------------------------------

SCALE_SLOT = {"quantized_linear_convolution": "input_scale",
              "quantized_linear_matrix_multiply": "a_scale", "quantize_linear": "y_scale",
              "dequantize_linear": "x_scale"}


@pytest.mark.parametrize("name", sorted(SCALE_SLOT))
@pytest.mark.parametrize("bad", [0.0, -0.5, np.nan, np.inf, -np.inf])
def test_bad_scales_are_refused(name, bad):
    make = dict(zip(IDS, CALLS))[name]
    _, slots, attributes = make()
    slot = SCALE_SLOT[name]
    value = np.full_like(np.asarray(slots[slot]), bad)
    assert_rejected(name, dict(slots, **{slot: value}), attributes,
                    match=f"{slot} has an? .*value")


@pytest.mark.parametrize("name", sorted(SCALE_SLOT))
def test_a_subnormal_scale_computes_or_is_refused_clearly(name):
    make = dict(zip(IDS, CALLS))[name]
    _, slots, attributes = make()
    slot = SCALE_SLOT[name]
    tiny = np.full_like(np.asarray(slots[slot]), 1e-40)
    changed = dict(slots, **{slot: tiny})
    try:
        got = run(name, changed, attributes)
    except qops.ValidationError as error:
        assert "overflows float32" in str(error) or "scale" in str(error)
        return
    assert np.array_equal(got.view(np.uint8),
                          expected(name, changed, attributes).view(np.uint8))


ZERO_POINT_SLOT = {"quantized_linear_convolution": "input_zero_point",
                   "quantized_linear_matrix_multiply": "a_zero_point",
                   "convolution_integer": "input_zero_point",
                   "matrix_multiply_integer": "a_zero_point", "quantize_linear": "y_zero_point",
                   "dequantize_linear": "x_zero_point"}


@pytest.mark.parametrize("name", sorted(ZERO_POINT_SLOT))
@pytest.mark.parametrize("bad", [1000, -129, 2.5, np.float32(1), np.int16(3), np.int64(1)])
def test_zero_points_out_of_range_or_of_the_wrong_type_are_refused(name, bad):
    make = dict(zip(IDS, CALLS))[name]
    _, slots, attributes = make()
    slot = ZERO_POINT_SLOT[name]
    if np.ndim(slots[slot]) and not isinstance(bad, (int, float)):
        bad = np.full(np.shape(slots[slot]), bad)
    assert_rejected(name, dict(slots, **{slot: bad}), attributes)


# -- geometry -----------------------------------------------------------------------------

CONVOLUTIONS = ["quantized_linear_convolution", "convolution_integer"]


@pytest.mark.parametrize("name", CONVOLUTIONS)
@pytest.mark.parametrize("attribute,value,match", [
    ("strides", (0, 1), "strides"),
    ("dilations", (1, 0), "dilations"),
    ("start_padding", (-1, 0), "start_padding"),
    ("end_padding", (2**31, 0), "padded input height"),
    ("group_count", 4, "group_count|per group"),
    ("group_count", 0, "group_count"),
    ("strides", (1,), "strides"),
    ("dilations", (9, 9), "smaller than the dilated filter"),
])
def test_invalid_convolution_geometry_is_refused(name, attribute, value, match):
    _, slots, attributes = dict(zip(IDS, CALLS))[name]()
    assert_rejected(name, slots, dict(attributes, **{attribute: value}), match=match)


@pytest.mark.parametrize("name", CONVOLUTIONS)
def test_a_kernel_larger_than_the_padded_input_is_refused(name):
    _, slots, attributes = dict(zip(IDS, CALLS))[name]()
    big = dict(slots, filter=np.zeros(slots["filter"].shape[:2] + (12, 12),
                                      slots["filter"].dtype))
    assert_rejected(name, big, attributes, match="smaller than the dilated filter")


@pytest.mark.parametrize("name", ["quantize_linear", "dequantize_linear"])
@pytest.mark.parametrize("keywords,match", [
    (dict(axis=3), "axis"), (dict(axis=-4), "axis"),
    (dict(axis=1, block_size=-2), "block_size"),
])
def test_axes_and_block_sizes_that_do_not_fit_are_refused(name, keywords, match):
    _, slots, attributes = dict(zip(IDS, CALLS))[name]()
    assert_rejected(name, slots, dict(attributes, **keywords), match=match)


# -- out= ---------------------------------------------------------------------------------

@pytest.mark.parametrize("make", CALLS, ids=IDS)
def test_a_wrong_out_is_refused_and_left_untouched(make):
    name, slots, attributes = make()
    want = expected(name, slots, attributes)
    wrong_dtype = np.int16 if want.dtype != np.int16 else np.int32
    candidates = {
        "shape": np.zeros(want.shape[:-1] + (want.shape[-1] + 1,), want.dtype),
        "dtype": np.zeros(want.shape, wrong_dtype),
        "layout": np.zeros(want.shape[:-1] + (2 * want.shape[-1],), want.dtype)[..., ::2],
        "list": want.tolist(),
    }
    read_only = np.zeros(want.shape, want.dtype)
    read_only.flags.writeable = False
    candidates["read-only"] = read_only
    for why, out in candidates.items():
        before = np.array(out, copy=True)
        with pytest.raises(qops.ValidationError):
            run(name, slots, attributes, out=out)
        assert np.array_equal(np.asarray(out), before), why


@pytest.mark.parametrize("make", CALLS, ids=IDS)
def test_out_overlapping_an_input_is_refused_and_a_good_out_is_filled(make):
    name, slots, attributes = make()
    slot = main_slot(slots)
    want = expected(name, slots, attributes)
    if want.dtype == slots[slot].dtype and want.size <= slots[slot].size:
        storage = slots[slot].copy()
        aliased = storage.reshape(-1)[:want.size].reshape(want.shape)
        before = storage.copy()
        with pytest.raises(qops.ValidationError, match="overlaps"):
            run(name, dict(slots, **{slot: storage}), attributes, out=aliased)
        assert np.array_equal(storage, before)
    out = np.empty(want.shape, want.dtype)
    assert run(name, slots, attributes, out=out) is out
    assert np.array_equal(out.view(np.uint8), want.view(np.uint8))
