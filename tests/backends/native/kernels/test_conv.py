"""The compiled convolution kernels against the NumPy reference, for every
SIMD variant and thread count."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_cases import (TYPES, VARIANTS, _native, at_page_end, random_values, reference,
                          run_variant)

from qops.backends import dispatch as _dispatch
from qops.backends.native import variants as _simd
from qops.ops import convolution


def _convolution_call(draw, rng, image_shape, filter_shape, types, channel_shape, attributes):
    """A validated convolution call of random values: optional zero points, a
    bias of none, small or near-int32 values (the last takes the int64
    epilogue), per-tensor or per-channel (``channel_shape``) filter parameters."""
    return convolution.prepare(
        _convolution_slots(draw, rng, image_shape, filter_shape, types, channel_shape),
        attributes, "2_1")


def _convolution_slots(draw, rng, image_shape, filter_shape, types, channel_shape):
    """The slots of :func:`_convolution_call`."""
    in_type, filter_type, out_type = types
    out_channels = filter_shape[0]
    slots = dict(
        input=random_values(rng, image_shape, in_type),
        input_scale=np.float32(rng.uniform(0.01, 0.1)),
        input_zero_point=random_values(rng, (), in_type) if draw(st.booleans()) else None,
        filter=random_values(rng, filter_shape, filter_type),
        filter_scale=rng.uniform(0.01, 0.1, channel_shape).astype(np.float32),
        filter_zero_point=(random_values(rng, channel_shape, filter_type)
                           if draw(st.booleans()) else None),
        bias=draw(st.sampled_from((None, 5000, 2**31 - 1))),
        output_scale=np.float32(rng.uniform(0.2, 3.0)),
        output_zero_point=random_values(rng, (), out_type),
    )
    if slots["bias"] is not None:
        bound = slots["bias"]
        slots["bias"] = rng.integers(-bound, bound, out_channels, dtype=np.int64).astype(np.int32)
    return slots


@st.composite
def conv_calls(draw):
    return convolution.prepare(*draw(conv_slots()), "2_1")


@st.composite
def conv_slots(draw):
    """(slots, attributes) of a convolution of random geometry and values."""
    groups = draw(st.integers(1, 3))
    depthwise = draw(st.booleans())
    # Under 16 channels a group's filter columns fold into one step; from 16, one step per tap.
    group_channels = 1 if depthwise else draw(st.sampled_from((1, 2, 3, 4, 5, 16, 17)))
    per_group = draw(st.integers(1, 5))
    channels, out_channels = group_channels * groups, per_group * groups
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilations = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    start = (draw(st.integers(0, 3)), draw(st.integers(0, 3)))
    end = (draw(st.integers(0, 3)), draw(st.integers(0, 3)))
    span = [d * (k - 1) + 1 for d, k in zip(dilations, kernel)]
    height = draw(st.integers(max(1, span[0] - start[0] - end[0]), 14))
    width = draw(st.integers(max(1, span[1] - start[1] - end[1]), 14))
    batch = draw(st.integers(1, 2))
    in_type, filter_type, out_type = (draw(st.sampled_from(TYPES)) for _ in range(3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    per_channel = draw(st.booleans())
    channel_shape = (out_channels,) if per_channel else ()
    return (_convolution_slots(draw, rng, (batch, channels, height, width),
                               (out_channels, group_channels) + kernel,
                               (in_type, filter_type, out_type), channel_shape),
            dict(strides=strides, dilations=dilations, start_padding=start, end_padding=end,
                 group_count=groups))


@pytest.mark.parametrize("n_threads", [1, 2])
@settings(max_examples=60, deadline=None)
@given(call=conv_calls())
def test_every_variant_matches_the_reference(call, n_threads):
    expected = reference(call)
    runs = [_native.run_convolution]
    if _native.is_depthwise(call):
        runs.append(_native.run_depthwise)
    for variant in VARIANTS:
        for run in runs:
            got = run_variant(run, call, variant, n_threads)
            assert np.array_equal(got, expected), (variant, run.__name__)


def _fully_bound(slots, attributes):
    """The convolution compiled with every slot of ``slots`` but the image
    bound (a session's node)."""
    import qops
    constants = {name: value for name, value in slots.items() if name != "input"}
    return qops.compile("QUANTIZED_LINEAR_CONVOLUTION", **constants, **attributes)


def record_bound_outputs(compiled, made):
    """Have the outputs the kernels of ``compiled``'s bound run make (or its
    None, for data it refuses) appended to ``made`` from now on; returns
    the bound run's output-making call, None where it has none."""
    bound = compiled._binder.bound
    fresh = bound.fresh
    if fresh is not None:
        compiled._binder.bound = bound._replace(
            fresh=lambda *data: made.append(fresh(*data)) or made[-1])
    return fresh


@pytest.mark.parametrize("variant", VARIANTS)
@settings(max_examples=40, deadline=None)
@given(slots_and_attributes=conv_slots(), seed=st.integers(0, 2**32 - 1))
def test_a_fully_bound_convolution_runs_each_image_on_its_bound_kernels(
        variant, slots_and_attributes, seed):
    """A compiled convolution with every slot but the image bound (a
    session's node), of any geometry, whichever kernels take it: once bound,
    each call's output is made by the bound kernels where they have such a
    run (the implicit GEMM always does), and every call gives the
    reference's bytes, a strided image too."""
    slots, attributes = slots_and_attributes
    rng = np.random.default_rng(seed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_simd, "selected", lambda: variant)
        compiled = _fully_bound(slots, attributes)
        run = compiled.data_runner()
        shape, dtype = slots["input"].shape, slots["input"].dtype
        made, fresh = [], None
        for index, n_threads in enumerate((1, 2, 2, 1)):
            if index == 2:  # bound by the two calls before
                fresh = record_bound_outputs(compiled, made)
            image = random_values(rng, shape, dtype)
            if index == 3:
                image = random_values(rng, shape[:3] + (2 * shape[3],), dtype)[..., ::2]
            call = convolution.prepare(dict(slots, input=image), attributes, "2_1")
            got = run(n_threads, image)
            assert got.dtype == call.output_dtype and np.array_equal(got, reference(call))
        if _dispatch.select(call).name == "kernels":
            # The implicit GEMM's bound run made the third call's output; the
            # last image, a strided view unless it has one value a row, it refused.
            assert fresh is not None and made[0] is not None
            assert (made[1] is None) == (not image.flags.c_contiguous)


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_compiled_integer_convolution_makes_its_int32_sums_on_the_bound_kernels(variant,
                                                                                 monkeypatch):
    """CONVOLUTION_INTEGER compiled, its filter and zero points bound: the
    bound implicit GEMM writes each call's exact int32 sums."""
    import qops
    monkeypatch.setattr(_simd, "selected", lambda: variant)
    rng = np.random.default_rng(5)
    image_shape, filter_ = (1, 6, 9, 8), random_values(rng, (5, 6, 3, 3), np.int8)
    compiled = qops.compile("CONVOLUTION_INTEGER", filter=filter_, input_zero_point=np.uint8(3),
                            filter_zero_point=np.int8(-2), start_padding=(1, 1),
                            end_padding=(1, 1))
    run = compiled.data_runner()
    for n_threads in (1, 2, 2, 1):
        image = random_values(rng, image_shape, np.uint8)
        shifted = np.pad(image.astype(np.int64) - 3, ((0, 0), (0, 0), (1, 1), (1, 1)))
        weights = filter_.astype(np.int64) + 2
        want = np.zeros((1, 5, 9, 8), np.int64)
        for kh in range(3):
            for kw in range(3):
                want += np.einsum("oc,chw->ohw", weights[:, :, kh, kw],
                                  shifted[0, :, kh:kh + 9, kw:kw + 8])[None]
        got = run(n_threads, image)
        assert got.dtype == np.int32 and np.array_equal(got, want)
    assert compiled._binder.bound.fresh is not None


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_larger_convolution_matches(variant):
    """Many micro-tiles in both directions, and a K that is not a multiple of 4."""
    rng = np.random.default_rng(7)
    slots = dict(input=rng.integers(0, 256, (1, 13, 20, 19), dtype=np.uint8), input_scale=0.05,
                 input_zero_point=np.uint8(128),
                 filter=rng.integers(-128, 128, (70, 13, 3, 3), dtype=np.int8),
                 filter_scale=rng.uniform(0.001, 0.01, 70).astype(np.float32),
                 bias=rng.integers(-10000, 10000, 70, dtype=np.int32), output_scale=0.5,
                 output_zero_point=np.uint8(100))
    call = convolution.prepare(slots, dict(start_padding=(1, 1), end_padding=(1, 1)), "2_1")
    for n_threads in (1, 2):
        assert np.array_equal(run_variant(_native.run_convolution, call, variant, n_threads),
                              reference(call))



@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("in_type", TYPES)
@pytest.mark.parametrize("kernel", [(1, 1), (3, 3)])
def test_filters_deeper_than_a_block_of_k(variant, in_type, kernel, monkeypatch):
    """K = channels x filter taps over two of the variant's K blocks and a
    bit, the blocks ending inside a filter row's run of channels (3 x 3) or
    inside a pixel's channels (1 x 1); rows of A read where they lie (a
    multiple of 4 channels, whole groups) or packed (not), padding, 1 and 2
    threads."""
    monkeypatch.setattr(_native, "WORK_PER_THREAD", 1)
    taps = kernel[0] * kernel[1]
    block = _simd.module(variant).K_BLOCK
    rng = np.random.default_rng(block + taps)
    whole_groups = -(-(2 * block // taps + 12) // 4) * 4
    for channels in (whole_groups, whole_groups + 4, whole_groups + 1):
        assert channels * taps > 2 * block and block % (kernel[1] * channels) != 0
        slots = dict(input=random_values(rng, (1, channels, 7, 9), in_type), input_scale=0.05,
                     input_zero_point=random_values(rng, (), in_type),
                     filter=rng.integers(-128, 128, (20, channels) + kernel, dtype=np.int8),
                     filter_scale=rng.uniform(0.001, 0.01, 20).astype(np.float32),
                     bias=rng.integers(-10000, 10000, 20, dtype=np.int32),
                     output_scale=np.float32(3.0 * channels ** 0.5),
                     output_zero_point=np.uint8(100))
        call = convolution.prepare(slots, dict(start_padding=(1, 1), end_padding=(1, 1)), "4_0")
        expected = reference(call)
        for n_threads in (1, 2):
            assert np.array_equal(run_variant(_native.run_convolution, call, variant, n_threads),
                                  expected), (channels, n_threads)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("in_type", TYPES)
@pytest.mark.parametrize("channels, kernel, strides, dilations", [
    (8, (3, 3), (1, 1), (1, 1)), (4, (5, 3), (1, 1), (2, 1)), (64, (3, 3), (2, 2), (1, 1)),
    (3, (3, 3), (1, 1), (1, 1)), (128, (3, 3), (1, 1), (1, 1)), (64, (5, 5), (1, 1), (1, 1))])
def test_filter_rows_read_where_they_lie(variant, in_type, channels, kernel, strides, dilations,
                                         monkeypatch):
    """A block of output pixels read in the channels-last copy (which holds
    A', int8 images flipped) where it lies, a pass per filter row, where each
    filter row's run is whole groups of four (8 x 3, 4 x 3 and 64 x 3
    bytes), the blocks that cross an output row packed; packed throughout
    where the run is not whole groups (3 x 3 bytes).  With 128 channels K
    is two blocks of 1024 values where the variant's blocks are that long,
    the first ending inside a step; with 64 channels and a 5 x 5 filter the
    second block holds several runs (test_filters_deeper_than_a_block_of_k
    crosses the longer blocks).  Output
    rows of 17 and 9 pixels, padding, taller filters and dilation; 1 and 2
    threads."""
    monkeypatch.setattr(_native, "WORK_PER_THREAD", 1)
    rng = np.random.default_rng(channels)
    slots = dict(input=random_values(rng, (2, channels, 19, 17), in_type), input_scale=0.05,
                 input_zero_point=random_values(rng, (), in_type),
                 filter=rng.integers(-128, 128, (40, channels) + kernel, dtype=np.int8),
                 filter_scale=rng.uniform(0.001, 0.01, 40).astype(np.float32),
                 bias=rng.integers(-10000, 10000, 40, dtype=np.int32), output_scale=0.3,
                 output_zero_point=np.uint8(100))
    call = convolution.prepare(slots, dict(strides=strides, dilations=dilations,
                                           start_padding=(1, 1), end_padding=(1, 1)), "4_0")
    expected = reference(call)
    for n_threads in (1, 2):
        assert np.array_equal(run_variant(_native.run_convolution, call, variant, n_threads),
                              expected), n_threads


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("in_type", TYPES)
@pytest.mark.parametrize("strides, size", [((1, 1), 7), ((2, 2), 13), ((1, 1), 9)])
def test_one_by_one_on_small_images(variant, in_type, strides, size, monkeypatch):
    """1 x 1 convolutions on the implicit GEMM whose pixels end in a short
    block of rows: 49 pixels (a lone last pixel, which joins the unit
    above), read in place when the pixels are evenly spaced in the
    channels-last copy (stride 1) and packed when they are not (stride 2),
    and 81 pixels; two images, channels-first output through the
    transposed store, columns ending mid-block (150 output channels)."""
    monkeypatch.setattr(_native, "WORK_PER_THREAD", 1)
    rng = np.random.default_rng(size)
    slots = dict(input=random_values(rng, (2, 64, size, size), in_type), input_scale=0.05,
                 input_zero_point=random_values(rng, (), in_type),
                 filter=rng.integers(-128, 128, (150, 64, 1, 1), dtype=np.int8),
                 filter_scale=rng.uniform(0.001, 0.01, 150).astype(np.float32),
                 filter_zero_point=rng.integers(-5, 5, 150).astype(np.int8),
                 bias=rng.integers(-10000, 10000, 150, dtype=np.int32), output_scale=0.2,
                 output_zero_point=np.uint8(100))
    call = convolution.prepare(slots, dict(strides=strides), "2_1")
    expected = reference(call)
    for n_threads in (1, 2):
        assert np.array_equal(run_variant(_native.run_convolution, call, variant, n_threads),
                              expected), n_threads


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("in_type", TYPES)
@pytest.mark.parametrize("channels, size, kernel, padding", [
    (48, 7, 1, 0), (33, 5, 1, 0), (32, 13, 3, 1), (17, 3, 3, 2)])
def test_the_channels_last_copy_reads_nothing_past_the_image(variant, in_type, channels, size,
                                                             kernel, padding, monkeypatch):
    """The copy transposes 16 channels by 16 positions at a time and reads a
    short block of positions whole only where the image goes on after it:
    here the image ends where an unreadable page begins (a read past it
    faults), for the unpadded copy by blocks of positions (1 x 1) and the
    padded one by rows (3 x 3), widths that end in a short block, int8
    images (each byte flipped on the way), 1 and 2 threads."""
    monkeypatch.setattr(_native, "WORK_PER_THREAD", 1)
    rng = np.random.default_rng(channels + size)
    image = random_values(rng, (1, channels, size, size), in_type)
    ending = at_page_end(image)
    if ending is None:
        pytest.skip("no mmap with mprotect here")
    slots = dict(input=ending, input_scale=0.05,
                 input_zero_point=random_values(rng, (), in_type),
                 filter=rng.integers(-128, 128, (20, channels, kernel, kernel), dtype=np.int8),
                 filter_scale=np.float32(0.004), output_scale=0.2,
                 output_zero_point=np.uint8(100))
    call = convolution.prepare(slots, dict(start_padding=(padding, padding),
                                           end_padding=(padding, padding)), "2_1")
    expected = reference(call)
    for n_threads in (1, 2):
        assert np.array_equal(run_variant(_native.run_convolution, call, variant, n_threads),
                              expected), n_threads


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kernel, strides, padding", [
    ((7, 7), (2, 2), (3, 3)),
    # 60 filter rows of 21 values: K crosses a K block of every variant with
    # short runs on both sides of the boundary.
    ((60, 7), (1, 2), (0, 3)),
])
@pytest.mark.parametrize("input_type", [np.uint8, np.int8])
def test_first_convolution_shapes_match(variant, kernel, strides, padding, input_type):
    """Three channels, one group, undilated: the tight channels-last copy, whose
    filter rows are runs of 21 bytes, on a width that ends mid-tile; int8
    input is flipped in the copy, its padding the zero point."""
    rng = np.random.default_rng(5)
    height = 45 if kernel[0] == 7 else 64
    info = np.iinfo(input_type)
    slots = dict(input=rng.integers(info.min, info.max + 1, (2, 3, height, 45)).astype(input_type),
                 input_scale=0.05, input_zero_point=input_type(info.min + 131),
                 filter=rng.integers(-128, 128, (70, 3) + kernel, dtype=np.int8),
                 filter_scale=rng.uniform(0.001, 0.01, 70).astype(np.float32),
                 filter_zero_point=rng.integers(-5, 5, 70).astype(np.int8),
                 bias=rng.integers(-10000, 10000, 70, dtype=np.int32), output_scale=0.5,
                 output_zero_point=np.uint8(100))
    attributes = dict(strides=strides, start_padding=padding, end_padding=padding)
    call = convolution.prepare(slots, attributes, "2_1")
    assert _native.copies_unpadded(call.attributes, _native.filter_taps_per_run(slots["filter"]))
    for n_threads in (1, 2):
        assert np.array_equal(run_variant(_native.run_convolution, call, variant, n_threads),
                              reference(call))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("signed", [False, True])
def test_depthwise_with_a_channel_multiplier_and_wide_padding(variant, signed):
    """Two output channels per input channel, padding wider than the filter,
    stride 2 and dilation 3: every border case of the column ranges."""
    rng = np.random.default_rng(11)
    in_type = np.int8 if signed else np.uint8
    slots = dict(input=random_values(rng, (2, 3, 9, 10), in_type), input_scale=0.05,
                 input_zero_point=random_values(rng, (), in_type),
                 filter=random_values(rng, (6, 1, 3, 2), np.int8),
                 filter_scale=rng.uniform(0.01, 0.1, 6).astype(np.float32),
                 filter_zero_point=random_values(rng, (6,), np.int8),
                 bias=rng.integers(-2**31, 2**31 - 1, 6, dtype=np.int32), output_scale=0.3)
    attributes = dict(strides=(2, 2), dilations=(3, 3), start_padding=(4, 5), end_padding=(5, 4),
                      group_count=3)
    call = convolution.prepare(slots, attributes, "2_1")
    for n_threads in (1, 2):
        assert np.array_equal(run_variant(_native.run_depthwise, call, variant, n_threads),
                              reference(call))
    # Unequal strides take the row-by-row kernel.
    attributes["strides"] = (2, 1)
    call = convolution.prepare(slots, attributes, "2_1")
    for n_threads in (1, 2):
        assert np.array_equal(run_variant(_native.run_depthwise, call, variant, n_threads),
                              reference(call))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("channels, kernel", [(8200, 3), (70000, 1)])
def test_k_beyond_the_int32_chunk_is_exact(variant, channels, kernel):
    """K = channels * kernel**2 above 65536: whole filter taps per int32 chunk
    (8200 channels, 3 x 3), or one tap longer than a chunk (70000 channels)."""
    rng = np.random.default_rng(channels)
    slots = dict(input=np.full((1, channels, kernel + 1, kernel), 255, np.uint8),
                 input_scale=1.0,
                 filter=rng.integers(-128, 128, (3, channels, kernel, kernel), dtype=np.int8),
                 filter_scale=1.0, output_scale=float(2 ** 16),
                 output_zero_point=np.int8(0))
    slots["filter"][0] = -128  # the extreme sum 255 * -128 * K, past int32
    call = convolution.prepare(slots, dict(start_padding=(1, 0), end_padding=(0, 0)), "2_1")
    expected = reference(call)
    assert expected[0, 0].min() == -128  # saturated: the sum is not wrapped
    for n_threads in (1, 2):
        assert np.array_equal(run_variant(_native.run_convolution, call, variant, n_threads),
                              expected)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("signed", [False, True])
def test_filters_pack_as_their_rows_of_b(variant, signed):
    """A filter packed from its rows (a transpose, then runs of taps evenly
    apart, or groups gathered one by one) is B, row k tap taps[k] of every
    output channel, packed as a matrix's B is: the taps of a 3 x 3 filter a
    channel's step apart, a 1 x 1 filter's side by side, a first
    convolution's that cross its rows (3 channels), taps in no order, and
    K not a whole number of groups of 4; output channels that end in a
    partial panel, and groups; a filter whose last bytes end a readable
    page (no read past it)."""
    from qops.backends.native import gemm
    from qops.backends.native import variants as simd
    kernels = simd.module(variant)
    rng = np.random.default_rng(11)
    dtype = np.int8 if signed else np.uint8
    for shape, group_count, order in (((70, 13, 3, 3), 1, "fold 1"), ((64, 16, 3, 3), 1, "fold"),
                                      ((40, 48, 1, 1), 2, "fold 1"), ((65, 3, 7, 7), 1, "fold"),
                                      ((33, 5, 2, 3), 1, "shuffled"), ((18, 7, 1, 1), 3, "fold 1")):
        filter = random_values(rng, shape, dtype)
        rows = filter.view(np.uint8).reshape(shape[0], -1)
        if order == "shuffled":
            taps = rng.permutation(rows.shape[1]).astype(np.intp)
        else:
            taps_per_run = shape[3] if order == "fold" else 1
            taps = gemm.filter_taps(filter, taps_per_run)
        outputs = shape[0] // group_count
        b = np.stack([rows[g * outputs:(g + 1) * outputs, taps].T for g in range(group_count)])
        expected_packed, expected_colsum = kernels.pack_b_batches(np.ascontiguousarray(b),
                                                                  not signed, 1)
        paged = at_page_end(rows)
        for source in (rows, paged) if paged is not None else (rows,):
            for n_threads in (1, 2):
                packed, colsum = kernels.pack_filter(source, group_count, taps, not signed,
                                                     n_threads)
                assert np.array_equal(packed, expected_packed), (shape, order)
                assert np.array_equal(colsum[:, :outputs], expected_colsum[:, :outputs])
                assert not colsum[:, outputs:].any()


@pytest.mark.parametrize("variant", VARIANTS)
def test_plain_convolutions_in_turn_with_a_compiled_one(variant, monkeypatch):
    """Plain calls pack their filter into the thread's workspace, reused by
    the next: plain calls with different filters in turn, and a compiled
    operator between them (whose packed filter is its own), stay exact."""
    import qops
    from qops.backends.native import variants as simd
    monkeypatch.setattr(simd, "selected", lambda: variant)
    rng = np.random.default_rng(3)

    def slots_of(seed, kernel):
        generator = np.random.default_rng(seed)
        return dict(input=generator.integers(0, 256, (1, 16, 12, 12), dtype=np.uint8),
                    input_scale=np.float32(0.05), input_zero_point=np.uint8(128),
                    filter=generator.integers(-128, 128, (48, 16, kernel, kernel), dtype=np.int8),
                    filter_scale=np.float32(0.01), output_scale=np.float32(0.4),
                    output_zero_point=np.uint8(128))

    fixed = slots_of(100, 3)
    compiled = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", filter=fixed["filter"],
                            filter_scale=fixed["filter_scale"], start_padding=(1, 1),
                            end_padding=(1, 1))
    runtime = {name: value for name, value in fixed.items()
               if name not in ("filter", "filter_scale")}
    expected_fixed = reference(convolution.prepare(
        fixed, dict(start_padding=(1, 1), end_padding=(1, 1)), "4_0"))
    for turn in range(6):
        kernel = (1, 3)[turn % 2]
        slots = slots_of(int(rng.integers(1 << 30)), kernel)
        pad = kernel // 2
        attributes = dict(start_padding=(pad, pad), end_padding=(pad, pad))
        call = convolution.prepare(slots, attributes, "4_0")
        got = run_variant(_native.run_convolution, call, variant, 1)
        assert np.array_equal(got, reference(call)), turn
        assert np.array_equal(compiled(**runtime), expected_fixed), turn


