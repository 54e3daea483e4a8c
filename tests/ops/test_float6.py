"""float6e2m3 and float6e3m2 (opset 28): QuantizeLinear to them and
DequantizeLinear from them, bit for bit with ``onnx.reference`` run at opset
28; their packed storage (four elements in three bytes) against
``onnx.numpy_helper``'s; the kernels' float32 conversion against ml_dtypes;
``qops.onnx`` running them; and the opset rule (26 and 27 are version 25,
which has no 6-bit types)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from bitwise import assert_bits_equal
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import qops
from qops.backends import dispatch as _dispatch
from qops.backends.native import quantize as _quantize_native
from qops.backends.native import variants as _simd
from qops.ops import quantize as _ops

E2M3, E3M2 = np.dtype(ml_dtypes.float6_e2m3fn), np.dtype(ml_dtypes.float6_e3m2fn)
FLOAT6 = (E2M3, E3M2)
#: How messages spell them (ONNX's names, lower case).
LABELS = {E2M3: "float6e2m3", E3M2: "float6e3m2"}
ONNX_TYPES = {E2M3: TensorProto.FLOAT6E2M3, E3M2: TensorProto.FLOAT6E3M2}
F32, F16, BF16 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
FLOAT_ONNX = {F32: TensorProto.FLOAT, F16: TensorProto.FLOAT16, BF16: TensorProto.BFLOAT16}


def tid(dtype):
    return np.dtype(dtype).name


def onnx_run(op_type, inputs, attributes, output_type, opset=28):
    """One node at ``opset`` on onnx.reference; ``inputs`` an ordered dict of
    name to array (``None``: omitted)."""
    names = [name if value is not None else "" for name, value in inputs.items()]
    node = helper.make_node(op_type, names, ["y"], **attributes)
    given = {n: v for n, v in inputs.items() if v is not None}
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for n, v in given.items()],
        [helper.make_tensor_value_info("y", output_type, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return np.asarray(ReferenceEvaluator(model).run(None, given)[0])


def grid(dtype):
    """Every value of the type, ascending, and the midpoints between them."""
    values = np.unique(np.arange(64, dtype=np.uint8).view(dtype).astype(np.float64))
    return values, (values[:-1] + values[1:]) / 2


@st.composite
def quantize_cases(draw):
    dtype = draw(st.sampled_from(FLOAT6))
    x_type = draw(st.sampled_from([F32, F16, BF16]))
    size = draw(st.integers(1, 24))
    values, mids = grid(dtype)
    top = values[-1]
    pool = st.one_of(st.sampled_from(list(values) + list(mids) + list(-mids)),
                     st.sampled_from([np.inf, -np.inf, np.nan, -np.nan, top * 1.01, top * 9, -0.0,
                                      values[1] / 3, -values[1] / 3, 1e30, -1e30]),
                     st.floats(-64, 64, allow_nan=False, width=32))
    quotient = np.array(draw(st.lists(pool, min_size=size, max_size=size)), np.float64)
    scale = draw(st.sampled_from([1.0, 0.5, 2.0, 0.375, 3.0]))
    with np.errstate(all="ignore"):
        x = (quotient * scale).astype(x_type)
    return dict(dtype=dtype, x=x, scale=np.array(scale, x_type),
                zero_point=draw(st.booleans()), saturate=draw(st.sampled_from([None, 0, 1])))


@settings(max_examples=300, deadline=None)
@given(case=quantize_cases())
def test_quantize_to_float6_is_onnx_reference(case):
    dtype = case["dtype"]
    zero_point = np.zeros((), dtype) if case["zero_point"] else None
    attributes = {} if zero_point is not None else {"output_dtype": ONNX_TYPES[dtype]}
    kwargs = {} if zero_point is not None else {"output_dtype": dtype}
    if case["saturate"] is not None:
        attributes["saturate"] = case["saturate"]
        kwargs["saturate"] = bool(case["saturate"])
    expected = onnx_run("QuantizeLinear", {"x": case["x"], "y_scale": case["scale"],
                                           "y_zero_point": zero_point}, attributes,
                        ONNX_TYPES[dtype])
    got = qops.quantize_linear(case["x"], case["scale"], zero_point, opset=28, **kwargs)
    assert got.dtype == dtype
    assert_bits_equal(got, expected, str(case))
    assert_bits_equal(qops.reference.quantize_linear(case["x"], case["scale"], zero_point,
                                                     output_dtype=dtype), expected, "reference")


@pytest.mark.parametrize("dtype", FLOAT6, ids=tid)
@pytest.mark.parametrize("scale_type", [F32, F16, BF16], ids=tid)
@pytest.mark.parametrize("packed", [False, True], ids=["unpacked", "packed"])
def test_dequantize_every_float6_code_is_onnx_reference(dtype, scale_type, packed):
    x = np.arange(64, dtype=np.uint8).view(dtype).reshape(16, 4)
    scale = np.array([0.5, 3.0, 1e-3, 7.25], scale_type)
    expected = onnx_run("DequantizeLinear", {"x": x, "x_scale": scale}, {"axis": -1},
                        FLOAT_ONNX[scale_type])
    given = qops.Packed6Bit(qops.pack_6bit(x), dtype, x.shape) if packed else x
    got = qops.dequantize_linear(given, scale, axis=-1, opset=28)
    assert_bits_equal(got, expected, f"{dtype} {scale_type}")


@pytest.mark.parametrize("dtype", FLOAT6, ids=tid)
@pytest.mark.parametrize("block_size", [0, 3])
def test_dequantize_float6_blocked_and_per_axis(dtype, block_size):
    rng = np.random.default_rng(block_size)
    x = rng.integers(0, 64, (5, 7)).astype(np.uint8).view(dtype)
    if block_size:
        scale = rng.uniform(0.1, 4, (5, 3)).astype(np.float32)
        attributes = {"axis": 1, "block_size": block_size}
    else:
        scale = rng.uniform(0.1, 4, 5).astype(np.float32)
        attributes = {"axis": 0}
    zero_point = np.zeros(scale.shape, dtype)
    expected = onnx_run("DequantizeLinear", {"x": x, "x_scale": scale, "x_zero_point": zero_point},
                        attributes, TensorProto.FLOAT)
    for given in (x, qops.Packed6Bit(qops.pack_6bit(x), dtype, x.shape)):
        got = qops.dequantize_linear(given, scale, zero_point, opset=28, **attributes)
        assert_bits_equal(got, expected, "blocked" if block_size else "per-axis")


@pytest.mark.parametrize("dtype", FLOAT6, ids=tid)
def test_float6_zero_point_must_be_zero(dtype):
    with pytest.raises(qops.ValidationError, match=f"x_zero_point must be 0 for {LABELS[dtype]}"):
        qops.dequantize_linear(np.zeros(3, dtype), np.float32(1), np.ones((), dtype), opset=28)


@pytest.mark.parametrize("variant", _simd.quantize_variants())
@pytest.mark.parametrize("dtype", FLOAT6, ids=tid)
def test_kernel_conversion_is_ml_dtypes(dtype, variant):
    """Every float16 value, random float32 bits and the ties between float6
    values, converted by the kernels as ml_dtypes converts them."""
    module = _simd.quantize_module(variant)
    kind = module.Q_E2M3 if dtype == E2M3 else module.Q_E3M2
    rng = np.random.default_rng(6)
    values, mids = grid(dtype)
    samples = np.concatenate([
        np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32),
        rng.integers(0, 2**32, 200000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        mids.astype(np.float32), -mids.astype(np.float32),
        np.nextafter(mids.astype(np.float32), np.float32(np.inf)),
        np.nextafter(mids.astype(np.float32), np.float32(-np.inf)),
    ])
    out = np.empty(samples.size, np.uint8)
    module.convert_float32(np.ascontiguousarray(samples), kind, out)
    with np.errstate(invalid="ignore"):
        expected = samples.astype(dtype).view(np.uint8)
    assert np.array_equal(out, expected)


# -- packing --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOAT6, ids=tid)
@pytest.mark.parametrize("shape", [(0,), (1,), (2,), (3,), (4,), (5,), (7,), (2, 3), (3, 3, 3),
                                   (4096 + 3,)], ids=str)
def test_pack_6bit_is_onnx_packing(dtype, shape):
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(0, 64, shape).astype(np.uint8).view(dtype)
    raw = qops.pack_6bit(x)
    assert raw.dtype == np.uint8 and raw.shape == (-(-6 * x.size // 8),)
    assert np.array_equal(raw, np.frombuffer(numpy_helper.from_array(x).raw_data, np.uint8))
    back = qops.unpack_6bit(raw, dtype, shape)
    assert back.dtype == dtype and back.shape == shape
    assert np.array_equal(back.view(np.uint8), x.view(np.uint8))
    # ONNX's reader gives the same elements back from our bytes.
    proto = numpy_helper.from_array(x)
    proto.raw_data = raw.tobytes()
    assert np.array_equal(numpy_helper.to_array(proto).view(np.uint8), x.view(np.uint8))


def test_pack_6bit_by_hand():
    """Codes 0x08 (1.0), 0x21 (-0.125), 0x1f (7.5) and 0x3f (-7.5), end to end
    from the lowest bit: 0b01_001000, 0b1111_1000, 0b111111_01."""
    x = np.array([1.0, -0.125, 7.5, -7.5], E2M3)
    assert qops.pack_6bit(x).tolist() == [0b01001000, 0b11111000, 0b11111101]
    assert qops.unpack_6bit(bytes([0b01001000, 0b11111000, 0b11111101]), "float6e2m3fn",
                            (4,)).astype(float).tolist() == [1.0, -0.125, 7.5, -7.5]


@given(codes=st.lists(st.integers(0, 63), max_size=50), dtype=st.sampled_from(FLOAT6))
def test_pack_6bit_round_trip(codes, dtype):
    x = np.array(codes, np.uint8).view(dtype)
    raw = qops.pack_6bit(x)
    assert np.array_equal(qops.unpack_6bit(raw, dtype, x.shape).view(np.uint8), x.view(np.uint8))
    # the bits past the last element are zero
    stream = int.from_bytes(raw.tobytes(), "little")
    assert stream >> (6 * len(codes)) == 0
    assert [(stream >> (6 * i)) & 63 for i in range(len(codes))] == codes


def test_packed6bit_refuses_bad_input():
    with pytest.raises(qops.ValidationError, match="Packed6Bit: 5 elements .* take 4 bytes; raw has 3"):
        qops.Packed6Bit(np.zeros(3, np.uint8), E2M3, (5,))
    with pytest.raises(qops.ValidationError, match="Packed6Bit: dtype int4 is not a 6-bit type"):
        qops.Packed6Bit(np.zeros(3, np.uint8), ml_dtypes.int4, (4,))
    with pytest.raises(qops.ValidationError, match="pack_6bit: dtype float4e2m1 is not a 6-bit"):
        qops.pack_6bit(np.zeros(3, ml_dtypes.float4_e2m1fn))


# -- opsets and qops.onnx -------------------------------------------------------------------------

@pytest.mark.parametrize("opset", [25, 26, 27])
@pytest.mark.parametrize("dtype", FLOAT6, ids=tid)
def test_float6_before_opset_28_is_refused(opset, dtype):
    with pytest.raises(qops.UnsupportedError) as error:
        qops.quantize_linear(np.ones(3, np.float32), np.float32(1), output_dtype=dtype,
                             opset=opset)
    message = str(error.value)
    assert message.startswith(f"QuantizeLinear: y has dtype {LABELS[dtype]};")
    assert f"opset {opset} supports" in message and "from opset 28)" in message
    with pytest.raises(qops.UnsupportedError, match=f"DequantizeLinear: x has dtype {LABELS[dtype]};.*from opset 28"):
        qops.dequantize_linear(np.zeros(3, dtype), np.float32(1), opset=opset)


@pytest.mark.parametrize("opset", [26, 27])
def test_opsets_26_and_27_are_version_25(opset):
    """The rows in force are opset 25's: int2 runs, as it does at 25."""
    got = qops.quantize_linear(np.array([0.4, -3.0, 9.0], np.float32), np.float32(1.0),
                               np.zeros((), ml_dtypes.int2), opset=opset)
    assert got.astype(int).tolist() == [0, -2, 1]
    for name in ("QuantizeLinear", "DequantizeLinear"):
        assert qops.registry.get(name).support(qops.Opset(opset)).version == qops.Opset(25)
        assert qops.registry.get(name).support(qops.Opset(28)).version == qops.Opset(28)


