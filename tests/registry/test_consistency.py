"""Walk every declared (operator, version, slot, dtype) combination.

Declared combinations run and agree with ``qops.reference``; undeclared ones
raise a dtype error naming the slot.  The expectations come from the registry
tables, so a table entry without an implementation (or an implementation
accepting what the table does not declare) fails here.
"""

import numpy as np
import pytest

import qops
from qops import registry
from qops.registry import dtypes as _dtypes
from qops.registry.schema import DATA_TYPES, ConstraintKind

SMALL = np.array([0.0, 1.0, 2.0, 3.0, 1.0, 0.0, 2.0, 1.0])


def values(dtype, shape, fill=None):
    size = int(np.prod(shape))
    data = np.full(size, fill) if fill is not None else np.resize(SMALL, size)
    return data.reshape(shape).astype(_dtypes.to_numpy(dtype))


def dtype_groups(op, version):
    """Slots that must share a dtype at ``version`` (union of SAME_DTYPE constraints)."""
    groups = [{slot.name} for slot in op.slots]
    for constraint in op.constraints_at(version):
        if constraint.kind is not ConstraintKind.SAME_DTYPE:
            continue
        joined = set(constraint.slots)
        for group in [g for g in groups if g & joined]:
            groups.remove(group)
            joined |= group
        groups.append(joined)
    return [tuple(sorted(g)) for g in groups]


def default_dtypes(op, version):
    row = op.support(version)
    return {slot.name: row.tensor(slot.name).dtypes[0] for slot in op.slots}


