"""qops.compile binds any slot but the data operands, of every operator with constant slots.

Each operator has a strategy of valid calls (``Case``: the plain function's
slots, split into data operands and bindable slots, its attributes and
version); each example binds a subset of the bindable slots and checks the
compiled operator against the plain function, bit for bit.
"""

import pickle
from typing import Callable, NamedTuple

import numpy as np
import pytest
from bitwise import assert_bits_equal
from hypothesis import given, settings
from hypothesis import strategies as st

import qops

u8, i8, f32, f16 = np.uint8, np.int8, np.float32, np.float16
BYTES = (np.dtype(u8), np.dtype(i8))


class Case(NamedTuple):
    """One valid call of an operator's plain function."""

    name: str
    function: Callable
    data: dict          # never bound
    slots: dict         # bindable; None: an optional slot left absent
    attributes: dict
    version: dict       # feature_level= or opset=, or nothing
    weight: tuple = ()  # the weight's group: bound together, or not at all

    def plain(self, **changed):
        return self.function(**self.data, **dict(self.slots, **changed), **self.attributes,
                             **self.version)

    def units(self):
        """What may be bound: the weight's group as one, every other slot alone."""
        units = [self.weight] if self.weight else []
        return units + [(name,) for name in self.slots if name not in self.weight]


def ints(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape, dtype=dtype)


@st.composite
def scales(draw, shape=(), low=0.01, high=0.1):
    """A scale as a Python float, a float32 scalar or a float32 array of ``shape``."""
    value = draw(st.floats(low, high))
    form = draw(st.sampled_from(["float", "numpy", "array"] if not shape else ["array"]))
    if form == "float":
        return value
    if form == "numpy":
        return f32(value)
    if not shape:
        return np.array(value, f32)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    return rng.uniform(low, high, shape).astype(f32)


@st.composite
def zero_points(draw, dtype, shape=(), optional=True):
    """A zero point of ``dtype`` (a NumPy scalar or an array of ``shape``), or None."""
    if optional and draw(st.booleans()):
        return None
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    info = np.iinfo(dtype)
    low, high = max(info.min, -20), min(info.max, 140)  # kept off saturation
    if not shape:
        return np.dtype(dtype).type(draw(st.integers(low, high)))
    return rng.integers(low, high + 1, shape).astype(dtype)


types = st.sampled_from(BYTES)
seeds = st.integers(0, 2**32 - 1)


# -- cases ------------------------------------------------------------------------------------

@st.composite
def convolution_cases(draw, integer=False):
    rng = np.random.default_rng(draw(seeds))
    spatial = draw(st.sampled_from([1, 2]))
    groups = draw(st.integers(1, 2))
    per_group = draw(st.integers(1, 3))
    out_channels = groups * draw(st.integers(1, 2))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(spatial))
    size = tuple(k + draw(st.integers(0, 4)) for k in kernel)
    x_type, w_type = draw(types), draw(types)
    data = dict(input=ints(rng, (draw(st.integers(1, 2)), groups * per_group) + size, x_type))
    per_channel = draw(st.booleans())
    channel_shape = (out_channels,) if per_channel else ()
    slots = dict(input_zero_point=draw(zero_points(x_type)),
                 filter=ints(rng, (out_channels, per_group) + kernel, w_type),
                 filter_zero_point=draw(zero_points(w_type, channel_shape)))
    if not integer:
        slots.update(input_scale=draw(scales()),
                     filter_scale=draw(scales(channel_shape)),
                     bias=(rng.integers(-500, 500, out_channels).astype(np.int32)
                           if draw(st.booleans()) else None),
                     output_scale=draw(scales(low=0.05, high=0.5)),
                     output_zero_point=draw(zero_points(draw(types))))
    attributes = dict(strides=tuple(draw(st.integers(1, 2)) for _ in range(spatial)),
                      start_padding=tuple(draw(st.integers(0, 1)) for _ in range(spatial)),
                      end_padding=tuple(draw(st.integers(0, 1)) for _ in range(spatial)),
                      group_count=groups)
    if integer:
        return Case("CONVOLUTION_INTEGER", qops.convolution_integer, data, slots, attributes, {},
                    ("filter", "filter_zero_point"))
    return Case("QUANTIZED_LINEAR_CONVOLUTION", qops.quantized_linear_convolution, data, slots,
                attributes, {}, ("filter", "filter_scale", "filter_zero_point", "bias"))


