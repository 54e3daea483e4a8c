"""CONVOLUTION_INTEGER, MATRIX_MULTIPLY_INTEGER and DYNAMIC_QUANTIZE_LINEAR:
the public functions, their validation and their plans."""

from __future__ import annotations

import numpy as np

from qops import reference, registry
from qops.backends import dispatch
from qops.backends.contract import Call
from qops.ops import arguments as _args
from qops.ops.common import output_desc
from qops.ops.geometry import (
    check_convolution_geometry,
    convolution_in_two_d,
    convolution_attributes,
    matmul_output_shape,
)
from qops.ops.plans import PlanCache
from qops.ops.validation import (
    Desc,
    check_attributes,
    check_patterns,
    check_tensors,
    fail,
    resolve_version,
)
from qops.registry import dtypes as _dtypes
from qops.threads import resolve_threads

__all__ = ["convolution_integer", "matrix_multiply_integer", "dynamic_quantize_linear",
           "prepare_convolution_integer", "prepare_matrix_multiply_integer",
           "prepare_dynamic_quantize"]

CONVOLUTION = registry.get("CONVOLUTION_INTEGER")
MATMUL = registry.get("MATRIX_MULTIPLY_INTEGER")
DYNAMIC = registry.get("DYNAMIC_QUANTIZE_LINEAR")

def convolution_integer(input=None, input_zero_point=None, filter=None, filter_zero_point=None, *,
                        strides=None, dilations=None, start_padding=None, end_padding=None,
                        group_count=None, feature_level=None, out=None, n_threads=None):
    """DirectML ``CONVOLUTION_INTEGER`` (ONNX ConvInteger): exact convolution sums.

    Parameters
    ----------
    input : ndarray of uint8 or int8, shape (N, C, H, W), or (N, C, W) from feature level 4_0
    input_zero_point : int or ndarray, optional
        Per tensor, the type of ``input``.
    filter : ndarray of uint8 or int8, shape (OC, C / group_count, KH, KW) or (OC, C / group_count, KW)
    filter_zero_point : int or ndarray, optional
        Per tensor, or per output channel (a 1-d array of ``OC`` or ``(1, OC, 1, 1)``).
    strides, dilations, start_padding, end_padding, group_count
        As for :func:`quantized_linear_convolution` (one value each for a 1-D convolution).
    feature_level, out, n_threads
        As for :func:`quantized_linear_convolution`.

    Returns
    -------
    ndarray of int32, shape (N, OC, OH, OW) or (N, OC, OW)
        The exact sum of ``(input - input_zero_point) * (filter - filter_zero_point)``
        over each window.  A sum int32 cannot hold raises ``qops.ValidationError``
        (ONNX runtimes wrap it).
    """
    slots = dict(input=input, input_zero_point=input_zero_point, filter=filter,
                 filter_zero_point=filter_zero_point)
    attributes = dict(strides=strides, dilations=dilations, start_padding=start_padding,
                      end_padding=end_padding, group_count=group_count)
    return CONVOLUTION_PLANS.run(slots, attributes, feature_level, out=out,
                                 n_threads=resolve_threads(n_threads))


def matrix_multiply_integer(a=None, a_zero_point=None, b=None, b_zero_point=None, *,
                            feature_level=None, out=None, n_threads=None):
    """DirectML ``MATRIX_MULTIPLY_INTEGER`` (ONNX MatMulInteger): exact products.

    Parameters
    ----------
    a, b : ndarray of uint8 or int8, shapes (..., M, K) and (..., K, N)
        4 dimensions at feature level 2_1, 2 to 4 from 4_0; batch dimensions of
        size 1 broadcast.
    a_zero_point : int or ndarray, optional
        Per tensor or per row of A.
    b_zero_point : int or ndarray, optional
        Per tensor or per column of B.
    feature_level, out, n_threads
        As for :func:`quantized_linear_matrix_multiply`.

    Returns
    -------
    ndarray of int32, shape (..., M, N)
        ``(a - a_zero_point) @ (b - b_zero_point)``, exact; a value int32
        cannot hold raises ``qops.ValidationError``.
    """
    slots = dict(a=a, a_zero_point=a_zero_point, b=b, b_zero_point=b_zero_point)
    return MATMUL_PLANS.run(slots, {}, feature_level, out=out,
                            n_threads=resolve_threads(n_threads))


