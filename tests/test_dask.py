"""qops.dask against the in-memory functions, bit for bit, on the threaded
scheduler and on a LocalCluster of worker processes."""

import os
import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qops

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
qd = pytest.importorskip("qops.dask")

# dask warns of what it will stop doing (np.size of a dask array, say):
# each such call is a failure here, before a release makes it one.
pytestmark = pytest.mark.filterwarnings("error::FutureWarning")

RNG = np.random.default_rng(2026)


def threaded(array):
    with dask.config.set(scheduler="threads"):
        return array.compute()


def assert_same(got, expected):
    """Bit for bit: same dtype, same shape, same bytes (NaN payloads included)."""
    expected = np.asarray(expected)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert np.asarray(got).tobytes() == expected.tobytes()


class Exploding:
    """A dask array whose tasks raise when run: a graph built on it must
    not run any of them."""

    def __init__(self, shape, dtype, chunks):
        def explode(block):
            raise AssertionError("a task ran")
        self.array = da.zeros(shape, dtype, chunks=chunks).map_blocks(explode, dtype=dtype)


# -- quantize and dequantize ----------------------------------------------------------------

@pytest.mark.parametrize("chunks", [(4, 3, 5), (1, 10, 7), (6, 1, 2)])
def test_quantize_linear_per_axis_with_the_axis_chunked(chunks):
    x = RNG.normal(size=(6, 10, 7)).astype(np.float32) * 3
    scale = RNG.uniform(0.01, 0.1, 10).astype(np.float32)
    zero = RNG.integers(0, 255, 10).astype(np.uint8)
    expected = qops.quantize_linear(x, scale, zero, axis=1)
    for scale_arg, zero_arg in ((scale, zero), (da.from_array(scale, chunks=3),
                                                da.from_array(zero, chunks=4))):
        got = qd.quantize_linear(da.from_array(x, chunks=chunks), scale_arg, zero_arg, axis=1)
        assert got.chunks == da.from_array(x, chunks=chunks).chunks
        assert_same(threaded(got), expected)


@st.composite
def blocked_calls(draw):
    """A blocked DequantizeLinear of random sizes, block size and chunking."""
    rank = draw(st.integers(1, 3))
    axis = draw(st.integers(0, rank - 1))
    block = draw(st.integers(1, 4))
    shape = [draw(st.integers(1, 6)) for _ in range(rank)]
    shape[axis] = block * draw(st.integers(1, 5)) - draw(st.integers(0, block - 1))
    chunks = tuple(draw(st.integers(1, size)) for size in shape)
    return tuple(shape), axis, block, chunks, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=40, deadline=None)
