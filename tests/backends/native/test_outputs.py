"""Output arrays over reused buffers (qops.backends.native._outputs): their
form, when memory is and is not reused, the free list's bound, and that
operators write every byte of an output whose memory held an earlier one."""

import gc

import ml_dtypes
import numpy as np
import pytest

import qops
import qops.reference as reference
from qops.backends.contract import ALIGNED_OUTPUT_BYTES, empty_output

outputs = pytest.importorskip("qops.backends.native._outputs")


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32, np.float32, np.float16,
                                   ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn])
@pytest.mark.parametrize("shape", [(4096,), (3, 500, 7), (2, 0, 5000), (1, 1, 64, 64)])
def test_an_output_is_an_ordinary_array(shape, dtype):
    out = outputs.empty(shape, dtype)
    assert out.shape == shape and out.dtype == np.dtype(dtype)
    assert out.flags.c_contiguous and out.flags.writeable and out.flags.aligned
    assert out.ctypes.data % 64 == 0
    if out.size:
        assert out.strides == np.empty(shape, dtype).strides
    values = np.arange(out.size).reshape(shape).astype(dtype)
    out[...] = values
    assert np.array_equal(out.view(np.uint8), values.view(np.uint8))


def test_the_lean_paths_take_outputs_from_the_same_size_on():
    assert outputs.SMALLEST_OUTPUT_BYTES == ALIGNED_OUTPUT_BYTES


def test_a_freed_outputs_memory_is_the_next_ones():
    first = outputs.empty((5, 1000), np.int32)
    address = first.ctypes.data
    del first
    gc.collect()
    second = outputs.empty((1000, 5), np.int32)   # the same bytes, another shape
    assert second.ctypes.data == address


def test_memory_still_viewed_is_not_reused():
    first = outputs.empty((5, 1000), np.int32)
    first[...] = 7
    view = first[2:]
    del first
    second = outputs.empty((5, 1000), np.int32)
    second[...] = -1
    assert second.ctypes.data != view.ctypes.data - 2 * 1000 * 4
    assert np.all(view == 7)
    held = outputs.empty((5, 1000), np.int32)
    assert held.ctypes.data not in (second.ctypes.data, view.ctypes.data - 8000)


def test_the_free_list_is_bounded():
    for size in range(1, 40):
        outputs.empty((size * 9000,), np.uint8)   # freed at once
    count, kept = outputs.idle()
    assert 0 < count <= 8 and kept <= outputs.KEPT_BYTES
    outputs.empty((outputs.KEPT_BYTES + 1,), np.uint8)
    assert outputs.idle()[1] <= outputs.KEPT_BYTES


def _reused(shape, dtype, fill):
    """Free an output of `shape` after filling it with `fill`, so that the
    next one of its size starts over those bytes."""
    stale = empty_output(shape, dtype)
    assert stale.nbytes >= ALIGNED_OUTPUT_BYTES
    stale.view(np.uint8)[...] = fill
    address = stale.ctypes.data
    del stale
    return address


@pytest.mark.parametrize("fill", [0x00, 0x5A, 0xFF])
@pytest.mark.parametrize("depthwise", [False, True])
def test_a_convolution_writes_every_byte_of_reused_memory(fill, depthwise):
    rng = np.random.default_rng(fill)
    channels = 8
    x = rng.integers(0, 256, (1, channels, 30, 30), dtype=np.uint8)
    w = rng.integers(-128, 128, (channels, 1 if depthwise else channels, 3, 3), dtype=np.int8)
    arguments = dict(input=x, input_scale=np.float32(0.02), input_zero_point=np.uint8(120),
                     filter=w, filter_scale=np.float32(0.01), filter_zero_point=None, bias=None,
                     output_scale=np.float32(0.2), output_zero_point=np.uint8(128))
    attributes = dict(strides=(1, 1), dilations=(1, 1), start_padding=(1, 1),
                      end_padding=(1, 1), group_count=channels if depthwise else 1)
    expected = reference.quantized_linear_convolution(**arguments, **attributes,
                                                      output_dtype=np.uint8)
    address = _reused(expected.shape, np.uint8, fill)
    for n_threads in (1, 2):
        got = qops.quantized_linear_convolution(**arguments, **attributes, n_threads=n_threads)
        assert got.ctypes.data == address
        assert np.array_equal(got, expected)
        del got


@pytest.mark.parametrize("fill", [0x00, 0xA5])
def test_a_product_and_a_quantization_write_every_byte_of_reused_memory(fill):
    rng = np.random.default_rng(fill)
    a = rng.integers(0, 256, (96, 64), dtype=np.uint8)
    b = rng.integers(-128, 128, (64, 72), dtype=np.int8)
    arguments = dict(a=a, a_scale=np.float32(0.02), a_zero_point=np.uint8(128), b=b,
                     b_scale=np.float32(0.01), b_zero_point=None,
                     output_scale=np.float32(0.3), output_zero_point=np.uint8(100))
    expected = reference.quantized_linear_matrix_multiply(**arguments, output_dtype=np.uint8)
    address = _reused(expected.shape, np.uint8, fill)
    got = qops.quantized_linear_matrix_multiply(**arguments)
    assert got.ctypes.data == address and np.array_equal(got, expected)
    del got

    x = rng.normal(0, 3, (64, 200)).astype(np.float32)
    expected = reference.quantize_linear(x, np.float32(0.05), np.int8(3))
    address = _reused(expected.shape, np.int8, fill)
    got = qops.quantize_linear(x, np.float32(0.05), np.int8(3))
    assert got.ctypes.data == address and np.array_equal(got, expected)


def test_outputs_alive_at_exit_go_back_quietly():
    """Outputs still referenced as the interpreter ends (module globals, the
    last ones a script made) are freed while their module's globals are torn
    down: nothing is printed and the exit status is 0."""
    import subprocess
    import sys

    script = ("import numpy as np\n"
              "from qops.backends.native import _outputs\n"
              "kept = [_outputs.empty((n,), np.uint8) for n in (5000, 90000, 5000)]\n"
              "kept.append(_outputs.empty((70 << 20,), np.uint8))\n"
              "_outputs.kept_at_exit = kept  # freed as the module itself goes\n"
              "del kept[0]\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stderr == ""