def dynamic_quantize_linear(input, *, output_dtype=None, feature_level=None, n_threads=None):
    """DirectML ``DYNAMIC_QUANTIZE_LINEAR`` (ONNX DynamicQuantizeLinear).

    The scale and zero point come from the input's range widened to include
    0 (so that 0 is exact), as ONNX defines them::

        scale = (max(x, 0) - min(x, 0)) / (qmax - qmin)      (1 when the range is empty)
        zero_point = round(clip(qmin - min(x, 0) / scale, qmin, qmax))
        y = saturate(round(x / scale) + zero_point)

    in float32, rounding half to even.

    Parameters
    ----------
    input : ndarray of float32 or float16
        Finite values, at least one.
    output_dtype : dtype-like, optional
        ``uint8`` (default, ONNX's only type) or ``int8``.
    feature_level, n_threads
        As for the other operators; the operator exists from feature level 4_0.

    Returns
    -------
    (y, scale, zero_point)
        ``y`` shaped as ``input``; ``scale`` (float32) and ``zero_point``
        (``y``'s type) with one element and the input's dimension count.
    """
    y, (scale, zero_point) = DYNAMIC_PLANS.run(
        {"input": input}, {"output_dtype": output_dtype}, feature_level, out=None,
        n_threads=resolve_threads(n_threads), with_checked=True)
    one = (1,) * y.ndim
    return y, np.full(one, scale, np.float32), np.full(one, zero_point, y.dtype)


# -- validation ----------------------------------------------------------------------------

def _int32_output(shape):
    return Desc(dtype="INT32", dtype_text="int32", shape=tuple(shape))


def _finish(op, version, given, descs, attributes, output_shape, granularity, out,
            output_dtype=np.dtype(np.int32)):
    arrays, complete = _args.arrays_of(given)
    if complete:
        _args.check_out(op, out, output_shape, output_dtype, arrays)
    return Call(operator=op, version=version, arrays=arrays if complete else None,
                      attributes=attributes, output_shape=tuple(output_shape),
                      output_dtype=output_dtype, granularity=granularity)


def _zero_points(op, slots, given, paired):
    """Each zero point as a parameter whose Python-number shorthand takes the
    type of the tensor it pairs with (``paired``: zero point -> tensor)."""
    for name, tensor in paired.items():
        given[name] = _args.as_parameter(op, name, slots.get(name),
                                         number_dtype=_args.registry_dtype(given[tensor]))


# -- CONVOLUTION_INTEGER -------------------------------------------------------------------

def prepare_convolution_integer(slots: dict, attributes: dict, feature_level=None, *,
                                out=None) -> Call:
    """Normalize and validate a CONVOLUTION_INTEGER call; raise before anything runs.

    A 1-D convolution (3-dimensional input and filter, from feature level
    4_0) takes one value per spatial attribute and runs as a 2-D one of
    height 1.
    """
    op = CONVOLUTION
    version = resolve_version(op, feature_level)
    given = {name: _args.as_tensor(op, name, slots.get(name)) for name in ("input", "filter")}
    rank, attributes = convolution_attributes(op, version, given["input"], attributes)
    _zero_points(op, slots, given, {"input_zero_point": "input", "filter_zero_point": "filter"})
    for name in ("input_zero_point", "filter_zero_point"):
        item = given[name]
        if item is None:
            continue
        if item.desc.ndim == 0:
            given[name] = _args.expand(item, (1,) * rank, _args.shorthand_note(item))
        elif item.desc.ndim == 1 and name == "filter_zero_point":
            shape = (1, item.desc.shape[0]) + (1,) * (rank - 2)
            given[name] = _args.expand(item, shape, _args.shorthand_note(item))

    descs = {name: (item.desc if item is not None else None) for name, item in given.items()}
    square, square_descs, output_shape, visible_shape = convolution_in_two_d(given, rank,
                                                                             attributes)
    if output_shape:  # else the input or filter has another rank, which the checks report
        descs["output"] = _int32_output(visible_shape)
    check_tensors(op, version, descs)
    check_convolution_geometry(op, square_descs, attributes, output_shape)
    granularity = check_patterns(op, version, square_descs,
                                 {"OutputChannelCount": square_descs["filter"].shape[0]},
                                 ("input_zero_point", "filter_zero_point"))
    return _finish(op, version, square, square_descs, attributes, visible_shape, granularity,
                   out)


# -- MATRIX_MULTIPLY_INTEGER ---------------------------------------------------------------