def build_call(op, version, dtypes):
    """Keyword arguments of a small valid call whose slots have ``dtypes``."""
    if op.name == "QUANTIZED_LINEAR_CONVOLUTION":
        return dict(
            input=values(dtypes["input"], (1, 2, 4, 4)),
            input_scale=values(dtypes["input_scale"], (1, 1, 1, 1), 0.5),
            input_zero_point=values(dtypes["input_zero_point"], (1, 1, 1, 1), 1),
            filter=values(dtypes["filter"], (3, 2, 2, 2)),
            filter_scale=values(dtypes["filter_scale"], (3,), 0.25),
            filter_zero_point=values(dtypes["filter_zero_point"], (3,), 1),
            bias=values(dtypes["bias"], (3,), 2),
            output_scale=values(dtypes["output_scale"], (1, 1, 1, 1), 0.5),
            output_zero_point=values(dtypes["output_zero_point"], (1, 1, 1, 1), 2),
            feature_level=version)
    if op.name == "QUANTIZED_LINEAR_MATRIX_MULTIPLY":
        return dict(
            a=values(dtypes["a"], (1, 2, 3, 4)),
            a_scale=values(dtypes["a_scale"], (1, 1, 3, 1), 0.5),
            a_zero_point=values(dtypes["a_zero_point"], (1, 1, 1, 1), 1),
            b=values(dtypes["b"], (2, 1, 4, 5)),
            b_scale=values(dtypes["b_scale"], (1, 1, 1, 5), 0.25),
            b_zero_point=values(dtypes["b_zero_point"], (1, 1, 1, 5), 1),
            output_scale=values(dtypes["output_scale"], (1, 1, 1, 1), 0.5),
            output_zero_point=values(dtypes["output_zero_point"], (1, 1, 1, 1), 2),
            feature_level=version)
    if op.name == "CONVOLUTION_INTEGER":
        return dict(input=values(dtypes["input"], (1, 2, 4, 4)),
                    input_zero_point=values(dtypes["input_zero_point"], (1, 1, 1, 1), 1),
                    filter=values(dtypes["filter"], (3, 2, 2, 2)),
                    filter_zero_point=values(dtypes["filter_zero_point"], (3,), 1),
                    feature_level=version)
    if op.name == "MATRIX_MULTIPLY_INTEGER":
        return dict(a=values(dtypes["a"], (1, 2, 3, 4)),
                    a_zero_point=values(dtypes["a_zero_point"], (1, 1, 1, 1), 1),
                    b=values(dtypes["b"], (2, 1, 4, 5)),
                    b_zero_point=values(dtypes["b_zero_point"], (1, 1, 1, 5), 1),
                    feature_level=version)
    if op.name == "ELEMENT_WISE_QUANTIZED_LINEAR_ADD":
        return dict(a=values(dtypes["a"], (2, 3)),
                    a_scale=values(dtypes["a_scale"], (1, 1), 0.5),
                    a_zero_point=values(dtypes["a_zero_point"], (1, 1), 1),
                    b=values(dtypes["b"], (1, 3)),
                    b_scale=values(dtypes["b_scale"], (1, 1), 0.25),
                    b_zero_point=values(dtypes["b_zero_point"], (1, 1), 2),
                    output_scale=values(dtypes["output_scale"], (1, 1), 0.5),
                    output_zero_point=values(dtypes["output_zero_point"], (1, 1), 1),
                    feature_level=version)
    if op.name == "MATRIX_MULTIPLY_INTEGER_TO_FLOAT":
        return dict(a=values(dtypes["a"], (2, 3, 4)),
                    a_scale=values(dtypes["a_scale"], (1, 3, 1), 0.5),
                    a_zero_point=values(dtypes["a_zero_point"], (1, 1, 1), 1),
                    b=values(dtypes["b"], (1, 4, 5)),
                    b_scale=values(dtypes["b_scale"], (1, 1, 5), 0.25),
                    b_zero_point=values(dtypes["b_zero_point"], (1, 1, 5), 1),
                    bias=values(dtypes["bias"], (2, 3, 5), 2), feature_level=version)
    if op.name == "QUANTIZED_LINEAR_AVERAGE_POOLING":
        return dict(input=values(dtypes["input"], (1, 2, 3, 3)),
                    input_scale=values(dtypes["input_scale"], (1, 2, 1, 1), 0.5),
                    input_zero_point=values(dtypes["input_zero_point"], (1, 1, 1, 1), 1),
                    output_scale=values(dtypes["output_scale"], (1, 1, 1, 1), 0.25),
                    output_zero_point=values(dtypes["output_zero_point"], (1, 1, 1, 1), 2),
                    window_size=(2, 2), start_padding=(1, 0), feature_level=version)
    if op.name in ("ELEMENT_WISE_QUANTIZE_LINEAR", "ELEMENT_WISE_DEQUANTIZE_LINEAR"):
        if (op.name == "ELEMENT_WISE_QUANTIZE_LINEAR"
                and "FLOAT16" in (dtypes["input"], dtypes["scale"])
                and "FLOAT16" in op.support(version).tensor("input").dtypes):
            # The page's rule: a float input's scale has its type.
            dtypes = dict(dtypes, input="FLOAT16", scale="FLOAT16")
        zero = 0 if dtypes["zero_point"] in ("INT32", "UINT32") else 1
        call = dict(input=values(dtypes["input"], (1, 2, 3, 4)),
                    scale=values(dtypes["scale"], (1, 2, 1, 1), 0.5),
                    zero_point=values(dtypes["zero_point"], (1, 1, 1, 4), zero),
                    feature_level=version)
        if op.name == "ELEMENT_WISE_QUANTIZE_LINEAR":
            call["output_dtype"] = _dtypes.to_numpy(dtypes["output"])
        return call
    if op.name in ("QUANTIZE", "DEQUANTIZE"):
        # Blocks of two along the last axis; the zero point has the scale's shape.
        call = dict(input=values(dtypes["input"], (2, 3, 4)),
                    scale=values(dtypes["scale"], (1, 3, 2), 0.5),
                    zero_point=values(dtypes["zero_point"], (1, 3, 2), 1),
                    feature_level=version)
        if op.name == "QUANTIZE":
            call["output_dtype"] = _dtypes.to_numpy(dtypes["output"])
        return call
    if op.name == "DYNAMIC_QUANTIZE_LINEAR":
        return dict(input=values(dtypes["input"], (2, 3)),
                    output_dtype=_dtypes.to_numpy(dtypes["output"]), feature_level=version)
    if op.name == "MatMulNBits":
        # K = 32 in two blocks of 16 four-bit weights, N = 3.
        zero_shape = (3, 1) if dtypes["zero_points"] == "UINT8" else (3, 2)
        return dict(a=values(dtypes["a"], (2, 32)), b=values(dtypes["b"], (3, 2, 8), 0x97),
                    scales=values(dtypes["scales"], (3, 2), 0.5),
                    zero_points=values(dtypes["zero_points"], zero_shape, 7),
                    g_idx=(np.arange(32) // 16).astype(_dtypes.to_numpy(dtypes["g_idx"])),
                    bias=values(dtypes["bias"], (3,), 2), k=32, n=3, bits=4, block_size=16)
    scale, zero_point = op.inputs[1].name, op.inputs[2].name
    # Zero points of int32 and float types must be 0; 0 is valid everywhere.
    # An int32 scale (QuantizeLinear, opset 19 on) must be a positive whole number.
    call = {"x": values(dtypes["x"], (2, 3)),
            scale: values(dtypes[scale], (), 2 if dtypes[scale] in _dtypes.INTEGER_RANGES else 0.5),
            zero_point: values(dtypes[zero_point], (), 0),
            "opset": version}
    if op.name == "DequantizeLinear" and "output_dtype" in op.support(version).attributes:
        call["output_dtype"] = _dtypes.to_numpy(dtypes["y"])
    return call


def _chosen_by_caller(op, version, group):
    """Whether a call can give ``group`` a dtype: an input slot is in it, or an
    output whose type an attribute picks (DequantizeLinear's from opset 23).
    The integer operators' INT32 outputs and DYNAMIC_QUANTIZE_LINEAR's
    FLOAT32 scale are fixed."""
    if any(not op.slot(name).is_output for name in group):
        return True
    if op.name == "DequantizeLinear":
        return "output_dtype" in op.support(version).attributes
    return op.name == "DYNAMIC_QUANTIZE_LINEAR" and "output" in group


CASES = []
for _op in registry.operators():
    for _row in _op.versions:
        for _group in dtype_groups(_op, _row.version):
            if not _chosen_by_caller(_op, _row.version, _group):
                continue
            for _dtype in DATA_TYPES:
                CASES.append((_op, _row.version, _group, _dtype))


def case_id(case):
    op, version, group, dtype = case
    return f"{op.name}-{version.label}-{'+'.join(group)}-{dtype.lower()}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_declared_combinations_run_and_undeclared_raise(case):
    op, version, group, dtype = case
    row = op.support(version)
    dtypes = default_dtypes(op, version)
    dtypes.update({slot: dtype for slot in group})
    declared = all(dtype in row.tensor(slot).dtypes for slot in group)
    kwargs = build_call(op, version, dtypes)
    function = getattr(qops, op.function)
    output = op.output.name
    if output in group and op.name not in ("DequantizeLinear", "DYNAMIC_QUANTIZE_LINEAR"):
        # The output type is the output zero point's, (integer to float) the
        # scales', or (MatMulNBits) A's: each is in the same group.
        assert any(s.endswith("zero_point") or s.endswith("scale") or s == "a" for s in group)

    if not declared:
        with pytest.raises(TypeError) as error:
            function(**kwargs)
        assert isinstance(error.value, qops.ValidationError)
        message = str(error.value)
        assert message.startswith(op.name + ":")
        # An output type an attribute picks is refused as the attribute's value.
        named = [name if not op.slot(name).is_output else "output_dtype" for name in group]
        assert any(f"{slot} has dtype {_dtypes.label(_dtypes.to_numpy(dtype))}" in message
                   or f"{slot} is {_dtypes.label(_dtypes.to_numpy(dtype))}" in message
                   for slot in group + tuple(named))
        return

    result = function(**kwargs)
    if op.name == "DYNAMIC_QUANTIZE_LINEAR":
        expected = qops.reference.dynamic_quantize_linear(kwargs["input"], kwargs["output_dtype"])
        for got, want in zip(result, expected):
            assert got.dtype == want.dtype and np.array_equal(got, want)
        return
    assert result.dtype == _dtypes.to_numpy(dtypes[output])
    # The dispatched result agrees with the reference statement of the operator.
    call = _prepare(op, kwargs)
    expected = qops.backends.dispatch.execute(call, 1, implementation="reference")
    assert result.shape == expected.shape
    assert np.array_equal(result.view(np.uint8), expected.view(np.uint8))


@pytest.mark.parametrize("case", [case for case in CASES
                                  if all(case[3] in case[0].support(case[1]).tensor(slot).dtypes
                                         for slot in case[2])], ids=case_id)
def test_declared_combinations_write_every_output_byte(case, monkeypatch):
    """Each declared combination, run twice into reused output memory filled
    first with 0x5A and then with 0xA5 (every output taken from qops'
    buffers, whatever its size), returns the same bytes both times: no
    operator leaves an output byte as the memory had it."""
    outputs = pytest.importorskip("qops.backends.native._outputs")
    monkeypatch.setattr(qops.backends.contract, "ALIGNED_OUTPUT_BYTES", 1)
    op, version, group, dtype = case
    dtypes = default_dtypes(op, version)
    dtypes.update({slot: dtype for slot in group})
    kwargs = build_call(op, version, dtypes)
    function = getattr(qops, op.function)
    function(**kwargs)  # its buffers, freed at once, are the sizes the runs take
    runs = []
    for byte in (0x5A, 0xA5):
        outputs.fill_idle(byte)
        result = function(**kwargs)
        runs.append([np.array(array, copy=True).view(np.uint8)
                     for array in (result if isinstance(result, tuple) else (result,))])
        del result
    assert all(np.array_equal(a, b) for a, b in zip(*runs))


def _prepare(op, kwargs):
    from qops.ops.dry_run import PREPARE as _PREPARE

    kwargs = dict(kwargs)
    version = kwargs.pop("feature_level", None) or kwargs.pop("opset", None)
    names = {s.name for s in op.inputs}
    slots = {k: v for k, v in kwargs.items() if k in names}
    attributes = {k: v for k, v in kwargs.items() if k not in names}
    return _PREPARE[op.name](slots, attributes, version)


def test_every_declared_dtype_is_exercised():
    """Each (operator, version, slot, dtype) the tables declare appears as a running case."""
    covered = set()
    for op, version, group, dtype in CASES:
        row = op.support(version)
        if all(dtype in row.tensor(slot).dtypes for slot in group):
            covered.update((op.name, version, slot, dtype) for slot in group)
    for op in registry.operators():
        for row in op.versions:
            for slot in op.slots:
                if not _chosen_by_caller(op, row.version, (slot.name,)) and not any(
                        slot.name in group for group in dtype_groups(op, row.version)
                        if _chosen_by_caller(op, row.version, group)):
                    continue  # a fixed output type, checked by every running case
                for dtype in row.tensor(slot.name).dtypes:
                    assert (op.name, row.version, slot.name, dtype) in covered