@pytest.mark.parametrize("dtype", FLOAT6, ids=tid)
def test_qops_onnx_runs_float6_nodes(dtype):
    from qops import onnx as qonnx

    x = np.array([0.3, -7.9, 100.0, np.nan, 0.0625, -0.0, 2.5], np.float32)
    scale = np.float32(0.5)
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["q"], output_dtype=ONNX_TYPES[dtype])
    (quantized,) = qonnx.run_node(node, [x, scale], opset=28)
    expected = onnx_run("QuantizeLinear", {"x": x, "y_scale": scale, "y_zero_point": None},
                        {"output_dtype": ONNX_TYPES[dtype]}, ONNX_TYPES[dtype])
    assert_bits_equal(quantized, expected, "run_node QuantizeLinear")
    node = helper.make_node("DequantizeLinear", ["q", "s"], ["y"])
    # a TensorProto (ONNX's packed bytes) as the input
    (restored,) = qonnx.run_node(node, [numpy_helper.from_array(quantized), scale], opset=28)
    want = onnx_run("DequantizeLinear", {"x": quantized, "x_scale": scale}, {}, TensorProto.FLOAT)
    assert_bits_equal(restored, want, "run_node DequantizeLinear")


@pytest.mark.parametrize("dtype", FLOAT6, ids=tid)
def test_inference_session_runs_a_float6_model(dtype):
    from qops import onnx as qonnx

    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    graph = helper.make_graph(
        nodes, "float6", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
        initializer=[numpy_helper.from_array(np.array(0.25, np.float32), "s"),
                     numpy_helper.from_array(np.zeros((), dtype), "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 28)])
    x = np.linspace(-9, 9, 10, dtype=np.float32).reshape(2, 5)
    (got,) = qonnx.InferenceSession(model).run(None, {"x": x})
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert_bits_equal(np.asarray(got), np.asarray(expected), "session")


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(FLOAT6), layout=st.sampled_from(["tensor", "axis", "blocked"]),
       seed=st.integers(0, 2**32 - 1), saturate=st.booleans(),
       shape=st.tuples(st.integers(1, 5), st.integers(1, 70)))
def test_quantize_to_float6_every_granularity_variant_and_thread_count(dtype, layout, seed,
                                                                       saturate, shape):
    """Per tensor, per axis and in blocks, on every kernel variant at one and
    two threads: onnx.reference's bits (values past the largest finite, ties,
    subnormals and non-finite values among them)."""
    rng = np.random.default_rng(seed)
    values, mids = grid(dtype)
    pool = np.concatenate([values, -values, mids, -mids, [np.inf, -np.inf, np.nan, values[-1] * 3,
                                                         values[1] / 3]])
    scale_shape = {"tensor": (), "axis": (shape[0],), "blocked": (shape[0], -(-shape[1] // 4))}
    scale = rng.choice([0.5, 1.0, 2.0, 0.375], scale_shape[layout]).astype(np.float32)
    full_scale = (scale if layout == "tensor" else scale.reshape(-1, 1) if layout == "axis"
                  else np.repeat(scale, 4, axis=1)[:, :shape[1]])
    with np.errstate(all="ignore"):
        x = (rng.choice(pool, shape) * full_scale).astype(np.float32)
    zero_point = np.zeros(scale.shape, dtype)
    attributes = dict(axis=0 if layout == "axis" else 1, block_size=4 if layout == "blocked" else 0)
    expected = onnx_run("QuantizeLinear", {"x": x, "y_scale": scale, "y_zero_point": zero_point},
                        dict(attributes, saturate=int(saturate)), ONNX_TYPES[dtype])
    call = _ops.prepare_quantize(dict(x=x, y_scale=scale, y_zero_point=zero_point),
                                 dict(attributes, saturate=saturate, output_dtype=None,
                                      precision=None), opset=28)
    assert _dispatch.select(call, exclude=("lean",)).name == "kernels"
    for variant in _simd.quantize_variants():
        for threads in (1, 2):
            got = np.empty(call.output_shape, call.output_dtype)
            _quantize_native.run_quantize(call, got, threads, variant=variant)
            assert_bits_equal(got, expected, f"{variant}, {threads} threads")