def prepare_matrix_multiply_integer(slots: dict, attributes: dict, feature_level=None, *,
                                    out=None) -> Call:
    """Normalize and validate a MATRIX_MULTIPLY_INTEGER call; raise before anything runs."""
    op = MATMUL
    version = resolve_version(op, feature_level)
    attributes = check_attributes(op, version, attributes)
    given = {name: _args.as_tensor(op, name, slots.get(name)) for name in ("a", "b")}
    _zero_points(op, slots, given, {"a_zero_point": "a", "b_zero_point": "b"})
    rank = given["a"].desc.ndim if given["a"] is not None else 4
    for name in ("a_zero_point", "b_zero_point"):
        item = given[name]
        if item is not None and item.desc.ndim == 0 and rank > 0:
            given[name] = _args.expand(item, (1,) * rank, _args.shorthand_note(item))
    descs = {name: (item.desc if item is not None else None) for name, item in given.items()}
    output_shape = matmul_output_shape(op, descs)
    descs["output"] = _int32_output(output_shape or (descs["a"].shape if descs["a"] else ()))
    check_tensors(op, version, descs)
    output_shape = matmul_output_shape(op, descs, strict=True)
    symbols = {"M": descs["a"].shape[-2], "N": descs["b"].shape[-1]}
    granularity = check_patterns(op, version, descs, symbols, ("a_zero_point", "b_zero_point"))
    return _finish(op, version, given, descs, attributes, output_shape, granularity, out)


# -- DYNAMIC_QUANTIZE_LINEAR ---------------------------------------------------------------

def dynamic_parameters(template, arrays):
    """A call's value checks and what they derive: the input's values finite
    (the scale comes from their range), then the scale and zero point, by
    the reference's statement of ONNX's rule."""
    x = np.asarray(arrays["input"], np.float32)
    # NaN carries through min and max, and an infinity is one of them: the
    # range says whether every value is finite (in one pass on the kernels).
    minimum, maximum = dispatch.helper("float32 range")(x, None)
    if not (np.isfinite(minimum) and np.isfinite(maximum)):
        fail(template.operator, "input has NaN or infinite values; the scale comes from its "
                                "finite range", slot="input")
    return reference.dynamic_quantize_parameters_of_range(minimum, maximum,
                                                          template.output_dtype)


def prepare_dynamic_quantize(slots: dict, attributes: dict, feature_level=None, *,
                             out=None) -> Call:
    """Normalize and validate a DYNAMIC_QUANTIZE_LINEAR call (``out`` is not taken:
    the operator has three outputs); ``checked`` holds the scale and zero point."""
    op = DYNAMIC
    version = resolve_version(op, feature_level)
    attributes = check_attributes(op, version, attributes)
    name = attributes["output_dtype"]
    item = _args.as_tensor(op, "input", slots.get("input"))
    descs = {"input": item.desc if item is not None else None}
    shape = descs["input"].shape if descs["input"] is not None else ()
    one = (1,) * len(shape)
    descs["output"] = output_desc(name, None, None, shape)
    descs["output_scale"] = Desc(dtype="FLOAT32", dtype_text="float32", shape=one)
    descs["output_zero_point"] = Desc(dtype=name, dtype_text=descs["output"].dtype_text,
                                      shape=one)
    check_tensors(op, version, descs)
    if item.desc.ndim and 0 in item.desc.shape:
        fail(op, "input is empty; the scale comes from its range, which an empty tensor "
                 "does not have", slot="input", given=item.desc.shape)
    call = Call(operator=op, version=version,
                arrays={"input": item.array} if item.array is not None else None,
                attributes=attributes, output_shape=tuple(shape),
                output_dtype=_dtypes.to_numpy(name), granularity={})
    if item.array is not None:
        call.checked = dynamic_parameters(call, call.arrays)
    return call


# -- plans ---------------------------------------------------------------------------------

# Their validation reads no value of the data slots: a call like the last
# may take the recent-call shortcut.
CONVOLUTION_PLANS = PlanCache(prepare_convolution_integer, None,
                              ("input_zero_point", "filter_zero_point"), recent=True)
MATMUL_PLANS = PlanCache(prepare_matrix_multiply_integer, None, ("a_zero_point", "b_zero_point"),
                         recent=True)
# The scale and zero point depend on the input's values: never reused.
DYNAMIC_PLANS = PlanCache(prepare_dynamic_quantize, dynamic_parameters, None)
