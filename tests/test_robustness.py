"""Odd but possible inputs: each gets a result or a qops.ValidationError, never
another exception and never a wrong answer."""

import json
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import qops
from qops import TensorDesc as TD

u8, i8, f32 = np.uint8, np.int8, np.float32


def matmul(a, b, **kwargs):
    return qops.quantized_linear_matrix_multiply(a, 0.5, None, b, 0.25, None, 1.0, **kwargs)


def test_row_and_column_sums_beyond_int32_are_exact():
    """sum of 8.5 million 255s passes int32: the zero-point corrections must not wrap."""
    depth = 8_500_000
    a = np.full((1, depth), 255, u8)
    b = np.ones((depth, 1), u8)
    got = qops.quantized_linear_matrix_multiply(a, 1e-4, None, b, 1e-4, None, 1.0)
    # (255 * 1) * K * float32(1e-8), computed from first principles.
    multiplier = np.float32(np.float32(1e-4) * np.float32(1e-4)) / np.float32(1.0)
    expected = int(np.clip(np.rint(np.float32(255 * depth) * multiplier), 0, 255))
    assert got.tolist() == [[expected]] and expected > 0
    image = np.ones((1, depth, 1, 1), u8)
    weights = np.full((1, depth, 1, 1), 127, i8)
    got = qops.quantized_linear_convolution(input=image, input_scale=1e-4, filter=weights,
                                            filter_scale=1e-4, output_scale=1.0)
    expected = int(np.clip(np.rint(np.float32(127 * depth) * multiplier), 0, 255))
    assert got.ravel().tolist() == [expected] and expected > 0


@pytest.mark.parametrize("a_shape, b_shape", [((2, 0), (0, 4)), ((0, 3), (3, 4)), ((2, 3), (3, 0)),
                                              ((1, 0, 2, 3), (1, 1, 3, 4))])
def test_empty_matrices(a_shape, b_shape):
    a, b = np.ones(a_shape, u8), np.ones(b_shape, i8)
    out = matmul(a, b, output_zero_point=np.uint8(7))
    expected_shape = np.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + (a_shape[-2], b_shape[-1])
    assert out.shape == expected_shape
    if a_shape[-1] == 0:  # K = 0: every sum is 0, so every output is the zero point
        assert (out == 7).all()


def test_empty_filter():
    out = qops.quantized_linear_convolution(input=np.ones((1, 2, 3, 3), u8), input_scale=1.0,
                                            filter=np.ones((0, 2, 3, 3), i8), filter_scale=1.0,
                                            output_scale=1.0)
    assert out.shape == (1, 0, 1, 1)


@pytest.mark.parametrize("call", [
    lambda: matmul(None, np.ones((2, 2), i8)),
    lambda: qops.quantized_linear_convolution(input=None, input_scale=1.0, filter=np.ones((1, 1, 1, 1), i8),
                                              filter_scale=1.0, output_scale=1.0),
    lambda: qops.validate("QUANTIZED_LINEAR_MATRIX_MULTIPLY"),
])
def test_missing_required_slots_are_named(call):
    with pytest.raises(qops.ValidationError, match="is required"):
        call()


@pytest.mark.parametrize("zero_point", [np.bool_(True), np.int64(3)])
def test_zero_points_of_unknown_types(zero_point):
    with pytest.raises(qops.ValidationError, match="y_zero_point has dtype") as error:
        qops.quantize_linear(np.ones(3, f32), 0.5, zero_point)
    assert isinstance(error.value, TypeError)
    with pytest.raises(qops.ValidationError, match="y_zero_point has dtype"):
        qops.validate("QuantizeLinear", x=TD("float32", (3,)), y_scale=0.5,
                      y_zero_point=TD("foo", ()))


@pytest.mark.parametrize("block_size", [2**36, 2**62, 2**63 - 1])
def test_huge_block_sizes_are_one_block(block_size):
    x = np.arange(10, dtype=u8).reshape(2, 5)
    scale = np.array([[0.5], [2.0]], f32)
    got = qops.dequantize_linear(x, scale, block_size=block_size, axis=-1)
    assert np.array_equal(got, x.astype(f32) * scale)


@pytest.mark.parametrize("n", [2**31, 10**6])
def test_absurd_thread_counts_are_rejected(n):
    with pytest.raises(qops.ValidationError, match="n_threads"):
        qops.quantize_linear(np.ones(3, f32), 0.5, n_threads=n)
    with pytest.raises(qops.ValidationError):
        qops.set_num_threads(n)


@pytest.mark.parametrize("attributes", [dict(strides=(2**63, 1)), dict(start_padding=(2**32, 0)),
                                        dict(group_count=2**40), dict(strides={1, 2}),
                                        dict(dilations="11")])
def test_attributes_beyond_directml_uint_or_not_sequences(attributes):
    with pytest.raises(qops.ValidationError):
        qops.quantized_linear_convolution(input=np.ones((1, 1, 3, 3), u8), input_scale=1.0,
                                          filter=np.ones((1, 1, 1, 1), i8), filter_scale=1.0,
                                          output_scale=1.0, **attributes)