@pytest.mark.parametrize("variant", VARIANTS)
def test_conv2d_refuses_taps_past_the_row(variant):
    """The entry point checks the geometry it is handed: with a width of 4 and
    a 3-wide filter of dilation 2 at stride 2, no output column fits, and a
    claimed one would read past the channels-last copy."""
    from qops.backends.native import variants as _simd
    kernels = _simd.module(variant)
    image = np.full((1, 4, 2, 4), 7, np.uint8)
    filter = np.ones((4, 4, 1, 3), np.uint8)
    packed, colsum = _native.pack_filter(filter, 1, 1, kernels)
    out = np.zeros((1, 4, 2), np.uint8)
    with pytest.raises(ValueError, match="geometry"):
        kernels.conv2d(image, False, 0, packed, colsum, 1, 3, 1, (1, 2), (1, 2), (0, 0), (0, 0),
                       np.zeros(4, np.int32), np.full(4, 0.01, np.float32),
                       np.zeros(4, np.int32), None, out, 0, 255, 1)


def assert_every_variant_exact(run, call, n_threads):
    """``run`` on every variant gives the reference's output, bit for bit."""
    expected = reference(call)
    for variant in VARIANTS:
        assert np.array_equal(run_variant(run, call, variant, n_threads), expected), variant


@st.composite
def depthwise_calls(draw):
    """Depthwise convolutions on planes wide and tall enough for several
    blocks of outputs per row and several groups of four output rows (the
    pair kernels' units), with every border case of the padding."""
    channels = draw(st.integers(1, 3))
    per_channel = draw(st.integers(1, 2))
    out_channels = channels * per_channel
    kernel = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    strides = (draw(st.integers(1, 3)), draw(st.sampled_from((1, 1, 2, 2, 3))))
    dilations = (draw(st.integers(1, 2)), draw(st.sampled_from((1, 1, 2, 3))))
    start = (draw(st.integers(0, 3)), draw(st.integers(0, 40)))
    end = (draw(st.integers(0, 3)), draw(st.integers(0, 3)))
    span = [d * (k - 1) + 1 for d, k in zip(dilations, kernel)]
    height = draw(st.integers(max(1, span[0] - start[0] - end[0]), 20))
    width = draw(st.integers(max(1, span[1] - start[1] - end[1]), 100))
    batch = draw(st.integers(1, 2))
    in_type, filter_type, out_type = (draw(st.sampled_from(TYPES)) for _ in range(3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    channel_shape = (out_channels,) if draw(st.booleans()) else ()
    return _convolution_call(draw, rng, (batch, channels, height, width),
                             (out_channels, 1) + kernel, (in_type, filter_type, out_type),
                             channel_shape, dict(strides=strides, dilations=dilations,
                                                 start_padding=start, end_padding=end,
                                                 group_count=channels))


@pytest.mark.parametrize("n_threads", [1, 2])
@settings(max_examples=80, deadline=None)
@given(call=depthwise_calls())
def test_depthwise_on_wide_planes_matches_the_reference(call, n_threads):
    assert_every_variant_exact(_native.run_depthwise, call, n_threads)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_mobilenet_shapes_match(variant, stride):
    """The benchmark's layers (3 x 3, pad 1), with fewer channels: rows of
    several output blocks, a last group of rows past the plane's end (55 and
    28 output rows), saturating outputs."""
    rng = np.random.default_rng(stride)
    size = 110 if stride == 2 else 55
    slots = dict(input=rng.integers(0, 256, (1, 5, size, size), dtype=np.uint8),
                 input_scale=0.02, input_zero_point=np.uint8(128),
                 filter=rng.integers(-128, 128, (5, 1, 3, 3), dtype=np.int8),
                 filter_scale=rng.uniform(0.001, 0.01, 5).astype(np.float32),
                 bias=rng.integers(-5000, 5000, 5, dtype=np.int32), output_scale=0.05,
                 output_zero_point=np.uint8(128))
    attributes = dict(strides=(stride, stride), start_padding=(1, 1), end_padding=(1, 1),
                      group_count=5)
    call = convolution.prepare(slots, attributes, "2_1")
    expected = reference(call)
    assert 0 < np.count_nonzero(expected == 255) < expected.size
    for n_threads in (1, 2):
        assert np.array_equal(run_variant(_native.run_depthwise, call, variant, n_threads),
                              expected)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("out_w", [1, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 40, 47, 48, 49])
def test_depthwise_row_widths(variant, stride, out_w):
    """Rows of every width around the 16-output blocks: a row's last block
    ends at its last output (overlapping the block before it) from 16
    outputs up, and is stored short below; no output is written twice
    with different values, none outside the row."""
    rng = np.random.default_rng(out_w * 10 + stride)
    width = stride * (out_w - 1) + 1
    slots = dict(input=rng.integers(0, 256, (1, 3, 9, width), dtype=np.uint8),
                 input_scale=np.float32(0.02), input_zero_point=np.uint8(120),
                 filter=rng.integers(-128, 128, (3, 1, 3, 3), dtype=np.int8),
                 filter_scale=rng.uniform(0.001, 0.01, 3).astype(np.float32),
                 bias=rng.integers(-5000, 5000, 3, dtype=np.int32),
                 output_scale=np.float32(0.05), output_zero_point=np.uint8(128))
    attributes = dict(strides=(stride, stride), start_padding=(1, 1), end_padding=(1, 1),
                      group_count=3)
    call = convolution.prepare(slots, attributes, "2_1")
    expected = reference(call)
    assert expected.shape[-1] == out_w
    for n_threads in (1, 2):
        assert np.array_equal(run_variant(_native.run_depthwise, call, variant, n_threads),
                              expected)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("strides, dilations", [
    ((1, 1), (1, 1)), ((2, 2), (1, 1)), ((1, 2), (1, 1)), ((2, 1), (1, 1)),
    # Not the unrolled 3 x 3 loops: the generic pair loop.
    ((1, 1), (2, 1)), ((3, 1), (1, 1)), ((1, 1), (1, 2)),
])
@pytest.mark.parametrize("output_scale", [
    0.05,   # values across the range
    1e-5,   # most values saturate, the scaled sums still far inside int32
    1e-9,   # scaled sums beyond int32: only a clamp before the conversion is exact
])
@pytest.mark.parametrize("out_type", [np.uint8, np.int8])
def test_depthwise_3x3_forms_and_saturation(variant, strides, dilations, output_scale, out_type):
    """3 x 3 depthwise filters at the strides and dilations that pick each
    loop and store of the pair kernels, on planes with a partial last block
    and a partial last group of rows, with outputs in range, saturating at
    both ends, and scaled past int32."""
    rng = np.random.default_rng(hash((strides, dilations)) % 2**32)
    out_zero = np.array(-3 if out_type == np.int8 else 117, out_type)
    slots = dict(input=rng.integers(0, 256, (2, 4, 23, 41), dtype=np.uint8),
                 input_scale=np.float32(0.02), input_zero_point=np.uint8(120),
                 filter=rng.integers(-128, 128, (4, 1, 3, 3), dtype=np.int8),
                 filter_scale=rng.uniform(0.001, 0.01, 4).astype(np.float32),
                 bias=rng.integers(-50000, 50000, 4, dtype=np.int32),
                 output_scale=np.float32(output_scale), output_zero_point=out_zero)
    attributes = dict(strides=strides, dilations=dilations, start_padding=(1, 1),
                      end_padding=(1, 1), group_count=4)
    call = convolution.prepare(slots, attributes, "2_1")
    expected = reference(call)
    low, high = np.iinfo(out_type).min, np.iinfo(out_type).max
    if output_scale < 0.01:
        assert np.count_nonzero(expected == low) and np.count_nonzero(expected == high)
    else:
        assert np.count_nonzero((expected > low) & (expected < high)) > expected.size // 2
    for n_threads in (1, 2):
        assert np.array_equal(run_variant(_native.run_depthwise, call, variant, n_threads),
                              expected)


def _depthwise_call(seed, size=20, channels=6):
    rng = np.random.default_rng(seed)
    slots = dict(input=rng.integers(0, 256, (2, channels, size, size), dtype=np.uint8),
                 input_scale=0.02, input_zero_point=np.uint8(100),
                 filter=rng.integers(-128, 128, (channels, 1, 3, 3), dtype=np.int8),
                 filter_scale=rng.uniform(0.001, 0.01, channels).astype(np.float32),
                 bias=rng.integers(-5000, 5000, channels, dtype=np.int32), output_scale=0.05,
                 output_zero_point=np.uint8(128))
    attributes = dict(strides=(1, 1), start_padding=(1, 1), end_padding=(1, 1),
                      group_count=channels)
    return convolution.prepare(slots, attributes, "2_1")


@pytest.mark.parametrize("variant", VARIANTS)
def test_depthwise_calls_from_several_threads_at_once(variant):
    """The depthwise task pool runs one call's tasks at a time; calls that find
    it busy run their tasks themselves.  Either way every result is exact."""
    import concurrent.futures
    calls = [_depthwise_call(seed) for seed in range(6)]
    expected = [reference(call) for call in calls]

    def work(i):
        return all(np.array_equal(run_variant(_native.run_depthwise, calls[i % 6], variant,
                                              1 + i % 3), expected[i % 6])
                   for _ in range(20))

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(12)))