@st.composite
def matmul_cases(draw, kind="requantized"):
    rng = np.random.default_rng(draw(seeds))
    rank = draw(st.integers(2, 4))
    batch = tuple(draw(st.sampled_from([1, 2])) for _ in range(rank - 2))
    # Past the lean path's 4096 multiply-adds too: the GEMM kernels and their bound run.
    rows, depth, columns = (draw(st.integers(1, 9)), draw(st.sampled_from([3, 16, 64])),
                            draw(st.integers(1, 17)))
    a_type = draw(types)
    b_type = a_type if kind == "to float" else draw(types)
    data = dict(a=ints(rng, batch + (rows, depth), a_type))
    b = ints(rng, tuple(draw(st.sampled_from([1, size])) for size in batch) + (depth, columns),
             b_type)
    column = (1,) * (rank - 1) + (columns,)
    if kind == "integer":
        slots = dict(a_zero_point=draw(zero_points(a_type)), b=b,
                     b_zero_point=draw(zero_points(b_type)))
        return Case("MATRIX_MULTIPLY_INTEGER", qops.matrix_multiply_integer, data, slots, {},
                    {}, ("b", "b_zero_point"))
    per_column = draw(st.booleans())
    if kind == "to float":
        half = draw(st.booleans())
        scale = (lambda: draw(st.floats(0.01, 0.1))) if half else (lambda: draw(scales()))
        slots = dict(a_scale=scale(), a_zero_point=draw(zero_points(a_type)), b=b,
                     b_scale=(draw(scales(column)) if per_column and not half else scale()),
                     b_zero_point=draw(zero_points(b_type)),
                     bias=(rng.uniform(-1, 1, columns).astype(f16 if half else f32)
                           if draw(st.booleans()) else None))
        return Case("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", qops.matrix_multiply_integer_to_float,
                    data, slots, dict(output_dtype=f16 if half else None), {},
                    ("b", "b_scale", "b_zero_point", "bias"))
    slots = dict(a_scale=draw(scales()), a_zero_point=draw(zero_points(a_type)), b=b,
                 b_scale=draw(scales(column if per_column else ())),
                 b_zero_point=draw(zero_points(b_type, column if per_column else ())),
                 output_scale=draw(scales(low=0.2, high=2.0)),
                 output_zero_point=draw(zero_points(draw(types))))
    return Case("QUANTIZED_LINEAR_MATRIX_MULTIPLY", qops.quantized_linear_matrix_multiply, data,
                slots, {}, {}, ("b", "b_scale", "b_zero_point"))


@st.composite
def add_cases(draw):
    rng = np.random.default_rng(draw(seeds))
    sizes = [draw(st.integers(1, 5)) for _ in range(draw(st.integers(1, 3)))]
    # Each dimension of A and B its size or 1: they broadcast.
    a_shape = tuple(draw(st.sampled_from([1, s])) for s in sizes)
    b_shape = tuple(draw(st.sampled_from([1, s])) for s in sizes)
    a_type, b_type = draw(types), draw(types)
    slots = dict(a_scale=draw(scales()), a_zero_point=draw(zero_points(a_type)),
                 b=ints(rng, b_shape, b_type), b_scale=draw(scales()),
                 b_zero_point=draw(zero_points(b_type)),
                 output_scale=draw(scales(low=0.1, high=0.5)),
                 output_zero_point=draw(zero_points(draw(types))))
    return Case("ELEMENT_WISE_QUANTIZED_LINEAR_ADD", qops.element_wise_quantized_linear_add,
                dict(a=ints(rng, a_shape, a_type)), slots, {}, {})