@pytest.mark.parametrize("attributes", [dict(axis=np.array([1, 2])), dict(block_size=np.array([0, 0]))])
def test_array_attributes_at_old_opsets(attributes):
    with pytest.raises(qops.ValidationError):
        qops.dequantize_linear(np.ones((2, 3), u8), 0.5, opset=10, **attributes)


def test_a_scalar_x_with_blocks_says_why():
    with pytest.raises(qops.ValidationError, match="x is a scalar"):
        qops.dequantize_linear(np.array(3, u8), np.array([0.5, 1.0], f32))


@pytest.mark.parametrize("text", ["[1, 2]", "null", '{"operator": "QuantizeLinear", "slots": {"x": {"dtype": "float32"}}}'])
def test_cli_rejects_malformed_json(tmp_path, text):
    path = tmp_path / "call.json"
    path.write_text(text)
    result = subprocess.run([sys.executable, "-m", "qops", "validate", "--json", str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "cannot read the call" in result.stderr and "Traceback" not in result.stderr


def test_cli_json_feature_level_as_a_list(tmp_path):
    call = {"operator": "QUANTIZED_LINEAR_MATRIX_MULTIPLY", "feature_level": [2, 1],
            "slots": {"a": {"dtype": "uint8", "shape": [2, 3]}, "b": {"dtype": "int8", "shape": [3, 4]},
                      "a_scale": 0.5, "b_scale": 0.5, "output_scale": 1.0}}
    path = tmp_path / "call.json"
    path.write_text(json.dumps(call))
    result = subprocess.run([sys.executable, "-m", "qops", "validate", "--json", str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "DML_FEATURE_LEVEL_2_1 supports 4" in result.stdout


def test_cli_ops_rejects_unknown_opsets():
    result = subprocess.run([sys.executable, "-m", "qops", "ops", "QuantizeLinear", "--opset", "99"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "newer than the newest opset" in result.stderr


def test_low_rank_shape_options_are_not_repeated():
    with pytest.raises(qops.ValidationError) as error:
        qops.quantized_linear_matrix_multiply(np.ones((3, 2), u8), np.ones(3, f32), None,
                                              np.ones((2, 4), i8), 0.5, None, 1.0, feature_level="4_0")
    assert str(error.value).count("(1,)") == 1


def test_show_config_names_the_kernels_that_really_run():
    """In a process forced to the portable variant, show_config says so and
    the kernels a call runs are the portable module's (the variant a call
    used is read back from the module that did the work, not from the
    selection show_config reports)."""
    code = ("import numpy as np, qops; from qops.backends.native import gemm as _native\n"
            "used = []\n"
            "real = _native.variants.module\n"
            "def spy(name=None):\n"
            "    module = real(name); used.append(module.__name__); return module\n"
            "_native.variants.module = spy\n"
            "a = np.ones((64, 64), np.uint8)\n"
            "qops.quantized_linear_matrix_multiply(a, 1.0, None, a.astype(np.int8), 1.0, None, 64.0)\n"
            "print(qops.config.config()['simd'].split()[0], sorted(set(used)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, QOPS_SIMD="portable"), cwd="/")
    assert out.stdout.split(None, 1) == ["portable", "['qops.backends.native.kernels._qgemm_portable']\n"]


def test_float4_and_float8_bits_survive_a_round_trip():
    """Smoke check that narrow ml_dtypes arrays cross the API unchanged."""
    x = np.array([0.5, -1.0, 6.0], ml_dtypes.float4_e2m1fn)
    assert np.array_equal(qops.dequantize_linear(x, 1.0), x.astype(f32))


@pytest.mark.parametrize("function", ["quantized_linear_convolution", "convolution_integer"])
@pytest.mark.parametrize("batch", [0, 1])
def test_padding_past_32_bit_indexing_is_refused(function, batch):
    """Found by tools/fuzz.py: an empty batch with padding of 2**31 reached the
    reference, whose padded copy NumPy cannot even describe."""
    image = np.zeros((batch, 1, 1, 1), np.int8)
    weights = np.zeros((1, 1, 1, 1), np.int8)
    slots = (dict(input=image, input_scale=0.5, filter=weights, filter_scale=0.5,
                  output_scale=1.0) if function == "quantized_linear_convolution"
             else dict(input=image, filter=weights))
    with pytest.raises(qops.ValidationError, match=r"padded input height is 2147483649.*2\*\*31"):
        getattr(qops, function)(**slots, strides=(2**31, 2**31), end_padding=(2**31, 2**31))
    # Just inside the limit the call is valid (and an empty batch gives an empty output).
    if batch == 0:
        result = getattr(qops, function)(**slots, strides=(2**30, 2**30),
                                         end_padding=(2**31 - 2, 0))
        assert result.shape == (0, 1, 2, 1)


@pytest.mark.parametrize("op", qops.registry.operators(), ids=lambda op: op.name)
def test_every_operator_names_a_missing_slot(op):
    """Called with every input None, every operator (and qops.validate of
    it, given nothing) names what is required, never an AttributeError."""
    nothing = {slot.name: None for slot in op.inputs}
    if op.name == "QUANTIZED_LINEAR_AVERAGE_POOLING":
        nothing["window_size"] = (2, 2)  # else the missing attribute is named first
    for call in (lambda: getattr(qops, op.function)(**nothing), lambda: qops.validate(op.name)):
        with pytest.raises(qops.ValidationError, match="is required"):
            call()