def test_depthwise_in_a_forked_child():
    """A child forked after the pool's threads started has none of them: its
    calls start the pool afresh."""
    import os
    variant = VARIANTS[0]
    call = _depthwise_call(9)
    expected = reference(call)
    assert np.array_equal(run_variant(_native.run_depthwise, call, variant, 2), expected)
    child = os.fork()
    if child == 0:  # the child: report whether its result is exact, by exit status
        same = False
        try:
            same = np.array_equal(run_variant(_native.run_depthwise, call, variant, 2), expected)
        finally:
            os._exit(0 if same else 1)
    import signal
    import time
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(child, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            pytest.fail("the forked child's call did not finish")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0


@st.composite
def pointwise_calls(draw):
    """1 x 1 convolutions of one group without padding or strides: the
    filter x image products, with channels across a K group and K blocks (of
    1024 and of 3072 k), pixels across whole and partial micro-tile
    columns."""
    channels = draw(st.sampled_from((1, 3, 4, 5, 16, 17, 40, 1100, 3100)))
    out_channels = draw(st.integers(1, 40))
    strides = (1, 1)
    height, width = draw(st.integers(1, 12)), draw(st.integers(1, 40))
    batch = draw(st.integers(1, 3))
    in_type, filter_type, out_type = (draw(st.sampled_from(TYPES)) for _ in range(3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    channel_shape = (out_channels,) if draw(st.booleans()) else ()
    return _convolution_call(draw, rng, (batch, channels, height, width),
                             (out_channels, channels, 1, 1), (in_type, filter_type, out_type),
                             channel_shape, dict(strides=strides))


@pytest.mark.parametrize("n_threads", [1, 2])
@settings(max_examples=60, deadline=None)
@given(call=pointwise_calls())
def test_pointwise_matches_the_reference(call, n_threads):
    assert_every_variant_exact(_native.run_pointwise, call, n_threads)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("channels", [37, 64])
def test_pointwise_compiled_keeps_the_filter_row_sums(variant, channels, monkeypatch):
    """A compiled 1 x 1 convolution keeps its filter's row sums (asked for
    by an input zero point) and its int8 filter as A' (read in place when
    the channels are a whole number of groups of 4: 64) and reuses them;
    calls with another input zero point and other images stay exact."""
    import qops
    from qops.backends.native import variants as simd
    monkeypatch.setattr(simd, "selected", lambda: variant)
    rng = np.random.default_rng(5)
    filter = rng.integers(-128, 128, (24, channels, 1, 1), dtype=np.int8)
    constants = dict(filter=filter, filter_scale=rng.uniform(0.01, 0.1, 24).astype(np.float32),
                     filter_zero_point=rng.integers(-128, 128, 24, dtype=np.int8),
                     bias=rng.integers(-5000, 5000, 24, dtype=np.int32))
    compiled = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", **constants)
    for seed, input_zero in ((1, 128), (2, 0), (3, 255)):
        slots = dict(input=random_values(np.random.default_rng(seed), (2, channels, 9, 14),
                                         np.uint8),
                     input_scale=np.float32(0.05), input_zero_point=np.uint8(input_zero),
                     output_scale=np.float32(0.7), output_zero_point=np.uint8(9))
        call = convolution.prepare(dict(slots, **constants), {}, "2_1")
        for n_threads in (1, 2):
            assert np.array_equal(compiled(**slots, n_threads=n_threads), reference(call))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("out_type", TYPES)
@pytest.mark.parametrize("filter_zero", ["one", "per channel"])
@pytest.mark.parametrize("case", ["below", "at", "past", "bias past"])
def test_the_pointwise_epilogue_holds_to_its_bound(variant, out_type, filter_zero, case,
                                                   monkeypatch):
    """The per-row epilogue of a filter x image product (each output
    channel's own multiplier) at the bound it reasons with, K * 255 * 255
    plus the row's |bias| (times its multiplier) against 2**30: uint8 filter
    rows of 0 against one zero point of 255 (-255, which makes the
    epilogue's once-per-tile product of that zero point with the pixels'
    sums carry the value), or of 255 against 0 and of 0 against 200 (per
    channel), times pixels of 255.  The multipliers reach 0.5 ("below"),
    0.999 ("at": the packs clamp, the product rounding to 2**30 at most) or
    2.5 ("past", where each tile's first row has 0.3 of it, under 1) times
    2**30 over the bound; with "bias past" the sums reach
    0.999 of it and a bias of 1.2 times the bound, of their sign, takes the
    values past 2**31, where an unclamped conversion gives its invalid
    value.  Thirteen rows: the last micro-tile has rows past M.  Against the rule
    in NumPy and the reference."""
    depth, out_channels = 64, 13
    rng = np.random.default_rng([7, len(case), out_type == np.int8])
    filter = np.zeros((out_channels, depth, 1, 1), np.uint8)
    filter_zero_point = np.zeros(out_channels, np.uint8)
    if filter_zero == "one":
        filter[1::2] = 255                     # rows of 255 - 255 = 0, 0 - 255 = -255
        filter_zero_point[:] = 255
    else:
        filter[::2] = 255                      # rows of 255 - 0
        filter_zero_point[1::4] = 200          # rows of 0 - 200
    image = np.full((1, depth, 8, 16), 255, np.uint8)
    image[..., ::5] = 0                        # pixels that sum to 0
    sums = np.einsum("ok,kp->op", filter[:, :, 0, 0].astype(np.int64)
                     - filter_zero_point[:, None].astype(np.int64),
                     image[0].reshape(depth, -1).astype(np.int64))
    bound = depth * 255.0 * 255.0
    reach = {"below": 0.5, "at": 0.999, "past": 2.5, "bias past": 0.999}[case]
    # Each micro-tile's first row has 0.3 of the multiplier, so that a bound
    # taken from it alone would leave the others to the packs.
    tile_rows, _ = _simd.module(variant).tile_shape()
    tile_first = np.arange(out_channels) % tile_rows == 0
    multiplier = (np.where(tile_first, 0.3, 1.0) * reach * 2.0**30 / bound).astype(np.float32)
    bias = np.zeros(out_channels, np.int32)
    if case == "bias past":
        bias[:] = (-1 if filter_zero == "one" else 1) * int(1.2 * bound)
    out_zero = random_values(rng, (), out_type)
    slots = dict(input=image, input_scale=np.float32(1.0), input_zero_point=np.uint8(0),
                 filter=filter, filter_scale=multiplier,
                 filter_zero_point=(filter_zero_point if filter_zero == "per channel"
                                    else np.uint8(255)),
                 bias=bias, output_scale=np.float32(1.0), output_zero_point=out_zero)
    call = convolution.prepare(slots, {}, "4_0")
    assert _native.is_pointwise(call)
    scaled = (sums + bias[:, None]).astype(np.float32) * multiplier[:, None]
    info = np.iinfo(out_type)
    expected = np.clip(np.rint(scaled.astype(np.float64)) + int(out_zero), info.min,
                       info.max).reshape(call.output_shape)
    assert np.abs(scaled).max() >= {"below": 0.49, "at": 0.99, "past": 2.45,
                                    "bias past": 2.1}[case] * 2.0**30
    assert np.array_equal(reference(call).astype(np.int64), expected)
    for n_threads in (1, 2):
        got = run_variant(_native.run_pointwise, call, variant, n_threads)
        assert np.array_equal(got.astype(np.int64), expected)
    # Compiled, the product keeps its rows' epilogue terms from call to call.
    import qops
    monkeypatch.setattr(_simd, "selected", lambda: variant)
    constants = {name: slots[name] for name in ("filter", "filter_scale", "filter_zero_point",
                                                "bias")}
    compiled = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", **constants)
    runtime = {name: value for name, value in slots.items() if name not in constants}
    for n_threads in (1, 2, 1):
        got = compiled(**runtime, n_threads=n_threads)
        assert np.array_equal(got.astype(np.int64), expected)


@pytest.mark.parametrize("variant", VARIANTS)
@settings(max_examples=25, deadline=None)
@given(out_channels=st.integers(1, 110), channels=st.sampled_from((1, 3, 16, 37, 64)),
       per_channel_zero=st.booleans(), out_type=st.sampled_from(TYPES),
       input_zeros=st.lists(st.integers(0, 255), min_size=2, max_size=2),
       batch=st.integers(1, 2), seed=st.integers(0, 2**32 - 1))
def test_compiled_pointwise_rows_keep_their_terms_call_after_call(
        variant, out_channels, channels, per_channel_zero, out_type, input_zeros, batch, seed):
    """A compiled 1 x 1 convolution (filter x image) makes its rows' epilogue
    terms once: output channels across partial and whole micro-tiles and
    several units of rows, per-channel scales, zero points and biases,
    calls with other images and input zero points, every thread count: the
    reference's bytes."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_simd, "selected", lambda: variant)
        _compiled_pointwise_against_the_reference(out_channels, channels, per_channel_zero,
                                                  out_type, input_zeros, batch, seed)


def _compiled_pointwise_against_the_reference(out_channels, channels, per_channel_zero,
                                              out_type, input_zeros, batch, seed):
    import qops
    rng = np.random.default_rng(seed)
    constants = dict(
        filter=random_values(rng, (out_channels, channels, 1, 1), np.int8),
        filter_scale=rng.uniform(0.001, 0.05, out_channels).astype(np.float32),
        filter_zero_point=(random_values(rng, (out_channels,), np.int8) if per_channel_zero
                           else np.int8(rng.integers(-128, 128))),
        bias=rng.integers(-3000, 3000, out_channels).astype(np.int32))
    compiled = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", **constants)
    for input_zero in input_zeros:
        slots = dict(input=random_values(rng, (batch, channels, 8, 16), np.uint8),
                     input_scale=np.float32(0.04), input_zero_point=np.uint8(input_zero),
                     output_scale=np.float32(0.3), output_zero_point=random_values(rng, (),
                                                                                   out_type))
        call = convolution.prepare(dict(slots, **constants), {}, "4_0")
        assert _native.is_pointwise(call)
        want = reference(call)
        for n_threads in (2, 1):
            assert np.array_equal(compiled(**slots, n_threads=n_threads), want)


@st.composite
def pixel_rows_calls(draw):
    """1 x 1 convolutions of one group whose images are single pixels (a
    Gemm's rows as images): one to five of them (the product's short rows,
    the narrowed panels' one or two), channels across K groups and blocks,
    a stride that changes nothing."""
    batch = draw(st.integers(1, 5))
    channels = draw(st.sampled_from((1, 3, 4, 17, 64, 1100)))
    out_channels = draw(st.integers(1, 70))
    types = tuple(draw(st.sampled_from(TYPES)) for _ in range(3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    channel_shape = (out_channels,) if draw(st.booleans()) else ()
    return _convolution_call(draw, rng, (batch, channels, 1, 1), (out_channels, channels, 1, 1),
                             types, channel_shape, dict(strides=(draw(st.integers(1, 3)),) * 2))


@pytest.mark.parametrize("n_threads", [1, 2])
@settings(max_examples=60, deadline=None)
@given(call=pixel_rows_calls())
def test_one_pixel_images_take_the_product_and_match_the_reference(call, n_threads):
    """Every variant gives the reference's bytes, the filter's biases added
    to their columns; the dispatcher picks this form."""
    assert _native.is_pixel_rows(call)
    assert _dispatch.select(call).name == "pixel rows kernels"
    assert_every_variant_exact(_native.run_pixel_rows, call, n_threads)


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_compiled_classifier_of_one_pixel_images_keeps_its_packed_filter(variant,
                                                                           monkeypatch):
    """Compiled, the filter is packed (and narrowed) once; images of one and
    of three rows, every thread count: the reference's bytes."""
    import qops
    monkeypatch.setattr(_simd, "selected", lambda: variant)
    rng = np.random.default_rng(11)
    constants = dict(filter=random_values(rng, (1000, 1280, 1, 1), np.int8),
                     filter_scale=rng.uniform(0.001, 0.01, 1000).astype(np.float32),
                     bias=rng.integers(-20000, 20000, 1000).astype(np.int32),
                     input_scale=np.float32(0.03), input_zero_point=np.uint8(7),
                     output_scale=np.float32(0.2), output_zero_point=np.uint8(120))
    compiled = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", **constants)
    for batch in (1, 3, 1):
        image = random_values(rng, (batch, 1280, 1, 1), np.uint8)
        call = convolution.prepare(dict(constants, input=image), {}, "4_0")
        want = reference(call)
        for n_threads in (1, 2):
            assert np.array_equal(compiled(image, n_threads=n_threads), want)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("image_shape, form", [((1, 24, 12, 16), "pointwise kernels"),
                                               ((2, 24, 12, 16), "pointwise kernels"),
                                               ((3, 40, 1, 1), "pixel rows kernels")])
def test_a_fully_bound_convolution_makes_each_output_in_the_kernels(variant, image_shape, form,
                                                                    monkeypatch):
    """A compiled 1 x 1 convolution with every slot but the image bound (a
    session's node), as filter x image and as one-pixel images' rows: once
    bound, each call's output is made by the bound product itself, and is
    the reference's bytes; a strided image of the same shape takes the
    general run and gives the reference's bytes too."""
    import qops
    monkeypatch.setattr(_simd, "selected", lambda: variant)
    rng = np.random.default_rng(12)
    channels, out_channels = image_shape[1], 37
    constants = dict(filter=random_values(rng, (out_channels, channels, 1, 1), np.int8),
                     filter_scale=rng.uniform(0.001, 0.02, out_channels).astype(np.float32),
                     filter_zero_point=np.int8(3),
                     bias=rng.integers(-2000, 2000, out_channels).astype(np.int32),
                     input_scale=np.float32(0.03), input_zero_point=np.uint8(9),
                     output_scale=np.float32(0.2), output_zero_point=np.int8(-4))
    compiled = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", **constants)
    run = compiled.data_runner()
    made = []
    for index, n_threads in enumerate((1, 2, 2, 1)):
        if index == 2:  # bound by the two calls before: count what the kernels make
            record_bound_outputs(compiled, made)
        image = random_values(rng, image_shape, np.uint8)
        if index == 3:
            image = random_values(rng, image_shape[:3] + (2 * image_shape[3],),
                                  np.uint8)[..., ::2]
        call = convolution.prepare(dict(constants, input=image), {}, "4_0")
        assert _dispatch.select(call).name == form
        got = run(n_threads, image)
        assert got.dtype == np.int8 and np.array_equal(got, reference(call))
    # The third call's output made by the kernels; the strided image refused.
    assert len(made) == 2 and made[0] is not None and made[1] is None


@pytest.mark.parametrize("variant", VARIANTS)
@settings(max_examples=20, deadline=None)
@given(channels=st.sampled_from((100, 128, 130, 192, 576)), size=st.integers(1, 16),
       batch=st.integers(1, 2),
       kernel=st.sampled_from((1, 3, 5)), stride=st.integers(1, 2), padded=st.booleans(),
       types=st.tuples(st.sampled_from(TYPES), st.sampled_from(TYPES), st.sampled_from(TYPES)),
       per_channel_zero=st.booleans(), with_bias=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_a_fully_bound_depthwise_convolution_lays_its_filter_once(
        variant, channels, size, batch, kernel, stride, padded, types, per_channel_zero,
        with_bias, seed):
    """A compiled depthwise convolution with every slot but the image bound:
    where the kernels take its images channels-last (two blocks of channels
    at least, small images) each block's weights and terms are laid once
    and each call's output made by the bound kernel; every call, whichever
    path, gives the reference's bytes, a strided image too."""
    import qops
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_simd, "selected", lambda: variant)
        rng = np.random.default_rng(seed)
        image_type, filter_type, out_type = types
        pad = (kernel // 2,) * 2 if padded else (0, 0)
        if size + 2 * pad[0] < kernel:
            return
        constants = dict(
            filter=random_values(rng, (channels, 1, kernel, kernel), filter_type),
            filter_scale=rng.uniform(0.001, 0.02, channels).astype(np.float32),
            filter_zero_point=(random_values(rng, (channels,), filter_type) if per_channel_zero
                               else random_values(rng, (), filter_type)),
            bias=(rng.integers(-3000, 3000, channels).astype(np.int32) if with_bias
                  else None),
            input_scale=np.float32(0.03), input_zero_point=random_values(rng, (), image_type),
            output_scale=np.float32(0.1), output_zero_point=random_values(rng, (), out_type))
        attributes = dict(strides=(stride, stride), start_padding=pad, end_padding=pad,
                          group_count=channels)
        compiled = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", **constants, **attributes)
        run = compiled.data_runner()
        made = []
        for index, n_threads in enumerate((1, 2, 2, 1)):
            if index == 2:  # bound by the two calls before
                fresh = record_bound_outputs(compiled, made)
            image = random_values(rng, (batch, channels, size, size), image_type)
            if index == 3:
                image = random_values(rng, (batch, channels, size, 2 * size),
                                      image_type)[..., ::2]
            want = reference(convolution.prepare(dict(constants, input=image), attributes,
                                                 "4_0"))
            got = run(n_threads, image)
            assert got.dtype == want.dtype and np.array_equal(got, want)
        takes = channels >= 128 and (size + 2 * pad[0]) ** 2 <= 400
        if takes:
            # The third call's output made by the kernels; the strided image
            # refused unless it has one value a row (then it is contiguous).
            assert len(made) == 2 and made[0] is not None
            assert (made[1] is None) == (not image.flags.c_contiguous)
        else:
            assert made == []


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_bound_convolution_runs_in_several_threads_at_once(variant, monkeypatch):
    """One compiled convolution of each bound form (implicit GEMM, filter x
    image, channels-last depthwise), called from four Python threads at
    once, each with images of its own: every output the reference's."""
    import qops
    from conftest import run_in_threads
    monkeypatch.setattr(_simd, "selected", lambda: variant)
    rng = np.random.default_rng(31)
    forms = []
    for filter_shape, image_shape, groups, pad in (((24, 20, 3, 3), (2, 20, 10, 10), 1, 1),
                                                   ((48, 24, 1, 1), (1, 24, 8, 16), 1, 0),
                                                   ((130, 1, 3, 3), (2, 130, 7, 7), 130, 1)):
        constants = dict(filter=random_values(rng, filter_shape, np.int8),
                         filter_scale=np.float32(0.01), filter_zero_point=np.int8(1),
                         bias=rng.integers(-500, 500, filter_shape[0]).astype(np.int32),
                         input_scale=np.float32(0.05), input_zero_point=np.uint8(4),
                         output_scale=np.float32(0.4), output_zero_point=np.uint8(10))
        attributes = dict(group_count=groups, start_padding=(pad, pad), end_padding=(pad, pad))
        compiled = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", **constants, **attributes)
        run = compiled.data_runner()
        images = [random_values(rng, image_shape, np.uint8) for _ in range(4)]
        wants = [reference(convolution.prepare(dict(constants, input=image), attributes, "4_0"))
                 for image in images]
        for image in images[:2]:
            run(2, image)
        assert compiled._binder.bound.fresh is not None
        forms.append((run, images, wants))
    failures = []

    def work(index):
        for _ in range(15):
            for run, images, wants in forms:
                if not np.array_equal(run(2, images[index]), wants[index]):
                    failures.append(index)

    run_in_threads(work, 4)
    assert failures == []


def test_pointwise_products_take_the_pointwise_kernels():
    """A 1 x 1 convolution whose pixels fill the micro-tile's columns runs as
    filter x image; padding, strides, groups or a wider filter keep the
    implicit GEMM."""
    rng = np.random.default_rng(3)

    def call(filter_shape, **attributes):
        slots = dict(input=random_values(rng, (1, 4, 16, 16), np.uint8),
                     input_scale=0.1, filter=random_values(rng, filter_shape, np.int8),
                     filter_scale=0.1, output_scale=1.0)
        return convolution.prepare(slots, attributes, "2_1")

    assert _native.is_pointwise(call((8, 4, 1, 1)))
    assert not _native.is_pointwise(call((8, 4, 1, 1), start_padding=(1, 0)))
    assert not _native.is_pointwise(call((8, 4, 1, 1), strides=(2, 1)))
    assert not _native.is_pointwise(call((8, 2, 1, 1), group_count=2))
    assert not _native.is_pointwise(call((8, 4, 1, 3)))


@st.composite
def small_depthwise_calls(draw):
    """Depthwise convolutions the channels-last kernel takes: 128 channels or
    more (whole and partial blocks of 64, partial groups of 16), images of
    at most 256 outputs and 400 padded pixels, any kernel, stride, dilation
    and padding, every type, zero points, biases and per-channel scales."""
    channels = draw(st.sampled_from((128, 136, 200, 257)))
    kernel = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilations = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    start = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    end = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    span = [d * (k - 1) + 1 for d, k in zip(dilations, kernel)]
    height = draw(st.integers(max(1, span[0] - start[0] - end[0]), 16))
    width = draw(st.integers(max(1, span[1] - start[1] - end[1]), 16))
    types = tuple(draw(st.sampled_from(TYPES)) for _ in range(3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return _convolution_call(draw, rng, (draw(st.integers(1, 2)), channels, height, width),
                             (channels, 1) + kernel, types, (channels,),
                             dict(strides=strides, dilations=dilations, start_padding=start,
                                  end_padding=end, group_count=channels))


@pytest.mark.parametrize("n_threads", [1, 2])
@settings(max_examples=40, deadline=None)
@given(call=small_depthwise_calls())
def test_depthwise_on_small_images_channels_last_matches_the_reference(call, n_threads):
    """The channels-last kernel of small images (copies transposed 16 x 16,
    taps in pairs or one at a time, sums across channel lanes), on every
    variant, equals the reference bit for bit."""
    assert_every_variant_exact(_native.run_depthwise, call, n_threads)


@pytest.mark.parametrize("variant", VARIANTS)
@settings(max_examples=25, deadline=None)
@given(slots_and_attributes=conv_slots(), seed=st.integers(0, 2**32 - 1),
       layouts=st.sampled_from([(True, True), (True, False), (False, True)]))
def test_a_compiled_convolution_takes_and_makes_channels_last_tensors(
        variant, slots_and_attributes, seed, layouts):
    """A session's convolution on images or outputs kept (N, H, W, C): the
    reference's values in that layout, on the implicit GEMM's copy and
    stores (or the pixels' product) wherever the channels-first call runs on
    the GEMM kernels, an image whose last byte ends its page included."""
    slots, attributes = slots_and_attributes
    input_channels_last, output_channels_last = layouts
    rng = np.random.default_rng(seed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_simd, "selected", lambda: variant)
        compiled = _fully_bound(slots, attributes)
        run = compiled.channels_last_runner(input_channels_last, output_channels_last)
        shape, dtype = slots["input"].shape, slots["input"].dtype
        for n_threads in (1, 2, 1):
            image = random_values(rng, shape, dtype)
            call = convolution.prepare(dict(slots, input=image), attributes, "2_1")
            expected = reference(call)
            given = np.ascontiguousarray(image.transpose(0, 2, 3, 1)) if input_channels_last \
                else image
            moved = at_page_end(given)
            got = run(n_threads, given if moved is None else moved)
            if output_channels_last:
                assert got.shape == expected.shape[:1] + expected.shape[2:] + expected.shape[1:2]
                got = got.transpose(0, 3, 1, 2)
            assert got.dtype == expected.dtype and np.array_equal(got, expected)
        # The GEMM kernels take every such call; the depthwise kernel, small
        # images of two blocks of channels or more.
        on_kernels = compiled._bound_channels_last(given.dtype, given.shape,
                                                   input_channels_last,
                                                   output_channels_last) is not None
        assert on_kernels == (_dispatch.select(call).name != "depthwise kernels"
                              or compiled.takes_channels_last(shape, dtype))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("in_type", TYPES)
@pytest.mark.parametrize("channels, size, kernel, stride", [
    (128, 14, 3, 1), (130, 7, 3, 1), (200, 14, 3, 2), (136, 9, 5, 1), (128, 28, 3, 2),
    (160, 29, 3, 2), (136, 23, 5, 2), (128, 40, 3, 1), (96, 14, 3, 1)])
@pytest.mark.parametrize("layouts", [(True, True), (True, False), (False, True)])
def test_a_depthwise_convolution_runs_channels_last_tensors(
        variant, in_type, channels, size, kernel, stride, layouts, monkeypatch):
    """The channels-last depthwise kernel reads each block's channels from a
    (N, H, W, C) image and writes them into a (N, OH, OW, C) output: the
    reference's values (a last block of fewer than 64 channels included).
    An image of at most 256 outputs too large for one task's copy goes in
    bands of output rows, each copying the padded rows it reads (28 x 28 at
    stride 2 in bands of six rows, 29 x 29 and a 5 x 5 filter over 23 x 23);
    a convolution of more outputs (40 x 40) or fewer than two blocks of
    channels is not taken, and its images go through the operator
    transposed."""
    monkeypatch.setattr(_simd, "selected", lambda: variant)
    rng = np.random.default_rng(channels + size)
    pad = kernel // 2
    slots = dict(input=random_values(rng, (2, channels, size, size), in_type),
                 input_scale=np.float32(0.05), input_zero_point=random_values(rng, (), in_type),
                 filter=random_values(rng, (channels, 1, kernel, kernel), np.int8),
                 filter_scale=rng.uniform(0.01, 0.1, channels).astype(np.float32),
                 filter_zero_point=random_values(rng, (channels,), np.int8),
                 bias=rng.integers(-5000, 5000, channels).astype(np.int32),
                 output_scale=np.float32(rng.uniform(0.2, 3.0)),
                 output_zero_point=random_values(rng, (), in_type))
    attributes = dict(strides=(stride, stride), dilations=(1, 1), start_padding=(pad, pad),
                      end_padding=(pad, pad), group_count=channels)
    compiled = _fully_bound(slots, attributes)
    out_size = (size - 1) // stride + 1
    assert compiled.takes_channels_last((2, channels, size, size)) == (
        channels >= 128 and out_size * out_size <= 256)
    run = compiled.channels_last_runner(*layouts)
    for n_threads in (1, 2, 3):
        image = random_values(rng, (2, channels, size, size), in_type)
        expected = reference(convolution.prepare(dict(slots, input=image), attributes, "2_1"))
        given = np.ascontiguousarray(image.transpose(0, 2, 3, 1)) if layouts[0] else image
        got = run(n_threads, given)
        if layouts[1]:
            got = got.transpose(0, 3, 1, 2)
        assert np.array_equal(got, expected), n_threads


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kernel", [(1, 1), (3, 3)])
def test_few_units_of_a_compiled_filter_sum_their_own_rows(variant, kernel, monkeypatch):
    """A compiled convolution over a 7 x 7 image (49 pixel rows) into 160 or
    320 channels has few units of work, which run in lower bands of micro-
    tiles where that shares them out better (unit_band); a filter zero point
    that is not zero needs the sums of each pixel's row of A, which each
    band sums for itself.  Exact on 1 to 4 threads."""
    monkeypatch.setattr(_simd, "_selected", variant)
    monkeypatch.setattr(_native, "WORK_PER_THREAD", 1)
    rng = np.random.default_rng(kernel[0] * 160)
    padding = (kernel[0] // 2,) * 2
    for out_channels in (160, 320):
        slots = dict(input=random_values(rng, (1, 64, 7, 7), np.uint8), input_scale=0.05,
                     input_zero_point=random_values(rng, (), np.uint8),
                     filter=random_values(rng, (out_channels, 64) + kernel, np.uint8),
                     filter_scale=rng.uniform(0.001, 0.01, out_channels).astype(np.float32),
                     filter_zero_point=rng.integers(1, 256, out_channels).astype(np.uint8),
                     bias=rng.integers(-10000, 10000, out_channels, dtype=np.int32),
                     output_scale=np.float32(0.5 * (64 * kernel[0] * kernel[1]) ** 0.5 * 60),
                     output_zero_point=np.uint8(100))
        attributes = dict(start_padding=padding, end_padding=padding)
        compiled = _fully_bound(slots, attributes)
        run = compiled.data_runner()
        for n_threads in (1, 2, 3, 4, 2):
            # A new image each call: sums left from the last would not do.
            image = random_values(rng, (1, 64, 7, 7), np.uint8)
            expected = reference(convolution.prepare(dict(slots, input=image), attributes, "4_0"))
            got = run(n_threads, image)
            assert np.array_equal(got, expected), (out_channels, n_threads)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("image, strides, dilations, start_padding, end_padding", [
    ((28, 28), (2, 2), (1, 1), (0, 0), (1, 1)),   # pads after only, as exporters from TF write
    ((28, 24), (2, 2), (2, 2), (2, 2), (2, 2)),   # dilated
    ((27, 16), (2, 1), (1, 1), (1, 1), (1, 1)),   # strides unequal
    ((31, 26), (3, 2), (1, 2), (2, 1), (0, 2)),   # all of it
    ((2, 128), (1, 1), (1, 1), (1, 1), (1, 1))])  # bands of one row
def test_depthwise_bands_of_any_geometry(variant, image, strides, dilations, start_padding,
                                         end_padding, monkeypatch):
    """The channels-last depthwise kernel's bands of output rows with pads
    on one side, dilation, unequal strides, and bands of one row: each
    band's copy holds the padded rows its taps read, and the bytes are the
    reference's in every layout, on 1 to 3 threads."""
    monkeypatch.setattr(_simd, "selected", lambda: variant)
    rng = np.random.default_rng(image[0] * image[1])
    channels = 130
    shape = (1, channels) + image
    slots = dict(input=random_values(rng, shape, np.uint8), input_scale=np.float32(0.05),
                 input_zero_point=np.uint8(7),
                 filter=random_values(rng, (channels, 1, 3, 3), np.int8),
                 filter_scale=rng.uniform(0.01, 0.1, channels).astype(np.float32),
                 bias=rng.integers(-5000, 5000, channels).astype(np.int32),
                 output_scale=np.float32(rng.uniform(0.2, 3.0)), output_zero_point=np.uint8(9))
    attributes = dict(strides=strides, dilations=dilations, start_padding=start_padding,
                      end_padding=end_padding, group_count=channels)
    compiled = _fully_bound(slots, attributes)
    assert compiled.takes_channels_last(shape)
    for layouts in ((True, True), (True, False), (False, True)):
        run = compiled.channels_last_runner(*layouts)
        for n_threads in (1, 2, 3):
            x = random_values(rng, shape, np.uint8)
            expected = reference(convolution.prepare(dict(slots, input=x), attributes, "2_1"))
            got = run(n_threads, np.ascontiguousarray(x.transpose(0, 2, 3, 1))
                      if layouts[0] else x)
            if layouts[1]:
                got = got.transpose(0, 3, 1, 2)
            assert np.array_equal(got, expected), (layouts, n_threads)