@st.composite
def pooling_cases(draw):
    rng = np.random.default_rng(draw(seeds))
    channels = draw(st.integers(1, 3))
    window = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    size = tuple(w + draw(st.integers(0, 3)) for w in window)
    x_type = draw(types)
    shape = (channels,) if channels > 1 and draw(st.booleans()) else ()
    slots = dict(input_scale=draw(scales(shape)), input_zero_point=draw(zero_points(x_type)),
                 output_scale=draw(scales(shape)),
                 output_zero_point=draw(zero_points(draw(types))))
    attributes = dict(window_size=window, strides=(draw(st.integers(1, 2)),) * 2,
                      start_padding=(draw(st.integers(0, window[0] - 1)), 0),
                      include_padding=draw(st.booleans()))
    return Case("QUANTIZED_LINEAR_AVERAGE_POOLING", qops.quantized_linear_average_pooling,
                dict(input=ints(rng, (draw(st.integers(1, 2)), channels) + size, x_type)), slots,
                attributes, {})


@st.composite
def linear_quantize_cases(draw, dequantize=False):
    """ONNX QuantizeLinear / DequantizeLinear: per tensor, per axis or blocked."""
    rng = np.random.default_rng(draw(seeds))
    shape = (2, draw(st.integers(1, 4)), draw(st.sampled_from([2, 4, 6])))
    form = draw(st.sampled_from(["per-tensor", "per-axis", "blocked"]))
    axis, block_size = draw(st.sampled_from([1, -1, 2])), 0
    if form == "per-tensor":
        parameter_shape = ()
    elif form == "per-axis":
        parameter_shape = (shape[axis],)
    else:
        block_size = 2
        parameter_shape = list(shape)
        parameter_shape[axis] = -(-shape[axis] // block_size)
        parameter_shape = tuple(parameter_shape)
    q_type = draw(types)
    zero_point = draw(zero_points(q_type, parameter_shape))
    scale = draw(scales(parameter_shape))
    attributes = dict(axis=axis, block_size=block_size)
    if dequantize:
        return Case("DequantizeLinear", qops.dequantize_linear, dict(x=ints(rng, shape, q_type)),
                    dict(x_scale=scale, x_zero_point=zero_point), attributes,
                    draw(st.sampled_from([{}, {"opset": 21}])))
    if zero_point is None:
        attributes["output_dtype"] = draw(st.sampled_from([None, i8]))
    x = rng.uniform(-8, 8, shape).astype(f32)
    return Case("QuantizeLinear", qops.quantize_linear, dict(x=x),
                dict(y_scale=scale, y_zero_point=zero_point), attributes,
                draw(st.sampled_from([{}, {"opset": 21}])))


@st.composite
def block_quantize_cases(draw, dequantize=False, element_wise=False):
    """DirectML's QUANTIZE / DEQUANTIZE (parameters' sizes divide the input's) and
    ELEMENT_WISE_QUANTIZE_LINEAR / ELEMENT_WISE_DEQUANTIZE_LINEAR (they broadcast)."""
    rng = np.random.default_rng(draw(seeds))
    shape = tuple(draw(st.sampled_from([1, 2, 4])) for _ in range(draw(st.integers(1, 3))))
    if element_wise:
        parameter_shape = tuple(draw(st.sampled_from([1, s])) for s in shape)
    else:
        parameter_shape = tuple(draw(st.sampled_from([d for d in (1, 2, 4) if s % d == 0]))
                                for s in shape)
    parameter_shape = parameter_shape if draw(st.booleans()) else ()
    q_type = draw(types)
    scale = draw(scales(parameter_shape))
    zero_point = draw(zero_points(q_type, parameter_shape))
    if dequantize:
        name, function = (("ELEMENT_WISE_DEQUANTIZE_LINEAR", qops.element_wise_dequantize_linear)
                          if element_wise else ("DEQUANTIZE", qops.dequantize))
        return Case(name, function, dict(input=ints(rng, shape, q_type)),
                    dict(scale=scale, zero_point=zero_point), {}, {})
    name, function = (("ELEMENT_WISE_QUANTIZE_LINEAR", qops.element_wise_quantize_linear)
                      if element_wise else ("QUANTIZE", qops.quantize))
    attributes = {} if element_wise and zero_point is not None else dict(output_dtype=q_type)
    return Case(name, function, dict(input=rng.uniform(-4, 4, shape).astype(f32)),
                dict(scale=scale, zero_point=zero_point), attributes, {})


@st.composite
def n_bits_cases(draw):
    """MatMulNBits: 2-, 4- or 8-bit weights in blocks, zero points packed,
    float or absent, a bias and a trivial g_idx or not."""
    rng = np.random.default_rng(draw(seeds))
    bits, block_size = draw(st.sampled_from([2, 4, 8])), draw(st.sampled_from([16, 32]))
    k, n = draw(st.integers(1, 70)), draw(st.integers(1, 20))
    k_blocks = -(-k // block_size)
    b = rng.integers(0, 256, (n, k_blocks, block_size * bits // 8), dtype=u8)
    zero_form = draw(st.sampled_from(["none", "packed", "float"]))
    zero_points = {"none": None,
                   "packed": rng.integers(0, 256, (n, -(-k_blocks * bits // 8)), dtype=u8),
                   "float": rng.uniform(0, 2 ** bits, (n, k_blocks)).astype(f32)}[zero_form]
    slots = dict(b=b, scales=rng.uniform(-0.1, 0.1, (n, k_blocks)).astype(f32),
                 zero_points=zero_points,
                 g_idx=(np.arange(k) // block_size).astype(np.int32) if draw(st.booleans())
                 else None,
                 bias=rng.standard_normal(n).astype(f32) if draw(st.booleans()) else None)
    return Case("MatMulNBits", qops.matmul_n_bits,
                dict(a=rng.standard_normal((draw(st.integers(1, 5)), k)).astype(f32)), slots,
                dict(k=k, n=n, bits=bits, block_size=block_size), {},
                ("b", "scales", "zero_points", "g_idx", "bias"))


CASES = {
    "MatMulNBits": n_bits_cases(),
    "QUANTIZED_LINEAR_CONVOLUTION": convolution_cases(),
    "CONVOLUTION_INTEGER": convolution_cases(integer=True),
    "QUANTIZED_LINEAR_MATRIX_MULTIPLY": matmul_cases(),
    "MATRIX_MULTIPLY_INTEGER": matmul_cases("integer"),
    "MATRIX_MULTIPLY_INTEGER_TO_FLOAT": matmul_cases("to float"),
    "ELEMENT_WISE_QUANTIZED_LINEAR_ADD": add_cases(),
    "QUANTIZED_LINEAR_AVERAGE_POOLING": pooling_cases(),
    "QuantizeLinear": linear_quantize_cases(),
    "DequantizeLinear": linear_quantize_cases(dequantize=True),
    "QUANTIZE": block_quantize_cases(),
    "DEQUANTIZE": block_quantize_cases(dequantize=True),
    "ELEMENT_WISE_QUANTIZE_LINEAR": block_quantize_cases(element_wise=True),
    "ELEMENT_WISE_DEQUANTIZE_LINEAR": block_quantize_cases(dequantize=True, element_wise=True),
}


def test_every_operator_with_constant_slots_compiles():
    assert set(CASES) == set(qops.ops.compiled.COMPILABLE)
    with pytest.raises(qops.ValidationError, match="no constant slots"):
        qops.compile("DYNAMIC_QUANTIZE_LINEAR")


@st.composite
def bindings(draw, case):
    """The slots to bind (any subset of the case's units) and the rest, given per call."""
    bound, runtime = {}, dict(case.data)
    for unit in case.units():
        if draw(st.booleans()):
            for name in unit:
                value = case.slots[name]
                # A weight's parameters left out are bound as absent; any
                # other slot given as None is.
                if value is not None or name not in case.weight or draw(st.booleans()):
                    bound[name] = value
        else:
            for name in unit:
                if case.slots[name] is not None:
                    runtime[name] = case.slots[name]
    return bound, runtime


def compile_case(case, bound):
    return qops.compile(case.name, **bound, **case.attributes, **case.version)


# -- the compiled call is the plain one ---------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_compiled_call_equals_the_plain_function(name, data):
    case = data.draw(CASES[name])
    bound, runtime = data.draw(bindings(case))
    expected = case.plain()
    compiled = compile_case(case, bound)
    assert set(bound) <= set(compiled.constants)
    assert set(compiled.runtime_slots).isdisjoint(compiled.constants)
    assert (set(compiled.runtime_slots) | set(compiled.constants)
            == {s.name for s in compiled.operator.inputs})
    for n_threads in (1, 2, 2):  # the last: a call like the one before (the recent call)
        assert_bits_equal(compiled(**runtime, n_threads=n_threads), expected,
                          f"{name}, bound {sorted(bound)}, {n_threads} threads")
    # By position, in slot order (absent ones as None).
    positional = [runtime.get(slot) for slot in compiled.runtime_slots]
    assert_bits_equal(compiled(*positional), expected, f"{name} by position")
    out = np.empty(expected.shape, expected.dtype)
    assert compiled(**runtime, out=out) is out
    assert_bits_equal(out, expected, f"{name} into out=")
    # A copy binds the same slots and attributes and gives the same bits.
    copy = pickle.loads(pickle.dumps(compiled))
    assert copy.runtime_slots == compiled.runtime_slots
    assert copy.feature_level == compiled.feature_level
    assert copy.attributes == compiled.attributes
    assert copy.constants.keys() == compiled.constants.keys()
    for key, value in compiled.constants.items():
        if value is None:  # bound as absent
            assert copy.constants[key] is None
        else:
            assert_bits_equal(np.asarray(copy.constants[key]), np.asarray(value), key)
    assert_bits_equal(copy(**runtime), expected, f"{name} unpickled")


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_a_compiled_call_refuses_what_it_must(name, data):
    """A bound slot given again, an unknown slot, a required slot missing (as
    the plain function refuses it), too many positional slots."""
    case = data.draw(CASES[name])
    bound, runtime = data.draw(bindings(case))
    compiled = compile_case(case, bound)
    if bound:
        again = data.draw(st.sampled_from(sorted(bound)))
        value = bound[again] if bound[again] is not None else case.plain().dtype.type(0)
        with pytest.raises(qops.ValidationError, match=f"{again} is bound at compile") as error:
            compiled(**runtime, **{again: value})
        assert error.value.slot == again
    with pytest.raises(qops.ValidationError, match="not a slot") as error:
        compiled(**runtime, not_a_slot=1)
    assert error.value.slot == "not_a_slot"
    with pytest.raises(qops.ValidationError, match="at most"):
        compiled(*([None] * (len(compiled.runtime_slots) + 1)))
    required = [s.name for s in compiled.operator.inputs
                if not s.optional and s.name in compiled.runtime_slots]
    missing = data.draw(st.sampled_from(required))
    with pytest.raises(qops.ValidationError) as plain_error:
        case.function(**{**case.data, **case.slots, missing: None}, **case.attributes,
                      **case.version)
    with pytest.raises(qops.ValidationError) as compiled_error:
        compiled(**{k: v for k, v in runtime.items() if k != missing})
    assert str(compiled_error.value) == str(plain_error.value)
    # ... and the compiled operator still answers after its refusals.
    assert_bits_equal(compiled(**runtime), case.plain(), name)


def _bad(name, value):
    """A value of slot ``name`` the operator refuses."""
    if "scale" in name:  # NaN (MATRIX_MULTIPLY_INTEGER_TO_FLOAT takes any finite scale)
        if isinstance(value, np.ndarray):
            return np.full_like(value, np.nan)
        return type(value)(np.nan)  # of the same type: a type is checked too
    if "zero_point" in name:
        return np.float64(1.0)
    if name == "bias":
        return np.ones(3, np.float64)
    return np.zeros(np.shape(value), np.float64)  # a weight or B of a type no operator takes


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_a_bad_constant_fails_at_compile_naming_its_slot(name, data):
    case = data.draw(CASES[name])
    bound, _ = data.draw(bindings(case))
    bad = data.draw(st.sampled_from(sorted(case.slots)))
    if bad in case.weight:
        bound.update({slot: case.slots[slot] for slot in case.weight})
    bound[bad] = _bad(bad, case.slots[bad])
    with pytest.raises(qops.ValidationError) as error:
        compile_case(case, bound)
    assert error.value.slot == bad, str(error.value)
    assert bad in str(error.value)


# -- what binding means ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["QUANTIZED_LINEAR_CONVOLUTION",
                                  "QUANTIZED_LINEAR_MATRIX_MULTIPLY"])
def test_a_weight_parameter_is_not_bound_without_its_weight(name):
    slot = "filter_scale" if name == "QUANTIZED_LINEAR_CONVOLUTION" else "b_zero_point"
    weight = "filter" if slot == "filter_scale" else "b"
    with pytest.raises(qops.ValidationError, match=f"{weight} is required to compile") as error:
        qops.compile(name, **{slot: f32(1.0) if slot == "filter_scale" else i8(0)})
    assert error.value.slot == weight


def test_compile_refuses_data_operands_unknown_keywords_and_versions_of_the_other_kind():
    with pytest.raises(qops.ValidationError, match="x is given when the operator is called"):
        qops.compile("QuantizeLinear", x=np.ones(3, f32))
    with pytest.raises(qops.ValidationError, match="strides is not a slot or attribute") as error:
        qops.compile("ELEMENT_WISE_QUANTIZED_LINEAR_ADD", a_scale=1.0, strides=(1, 1))
    assert error.value.slot == "strides"
    with pytest.raises(qops.ValidationError, match="ONNX operator takes opset"):
        qops.compile("QuantizeLinear", y_scale=1.0, feature_level="4_0")
    with pytest.raises(qops.ValidationError, match="DirectML operator takes feature_level"):
        qops.compile("QUANTIZE", scale=1.0, output_dtype=i8, opset=21)
    with pytest.raises(qops.ValidationError, match="input_scale is required to compile"):
        qops.compile("QUANTIZED_LINEAR_AVERAGE_POOLING", input_scale=None, window_size=(2, 2))


def test_an_attribute_refused_at_its_level_fails_at_compile():
    with pytest.raises(qops.UnsupportedError, match="block_size"):
        qops.compile("DequantizeLinear", x_scale=np.ones((2, 2), f32), axis=1, block_size=2,
                     opset=19)
    with pytest.raises(qops.ValidationError, match="window_size is required"):
        qops.compile("QUANTIZED_LINEAR_AVERAGE_POOLING", input_scale=1.0, output_scale=1.0)


def test_a_weight_given_per_call_is_read_each_call():
    """Unbound, B and the filter are data: a new one of the same shape gives
    its own product, on the GEMM kernels and their bound run too."""
    rng = np.random.default_rng(5)
    parameters = dict(a_scale=f32(0.03), a_zero_point=u8(120), output_scale=f32(0.5),
                      output_zero_point=u8(128))
    matmul = qops.compile("QUANTIZED_LINEAR_MATRIX_MULTIPLY", **parameters)
    a, b_scale = ints(rng, (16, 64), u8), f32(0.02)
    for _ in range(4):  # a new B each time, the same objects otherwise
        b = ints(rng, (64, 24), i8)
        assert_bits_equal(matmul(a=a, b=b, b_scale=b_scale),
                          qops.quantized_linear_matrix_multiply(a=a, b=b, b_scale=b_scale,
                                                                **parameters), "B per call")
    assert not matmul._packed.keys()
    image = ints(rng, (1, 8, 9, 9), u8)
    convolution = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", input_scale=f32(0.05),
                               output_scale=f32(0.5), start_padding=(1, 1), end_padding=(1, 1))
    scale = f32(0.02)
    for _ in range(3):
        weights = ints(rng, (16, 8, 3, 3), i8)
        assert_bits_equal(convolution(input=image, filter=weights, filter_scale=scale),
                          qops.quantized_linear_convolution(
                              input=image, input_scale=f32(0.05), filter=weights,
                              filter_scale=scale, output_scale=f32(0.5), start_padding=(1, 1),
                              end_padding=(1, 1)), "filter per call")
    assert not convolution._packed.keys()


def test_a_bound_weight_is_packed_once_and_every_parameter_may_be_bound():
    rng = np.random.default_rng(6)
    constants = dict(b=ints(rng, (64, 24), i8), b_scale=f32(0.02), a_scale=f32(0.03),
                     a_zero_point=u8(120), output_scale=f32(0.5), output_zero_point=u8(128))
    matmul = qops.compile("QUANTIZED_LINEAR_MATRIX_MULTIPLY", **constants)
    assert matmul.runtime_slots == ("a",)
    for rows in (16, 16, 16, 3):  # the plans, the bound run, the lean path
        a = ints(rng, (rows, 64), u8)
        assert_bits_equal(matmul(a), qops.quantized_linear_matrix_multiply(a=a, **constants),
                          f"{rows} rows")
    assert matmul._packed.keys()
    assert matmul._binder.bound is not None


def test_slots_by_position_and_by_keyword_mix_as_in_a_function_call():
    rng = np.random.default_rng(9)
    a, b = ints(rng, (2, 8), u8), ints(rng, (2, 8), i8)
    add = qops.compile("ELEMENT_WISE_QUANTIZED_LINEAR_ADD", a_scale=f32(0.05), b_scale=f32(0.04),
                       output_scale=f32(0.08))
    assert add.runtime_slots == ("a", "a_zero_point", "b", "b_zero_point", "output_zero_point")
    expected = qops.element_wise_quantized_linear_add(
        a=a, a_scale=f32(0.05), a_zero_point=u8(3), b=b, b_scale=f32(0.04),
        b_zero_point=i8(-2), output_scale=f32(0.08), output_zero_point=u8(100))
    calls = [lambda: add(a, u8(3), b, i8(-2), u8(100)),
             lambda: add(a, u8(3), b, output_zero_point=u8(100), b_zero_point=i8(-2)),
             lambda: add(a, b=b, a_zero_point=u8(3), b_zero_point=i8(-2),
                         output_zero_point=u8(100))]
    for call in calls:
        assert_bits_equal(call(), expected, "mixed")
    with pytest.raises(qops.ValidationError, match="a_zero_point given twice"):
        add(a, u8(3), b, a_zero_point=u8(3))
    with pytest.raises(qops.ValidationError, match="b_scale is bound at compile time"):
        add(a, u8(3), b, b_scale=f32(0.04))
    with pytest.raises(qops.ValidationError, match="at most 5 positional"):
        add(a, u8(3), b, i8(-2), u8(100), None)


def test_a_residual_add_of_a_constant_follows_its_data():
    rng = np.random.default_rng(7)
    constants = dict(a_scale=f32(0.05), a_zero_point=u8(128), b=ints(rng, (1, 8), u8),
                     b_scale=f32(0.04), b_zero_point=u8(120), output_scale=f32(0.08),
                     output_zero_point=u8(128))
    add = qops.compile("ELEMENT_WISE_QUANTIZED_LINEAR_ADD", **constants)
    for shape in ((1, 8), (1, 8), (3, 8)):  # the lean path, then a broadcast one
        a = ints(rng, shape, u8)
        assert_bits_equal(add(a), qops.element_wise_quantized_linear_add(a=a, **constants),
                          str(shape))
    # At another level or output type the plain function does not take its fast
    # path; nor does the compiled one, and both give the same bits.
    older = qops.compile("ELEMENT_WISE_QUANTIZED_LINEAR_ADD", feature_level="4_0",
                         output_dtype=i8, **dict(constants, output_zero_point=None))
    assert_bits_equal(older(a), qops.element_wise_quantized_linear_add(
        a=a, feature_level="4_0", output_dtype=i8, **dict(constants, output_zero_point=None)),
        "at 4_0")


def test_calls_from_several_threads_with_bound_activation_parameters_agree():
    from conftest import run_in_threads

    rng = np.random.default_rng(8)
    constants = dict(filter=ints(rng, (8, 4, 3, 3), i8), filter_scale=f32(0.02),
                     input_scale=f32(0.05), input_zero_point=u8(128), output_scale=f32(0.4))
    convolution = qops.compile("QUANTIZED_LINEAR_CONVOLUTION", **constants)
    images = [ints(rng, (1, 4, 8, 8), u8) for _ in range(6)]
    expected = [qops.quantized_linear_convolution(input=image, **constants) for image in images]
    results = [None] * len(images)

    def work(index):
        for _ in range(4):
            results[index] = convolution(images[index])

    run_in_threads(work, len(images))
    for result, wanted in zip(results, expected):
        assert_bits_equal(result, wanted, "threads")