@given(call=blocked_calls())
def test_blocked_dequantize_linear_on_any_chunking(call):
    """Chunk edges off block edges move to the next block edge; every element
    equals the in-memory function's."""
    shape, axis, block, chunks, seed = call
    rng = np.random.default_rng(seed)
    x = rng.integers(-8, 8, shape).astype(ml_dtypes.int4)
    parameter_shape = list(shape)
    parameter_shape[axis] = -(-shape[axis] // block)
    scale = rng.uniform(0.01, 1, parameter_shape).astype(np.float32)
    zero = rng.integers(-8, 8, parameter_shape).astype(ml_dtypes.int4)
    expected = qops.dequantize_linear(x, scale, zero, axis=axis, block_size=block)
    got = qd.dequantize_linear(da.from_array(x, chunks=chunks), scale,
                               da.from_array(zero, chunks=1), axis=axis, block_size=block)
    edges = np.cumsum(got.chunks[axis])[:-1]
    assert not np.any(edges % block)
    assert_same(threaded(got), expected)


def test_blocked_quantize_keeps_chunks_already_on_block_edges():
    x = RNG.normal(size=(4, 32)).astype(np.float32)
    scale = RNG.uniform(0.01, 0.1, (4, 4)).astype(np.float32)
    got = qd.quantize_linear(da.from_array(x, chunks=(2, 16)), scale, axis=1, block_size=8,
                             output_dtype=ml_dtypes.int4)
    assert got.chunks == ((2, 2), (16, 16))
    assert_same(threaded(got), qops.quantize_linear(x, scale, axis=1, block_size=8,
                                                    output_dtype=ml_dtypes.int4))


@pytest.mark.parametrize("parameter_shape", [(1, 1, 1), (3, 1, 1), (1, 4, 6), (3, 2, 3)])
def test_directml_quantize_and_dequantize_with_blocks(parameter_shape):
    """QUANTIZE / DEQUANTIZE: one value, per channel, per element and blocks
    of two along two axes, on chunks that cut through blocks."""
    x = RNG.normal(size=(3, 4, 6)).astype(np.float32) * 4
    scale = RNG.uniform(0.02, 0.2, parameter_shape).astype(np.float32)
    zero = RNG.integers(-100, 100, parameter_shape).astype(np.int8)
    expected = qops.quantize(x, scale, zero, output_dtype=np.int8)
    quantized = qd.quantize(da.from_array(x, chunks=(2, 3, 5)), scale, zero,
                            output_dtype=np.int8)
    assert_same(threaded(quantized), expected)
    restored = qd.dequantize(quantized, da.from_array(scale), zero)
    assert_same(threaded(restored), qops.dequantize(expected, scale, zero))


def test_element_wise_quantize_and_dequantize_broadcast_parameters():
    x = RNG.normal(size=(2, 5, 4, 3)).astype(np.float32)
    scale = RNG.uniform(0.01, 0.1, (1, 5, 1, 1)).astype(np.float32)
    zero = RNG.integers(0, 255, (1, 5, 1, 1)).astype(np.uint8)
    chunked = da.from_array(x, chunks=(1, 2, 3, 2))
    quantized = qd.element_wise_quantize_linear(chunked, scale, zero)
    expected = qops.element_wise_quantize_linear(x, scale, zero)
    assert_same(threaded(quantized), expected)
    assert_same(threaded(qd.element_wise_dequantize_linear(quantized, scale, zero)),
                qops.element_wise_dequantize_linear(expected, scale, zero))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_dynamic_quantize_linear_takes_the_global_range(dtype):
    """Each chunk alone has a narrower range than the whole; the output,
    scale and zero point still equal the in-memory function's."""
    x = np.concatenate([RNG.uniform(0.5, 1, (4, 6)), RNG.uniform(-7, -3, (4, 6))]).astype(dtype)
    y, scale, zero_point = qd.dynamic_quantize_linear(da.from_array(x, chunks=(3, 4)))
    expected = qops.dynamic_quantize_linear(x)
    assert_same(threaded(y), expected[0])
    assert_same(threaded(scale), expected[1])
    assert_same(threaded(zero_point), expected[2])


# -- convolutions, pooling, products ---------------------------------------------------------

def _convolution_slots(batch=5, channels=4, out_channels=6, size=9, per_channel=True):
    shape = (out_channels,) if per_channel else ()
    return dict(input=RNG.integers(0, 256, (batch, channels, size, size), dtype=np.uint8),
                input_scale=np.float32(0.02), input_zero_point=np.uint8(128),
                filter=RNG.integers(-128, 128, (out_channels, channels, 3, 3), dtype=np.int8),
                filter_scale=RNG.uniform(0.001, 0.01, shape).astype(np.float32),
                filter_zero_point=None,
                bias=RNG.integers(-3000, 3000, out_channels).astype(np.int32),
                output_scale=np.float32(0.05), output_zero_point=np.uint8(100))


ATTRIBUTES = dict(strides=(2, 1), start_padding=(1, 1), end_padding=(1, 0))


@pytest.mark.parametrize("batch_chunk, filter_chunk", [(2, 6), (1, 4), (5, 1)])
def test_convolution_over_the_batch_and_output_channels(batch_chunk, filter_chunk):
    slots = _convolution_slots()
    expected = qops.quantized_linear_convolution(**slots, **ATTRIBUTES)
    chunked = dict(slots, input=da.from_array(slots["input"], chunks=(batch_chunk, 4, 9, 9)),
                   filter=da.from_array(slots["filter"], chunks=(filter_chunk, 4, 3, 3)),
                   filter_scale=da.from_array(slots["filter_scale"], chunks=2))
    got = qd.quantized_linear_convolution(**chunked, **ATTRIBUTES)
    assert got.numblocks[:2] == (-(-5 // batch_chunk), -(-6 // filter_chunk))
    assert_same(threaded(got), expected)


def test_convolution_integer_and_grouped_convolution():
    image = RNG.integers(-128, 128, (4, 6, 7, 7), dtype=np.int8)
    filter = RNG.integers(0, 256, (6, 3, 3, 3), dtype=np.uint8)
    expected = qops.convolution_integer(image, np.int8(3), filter, np.uint8(120), group_count=2)
    got = qd.convolution_integer(da.from_array(image, chunks=(3, 6, 7, 7)), np.int8(3), filter,
                                 np.uint8(120), group_count=2)
    assert_same(threaded(got), expected)


def test_pooling_over_the_batch_and_channels():
    image = RNG.integers(0, 256, (3, 5, 8, 8), dtype=np.uint8)
    arguments = (np.float32(0.1), np.uint8(10), np.float32(0.2), np.uint8(20))
    options = dict(window_size=(3, 3), strides=(2, 2))
    expected = qops.quantized_linear_average_pooling(image, *arguments, **options)
    got = qd.quantized_linear_average_pooling(da.from_array(image, chunks=(2, 2, 8, 8)),
                                              *arguments, **options)
    assert got.numblocks == (2, 3, 1, 1)
    assert_same(threaded(got), expected)


@pytest.mark.parametrize("b_shape", [(3, 8, 5), (1, 8, 5)])
def test_products_over_the_batch_and_rows(b_shape):
    a = RNG.integers(0, 256, (3, 10, 8), dtype=np.uint8)
    b = RNG.integers(-128, 128, b_shape, dtype=np.int8)
    # Per-row parameters of A, per-column of B.
    a_scale = RNG.uniform(0.01, 0.1, (1, 10, 1)).astype(np.float32)
    a_zero = RNG.integers(0, 256, (1, 10, 1)).astype(np.uint8)
    b_scale = RNG.uniform(0.01, 0.1, (1, 1, 5)).astype(
        np.float32)
    chunked = da.from_array(a, chunks=(2, 4, 3))
    expected = qops.quantized_linear_matrix_multiply(a, a_scale, a_zero, b, b_scale, None,
                                                     np.float32(0.5), np.uint8(7))
    got = qd.quantized_linear_matrix_multiply(chunked, a_scale, da.from_array(a_zero), b, b_scale,
                                              None, np.float32(0.5), np.uint8(7))
    assert got.chunks[:2] == ((2, 1), (4, 4, 2))
    assert_same(threaded(got), expected)
    assert_same(threaded(qd.matrix_multiply_integer(chunked, np.uint8(3), b, np.int8(-2))),
                qops.matrix_multiply_integer(a, np.uint8(3), b, np.int8(-2)))
    bias = RNG.normal(size=5).astype(np.float32)
    b_unsigned = b.view(np.uint8)  # this operator takes one type for A and B
    to_float = qd.matrix_multiply_integer_to_float(chunked, np.float32(0.1), np.uint8(3),
                                                   b_unsigned, np.float32(0.2), None, bias)
    assert_same(threaded(to_float), qops.matrix_multiply_integer_to_float(
        a, np.float32(0.1), np.uint8(3), b_unsigned, np.float32(0.2), None, bias))


def test_element_wise_add_broadcasts_across_chunks():
    a = RNG.integers(0, 256, (4, 6, 5), dtype=np.uint8)
    b = RNG.integers(0, 256, (4, 1, 5), dtype=np.uint8)
    parameters = (np.float32(0.1), np.uint8(1), np.float32(0.2), np.uint8(3), np.float32(0.3),
                  np.uint8(9))
    expected = qops.element_wise_quantized_linear_add(a, *parameters[:2], b, *parameters[2:])
    got = qd.element_wise_quantized_linear_add(da.from_array(a, chunks=(3, 2, 5)), *parameters[:2],
                                               da.from_array(b, chunks=(1, 1, 2)), *parameters[2:])
    assert_same(threaded(got), expected)


# -- validation at graph build ---------------------------------------------------------------

def test_validation_runs_before_any_task():
    bad_image = Exploding((2, 5, 9, 9), np.uint8, (1, 5, 9, 9)).array   # 5 channels, filter 4
    slots = _convolution_slots()
    with pytest.raises(qops.ValidationError, match="QUANTIZED_LINEAR_CONVOLUTION"):
        qd.quantized_linear_convolution(**dict(slots, input=bad_image))
    x = Exploding((4, 6), np.float64, 2).array
    with pytest.raises(qops.ValidationError, match="QuantizeLinear"):
        qd.quantize_linear(x, np.float32(0.1))  # float64 is no QuantizeLinear input
    with pytest.raises(qops.ValidationError, match="scale"):
        qd.quantize_linear(Exploding((4, 6), np.float32, 2).array, np.float32(0.0))


def test_a_chunked_spatial_axis_is_refused_with_what_to_do():
    slots = _convolution_slots()
    image = da.from_array(slots["input"], chunks=(2, 4, 5, 9))
    with pytest.raises(qops.ValidationError, match=r"input is chunked along axis 2.*rechunk"):
        qd.quantized_linear_convolution(**dict(slots, input=image))
    with pytest.raises(qops.ValidationError, match="out"):
        qd.quantize_linear(da.ones(4, np.float32), np.float32(0.1), out=np.empty(4, np.uint8))


# -- constants travel once -------------------------------------------------------------------

def held(node):
    """The value a graph node holds as data (dask wraps some in a DataNode)."""
    return getattr(node, "value", node) if type(node).__name__ == "DataNode" else node


def test_a_compiled_operator_and_its_constants_are_one_key_each():
    slots = _convolution_slots(batch=6)
    constants = {k: slots[k] for k in ("filter", "filter_scale", "bias")}
    compiled = qd.compile("QUANTIZED_LINEAR_CONVOLUTION", **constants, **ATTRIBUTES)
    runtime = {k: v for k, v in slots.items() if k not in constants and k != "filter_zero_point"}
    image = da.from_array(slots["input"], chunks=(1, 4, 9, 9))
    got = compiled(**dict(runtime, input=image))
    graph = dict(got.__dask_graph__())
    holding = [k for k, v in graph.items() if isinstance(held(v), qops.CompiledOperator)]
    assert len(holding) == 1 and got.npartitions == 6
    assert_same(threaded(got), qops.quantized_linear_convolution(**slots, **ATTRIBUTES))
    plain = qd.quantized_linear_convolution(**dict(slots, input=image), **ATTRIBUTES)
    filters = [k for k, v in dict(plain.__dask_graph__()).items()
               if isinstance(held(v), np.ndarray) and held(v).shape == slots["filter"].shape]
    assert len(filters) == 1


def test_compiled_products_take_chunks_of_a():
    a = RNG.integers(0, 256, (12, 16), dtype=np.uint8)
    b = RNG.integers(-128, 128, (16, 9), dtype=np.int8)
    compiled = qd.compile("QUANTIZED_LINEAR_MATRIX_MULTIPLY", b=b, b_scale=np.float32(0.05))
    got = compiled(da.from_array(a, chunks=(5, 16)), np.float32(0.1), np.uint8(4),
                   output_scale=np.float32(0.3), output_zero_point=np.uint8(2))
    assert_same(threaded(got), qops.quantized_linear_matrix_multiply(
        a, np.float32(0.1), np.uint8(4), b, np.float32(0.05), None, np.float32(0.3),
        np.uint8(2)))


# -- a cluster of worker processes -----------------------------------------------------------

@pytest.fixture(scope="module")
def client():
    import cloudpickle
    # The killing task below is this module's: workers get it by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=50)
    with distributed.Client(cluster) as client:
        yield client
    cluster.close()


def test_results_are_exact_on_worker_processes(client):
    slots = _convolution_slots(batch=4)
    image = da.from_array(slots["input"], chunks=(1, 4, 9, 9))
    got = qd.quantized_linear_convolution(**dict(slots, input=image), **ATTRIBUTES)
    assert_same(client.compute(got).result(),
                qops.quantized_linear_convolution(**slots, **ATTRIBUTES))
    x = RNG.integers(-8, 8, (8, 64)).astype(ml_dtypes.int4)
    scale = RNG.uniform(0.01, 0.1, (8, 4)).astype(np.float32)
    restored = qd.dequantize_linear(da.from_array(x, chunks=(3, 20)), scale, axis=1,
                                    block_size=16)
    assert_same(client.compute(restored).result(),
                qops.dequantize_linear(x, scale, axis=1, block_size=16))
    compiled = qd.compile("QUANTIZED_LINEAR_CONVOLUTION",
                          **{k: slots[k] for k in ("filter", "filter_scale", "bias")},
                          **ATTRIBUTES)
    runtime = {k: v for k, v in slots.items()
               if k not in ("filter", "filter_scale", "bias", "filter_zero_point")}
    assert_same(client.compute(compiled(**dict(runtime, input=image))).result(),
                qops.quantized_linear_convolution(**slots, **ATTRIBUTES))


def _kill_once(block, marker):
    """Kill this worker's process the first time any task gets here; the
    retry (on a restarted or the other worker) finds the marker and goes on."""
    try:
        descriptor = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return block
    os.close(descriptor)
    os._exit(1)


def test_a_killed_worker_is_retried_and_the_result_is_exact(client, tmp_path):
    marker = str(tmp_path / "killed")
    x = RNG.normal(size=(8, 40)).astype(np.float32)
    scale = RNG.uniform(0.01, 0.1, 40).astype(np.float32)
    source = da.from_array(x, chunks=(2, 40)).map_blocks(_kill_once, marker, dtype=np.float32,
                                                         meta=np.empty((0, 0), np.float32))
    zero = np.full(40, 128, np.uint8)
    got = qd.quantize_linear(source, scale, zero, axis=1)
    assert_same(client.compute(got).result(timeout=120),
                qops.quantize_linear(x, scale, zero, axis=1))
    assert os.path.exists(marker)  # a worker did die mid-computation
