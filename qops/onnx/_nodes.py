"""ONNX nodes as calls of the registry's operators.

QLinearConv, QLinearMatMul, QuantizeLinear and DequantizeLinear map onto
the operators of the same meaning; ConvInteger, MatMulInteger and
DynamicQuantizeLinear onto DirectML's CONVOLUTION_INTEGER,
MATRIX_MULTIPLY_INTEGER and DYNAMIC_QUANTIZE_LINEAR; onnxruntime's
com.microsoft QLinearAdd onto ELEMENT_WISE_QUANTIZED_LINEAR_ADD,
MatMulIntegerToFloat onto MATRIX_MULTIPLY_INTEGER_TO_FLOAT, and
QLinearAveragePool and QLinearGlobalAveragePool onto
QUANTIZED_LINEAR_AVERAGE_POOLING.

Each adapter takes an ONNX node's inputs (NumPy arrays, ``None`` for an
omitted optional input), its attributes and the opset, puts them into the
shapes and slots the qops operator takes, and returns the node's outputs.
Where ONNX and DirectML differ, the adapter follows ONNX:

* ONNX scales may be float16 or bfloat16 (QLinearMatMul from opset 21);
  they convert to float32 exactly, and the requantization rule of
  ``API.md`` then applies: the exact result, which onnxruntime's kernels
  give wherever their integer sums are exact (not always on CPUs without
  VNNI, whose u8 x s8 kernels saturate 16-bit pair sums).
* ONNX tensors of any rank broadcast like ``numpy.matmul``; DirectML's
  matrix multiply takes operands of one rank from 2 to 4: operands are
  given leading ones, 1-D operands become a row or column and the added
  dimension is dropped again, as NumPy does.
* ONNX convolutions take ``pads`` as all begins then all ends, or an
  ``auto_pad`` rule; DirectML takes start and end paddings.  1-D
  convolutions run as 2-D ones of height 1.
"""

from __future__ import annotations

import math

import numpy as np

import qops as api  # the public operator functions
from qops import registry
from qops.errors import UnsupportedError, ValidationError

#: The newest opset these adapters know (the registry's); ``run_node`` defaults to it.
NEWEST_OPSET = registry.NEWEST_OPSET.number

_FLOAT_SCALES = (np.dtype(np.float16), np.dtype(np.float32))


def _float32_scale(op_type, name, value):
    """A scale as float32: float16 and bfloat16 convert exactly."""
    if value is None:
        raise ValidationError(f"{op_type}: {name} is required", slot=name)
    value = np.asarray(value)
    if value.dtype == np.float32:
        return value
    if value.dtype in _FLOAT_SCALES or value.dtype.name == "bfloat16":
        return value.astype(np.float32)
    raise ValidationError(f"{op_type}: {name} has dtype {value.dtype}; ONNX scales are float32, "
                          "float16 or bfloat16", slot=name, given=str(value.dtype))


def _scalar(value):
    """A one-element tensor as a 0-d array (ONNX writes scalars either way)."""
    if value is None:
        return None
    value = np.asarray(value)
    return value.reshape(()) if value.size == 1 and value.ndim <= 1 else value


# -- convolution -------------------------------------------------------------------------

def conv_padding(auto_pad, pads, input_sizes, kernel_sizes, strides, dilations):
    """(start, end) paddings per spatial axis from ONNX's ``auto_pad`` and ``pads``.

    ``SAME_UPPER`` and ``SAME_LOWER`` pad so that the output has
    ``ceil(input / stride)`` positions, the odd padding element at the end
    (upper) or the start (lower); ``VALID`` pads nothing.
    """
    rank = len(input_sizes)
    auto_pad = (auto_pad or "NOTSET").upper() if isinstance(auto_pad, str) else (
        (auto_pad or b"NOTSET").decode().upper())
    if auto_pad == "NOTSET":
        pads = list(pads) if pads is not None else [0] * (2 * rank)
        if len(pads) != 2 * rank:
            raise ValidationError(f"pads has {len(pads)} values; a {rank}-D convolution takes "
                                  f"{2 * rank} (all begins, then all ends)", slot="pads",
                                  given=tuple(pads))
        return tuple(pads[:rank]), tuple(pads[rank:])
    if auto_pad == "VALID":
        return (0,) * rank, (0,) * rank
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise ValidationError(f"auto_pad {auto_pad!r} is not NOTSET, SAME_UPPER, SAME_LOWER or "
                              "VALID", slot="auto_pad", given=auto_pad)
    start, end = [], []
    for size, kernel, stride, dilation in zip(input_sizes, kernel_sizes, strides, dilations):
        wanted = math.ceil(size / stride)
        total = max(0, (wanted - 1) * stride + (kernel - 1) * dilation + 1 - size)
        small, large = total // 2, total - total // 2
        start.append(small if auto_pad == "SAME_UPPER" else large)
        end.append(large if auto_pad == "SAME_UPPER" else small)
    return tuple(start), tuple(end)


def _conv_geometry(op_type, x, w, attributes):
    """(x, w, strides, dilations, start, end, group, squeeze) for a 2-D DirectML call."""
    x, w = np.asarray(x), np.asarray(w)
    spatial = x.ndim - 2
    if spatial not in (1, 2) or w.ndim != x.ndim:
        raise UnsupportedError(
            f"{op_type}: x has {x.ndim} dimensions and w {w.ndim}; qops runs 1-D and 2-D "
            "convolutions (x and w of 3 or 4 dimensions)", slot="x", given=x.shape)
    kernel_shape = attributes.get("kernel_shape")
    if kernel_shape is not None and tuple(kernel_shape) != tuple(w.shape[2:]):
        raise ValidationError(f"{op_type}: kernel_shape {tuple(kernel_shape)} differs from w's "
                              f"spatial shape {tuple(w.shape[2:])}", slot="kernel_shape",
                              given=tuple(kernel_shape))
    strides = tuple(attributes.get("strides") or (1,) * spatial)
    dilations = tuple(attributes.get("dilations") or (1,) * spatial)
    for name, values in (("strides", strides), ("dilations", dilations)):
        if len(values) != spatial:
            raise ValidationError(f"{op_type}: {name} has {len(values)} values; the convolution "
                                  f"has {spatial} spatial axes", slot=name, given=values)
    start, end = conv_padding(attributes.get("auto_pad"), attributes.get("pads"), x.shape[2:],
                              w.shape[2:], strides, dilations)
    group = int(attributes.get("group") or 1)
    squeeze = spatial == 1
    if squeeze:
        x, w = x[:, :, None, :], w[:, :, None, :]
        strides, dilations = (1, *strides), (1, *dilations)
        start, end = (0, *start), (0, *end)
    return x, w, strides, dilations, start, end, group, squeeze


def qlinear_conv(inputs, attributes, opset):
    x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, bias = (
        list(inputs) + [None] * 9)[:9]
    x, w, strides, dilations, start, end, group, squeeze = _conv_geometry(
        "QLinearConv", x, w, attributes)
    y = api.quantized_linear_convolution(
        input=np.ascontiguousarray(x), input_scale=_scalar(_float32_scale("QLinearConv", "x_scale", x_scale)),
        input_zero_point=_scalar(x_zero_point), filter=np.ascontiguousarray(w),
        filter_scale=_scalar(_float32_scale("QLinearConv", "w_scale", w_scale)),
        filter_zero_point=_scalar(w_zero_point), bias=bias,
        output_scale=_scalar(_float32_scale("QLinearConv", "y_scale", y_scale)),
        output_zero_point=_scalar(y_zero_point), strides=strides, dilations=dilations,
        start_padding=start, end_padding=end, group_count=group)
    return [y[:, :, 0, :] if squeeze else y]


# -- matrix multiply ---------------------------------------------------------------------

def _matmul_operands(op_type, a, b):
    """a and b at one rank from 2 to 4, and how to shape the product back."""
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ValidationError(f"{op_type}: a and b must have at least one dimension",
                              slot="a" if a.ndim == 0 else "b", given=(a.shape, b.shape))
    drop_row, drop_column = a.ndim == 1, b.ndim == 1
    a2 = a[None, :] if drop_row else a
    b2 = b[:, None] if drop_column else b
    rank = max(a2.ndim, b2.ndim)
    if rank > 4:
        raise UnsupportedError(f"{op_type}: operands of {rank} dimensions; qops' matrix multiply "
                               "takes up to 4 (DirectML's limit)", slot="a",
                               given=(a.shape, b.shape))
    a2 = a2.reshape((1,) * (rank - a2.ndim) + a2.shape)
    b2 = b2.reshape((1,) * (rank - b2.ndim) + b2.shape)
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]) if rank > 2 else ()
    final = list(batch) + ([] if drop_row else [a2.shape[-2]]) + (
        [] if drop_column else [b2.shape[-1]])
    return a2, b2, rank, tuple(final)


def _row_parameter(value, rank, along_rows):
    """ONNX's per-row (a, y) or per-column (b) parameter as DirectML's shape."""
    if value is None:
        return None
    value = np.asarray(value)
    if value.size == 1:
        return value.reshape(())
    if value.ndim == 1:
        shape = (1,) * (rank - 2) + ((value.size, 1) if along_rows else (1, value.size))
        return value.reshape(shape)
    # N-D: [..., M, 1] or [..., 1, N]; DirectML's has ones in its batch dimensions.
    return value.reshape((1,) * (rank - value.ndim) + value.shape)


def qlinear_matmul(inputs, attributes, opset):
    a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point = (
        list(inputs) + [None] * 8)[:8]
    for name, value in (("a", a), ("b", b)):
        if value is not None and np.asarray(value).dtype not in (np.uint8, np.int8):
            raise UnsupportedError(
                f"QLinearMatMul: {name} has dtype {np.asarray(value).dtype}; qops runs int8 and "
                "uint8 operands (the float8 types of opset 21 are not supported)", slot=name,
                given=str(np.asarray(value).dtype))
    if opset < 21:
        for name, value in (("a_scale", a_scale), ("b_scale", b_scale), ("y_scale", y_scale)):
            if value is not None and np.asarray(value).dtype != np.float32:
                raise UnsupportedError(f"QLinearMatMul: {name} is {np.asarray(value).dtype}; "
                                       f"opset {opset} takes float32 scales (float16 and "
                                       "bfloat16 from opset 21)", slot=name)
    a2, b2, rank, final = _matmul_operands("QLinearMatMul", a, b)
    y = api.quantized_linear_matrix_multiply(
        a=np.ascontiguousarray(a2),
        a_scale=_row_parameter(_float32_scale("QLinearMatMul", "a_scale", a_scale), rank, True),
        a_zero_point=_row_parameter(a_zero_point, rank, True), b=np.ascontiguousarray(b2),
        b_scale=_row_parameter(_float32_scale("QLinearMatMul", "b_scale", b_scale), rank, False),
        b_zero_point=_row_parameter(b_zero_point, rank, False),
        output_scale=_row_parameter(_float32_scale("QLinearMatMul", "y_scale", y_scale), rank,
                                    True),
        output_zero_point=_row_parameter(y_zero_point, rank, True))
    return [y.reshape(final)]


# -- quantize and dequantize -------------------------------------------------------------

def quantize_linear(inputs, attributes, opset):
    x, y_scale, y_zero_point = (list(inputs) + [None] * 3)[:3]
    keywords = dict(axis=attributes.get("axis", 1), block_size=attributes.get("block_size", 0),
                    saturate=bool(attributes.get("saturate", 1)), opset=opset)
    if attributes.get("output_dtype"):
        keywords["output_dtype"] = _onnx_dtype(attributes["output_dtype"])
    if attributes.get("precision"):
        keywords["precision"] = _onnx_dtype(attributes["precision"])
    return [api.quantize_linear(x, *_per_tensor_pair(y_scale, y_zero_point), **keywords)]


def dequantize_linear(inputs, attributes, opset):
    x, x_scale, x_zero_point = (list(inputs) + [None] * 3)[:3]
    keywords = dict(axis=attributes.get("axis", 1), block_size=attributes.get("block_size", 0),
                    opset=opset)
    if attributes.get("output_dtype"):  # an attribute from opset 23: validation says so before
        keywords["output_dtype"] = _onnx_dtype(attributes["output_dtype"])
    x_scale, x_zero_point = _per_tensor_pair(x_scale, x_zero_point)
    return [api.dequantize_linear(x, x_scale, x_zero_point, **keywords)]


def _per_tensor_pair(scale, zero_point):
    """ONNX (and its reference) take a one-element 1-D scale or zero point as
    per tensor, whatever the other's shape: both become 0-d."""
    if scale is not None and np.ndim(scale) <= 1 and np.size(scale) == 1:
        scale = _scalar(scale)
        if zero_point is not None and np.ndim(zero_point) <= 1 and np.size(zero_point) == 1:
            zero_point = _scalar(zero_point)
    return scale, zero_point


def _onnx_dtype(code):
    """An ONNX TensorProto data type code as a NumPy (or ml_dtypes) dtype."""
    from onnx import helper

    return helper.tensor_dtype_to_np_dtype(int(code))


# -- the integer operators ---------------------------------------------------------------

def conv_integer(inputs, attributes, opset):
    x, w, x_zero_point, w_zero_point = (list(inputs) + [None] * 4)[:4]
    x, w, strides, dilations, start, end, group, squeeze = _conv_geometry(
        "ConvInteger", x, w, attributes)
    y = api.convolution_integer(
        input=np.ascontiguousarray(x), input_zero_point=_scalar(x_zero_point),
        filter=np.ascontiguousarray(w), filter_zero_point=_scalar(w_zero_point),
        strides=strides, dilations=dilations, start_padding=start, end_padding=end,
        group_count=group)
    return [y[:, :, 0, :] if squeeze else y]


def matmul_integer(inputs, attributes, opset):
    a, b, a_zero_point, b_zero_point = (list(inputs) + [None] * 4)[:4]
    a2, b2, rank, final = _matmul_operands("MatMulInteger", a, b)
    y = api.matrix_multiply_integer(
        a=np.ascontiguousarray(a2), a_zero_point=_row_parameter(a_zero_point, rank, True),
        b=np.ascontiguousarray(b2), b_zero_point=_row_parameter(b_zero_point, rank, False))
    return [y.reshape(final)]


def dynamic_quantize_linear(inputs, attributes, opset):
    (x,) = (list(inputs) + [None])[:1]
    y, scale, zero_point = api.dynamic_quantize_linear(x)
    # ONNX's scale and zero point are scalars.
    return [y, scale.reshape(()), zero_point.reshape(())]


def _broadcast_operands(a, b):
    """ONNX's multidirectional broadcasting as DirectML's: operands of one
    dimension count (leading ones added to the shorter), at least 1; returns
    them and the result's rank (0 for two scalars)."""
    a, b = np.asarray(a), np.asarray(b)
    rank = max(a.ndim, b.ndim)
    width = max(rank, 1)
    return (a.reshape((1,) * (width - a.ndim) + a.shape),
            b.reshape((1,) * (width - b.ndim) + b.shape), rank)


def qlinear_add(inputs, attributes, opset):
    """com.microsoft QLinearAdd: A, A_scale, A_zero_point, B, B_scale,
    B_zero_point, C_scale, C_zero_point; the output's type is C_zero_point's,
    else A's (onnxruntime's rule)."""
    a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point = (
        list(inputs) + [None] * 8)[:8]
    if a is None or b is None:
        raise ValidationError("QLinearAdd: A and B are required", slot="a" if a is None else "b")
    a2, b2, rank = _broadcast_operands(a, b)
    y = api.element_wise_quantized_linear_add(
        a=np.ascontiguousarray(a2), a_scale=_scalar(_float32_scale("QLinearAdd", "A_scale", a_scale)),
        a_zero_point=_scalar(a_zero_point), b=np.ascontiguousarray(b2),
        b_scale=_scalar(_float32_scale("QLinearAdd", "B_scale", b_scale)),
        b_zero_point=_scalar(b_zero_point),
        output_scale=_scalar(_float32_scale("QLinearAdd", "C_scale", c_scale)),
        output_zero_point=_scalar(c_zero_point),
        output_dtype=None if c_zero_point is not None else np.asarray(a).dtype)
    return [y.reshape(()) if rank == 0 else y]


def matmul_integer_to_float(inputs, attributes, opset):
    """com.microsoft MatMulIntegerToFloat: A, B, a_scale, b_scale,
    a_zero_point, b_zero_point, bias (a 1-D bias of N adds to every row).

    onnxruntime takes A and B of two 8-bit types; DirectML's operator takes
    one type for both.  Such a pair runs in one type: the smaller operand
    and its zero point go to the other's type by ``x ^ 0x80`` (uint8 x to
    int8 x - 128, and back), which leaves every difference from the zero
    point, and so every exact sum, as it was.  Other pairs of two types run
    as int16 operands, whose values are the same."""
    a, b, a_scale, b_scale, a_zero_point, b_zero_point, bias = (list(inputs) + [None] * 7)[:7]
    if a is None or b is None:
        raise ValidationError("MatMulIntegerToFloat: A and B are required",
                              slot="a" if a is None else "b")
    a2, b2, rank, final = _matmul_operands("MatMulIntegerToFloat", a, b)
    a_zero_point = None if a_zero_point is None else np.asarray(a_zero_point)
    b_zero_point = None if b_zero_point is None else np.asarray(b_zero_point)
    bytes_ = (np.dtype(np.uint8), np.dtype(np.int8))
    if a2.dtype != b2.dtype and a2.dtype in bytes_ and b2.dtype in bytes_:
        if a2.size <= b2.size:
            a2, a_zero_point = other_byte_type(a2, a_zero_point, "a")
        else:
            b2, b_zero_point = other_byte_type(b2, b_zero_point, "b")
    elif a2.dtype != b2.dtype:
        a2, b2 = a2.astype(np.int16), b2.astype(np.int16)
        a_zero_point = None if a_zero_point is None else a_zero_point.astype(np.int16)
        b_zero_point = None if b_zero_point is None else b_zero_point.astype(np.int16)
    y = api.matrix_multiply_integer_to_float(
        a=np.ascontiguousarray(a2), a_scale=_row_parameter(a_scale, rank, True),
        a_zero_point=_row_parameter(a_zero_point, rank, True), b=np.ascontiguousarray(b2),
        b_scale=_row_parameter(b_scale, rank, False),
        b_zero_point=_row_parameter(b_zero_point, rank, False), bias=bias)
    return [y.reshape(final)]


def other_byte_type(x, zero_point, name):
    """uint8 x and its zero point (0 when absent) as int8 x - 128, or int8 as
    uint8 x + 128: their differences are unchanged (MatMulIntegerToFloat's
    adapter, and the session's compiled form of the node).  The bytes are moved, so
    the zero point must be of x's type (as onnxruntime's schema has it)."""
    other = np.int8 if x.dtype == np.uint8 else np.uint8
    zero_point = np.zeros((), x.dtype) if zero_point is None else zero_point
    if zero_point.dtype != x.dtype:
        raise ValidationError(f"MatMulIntegerToFloat: {name}_zero_point is {zero_point.dtype}; "
                              f"it must have {name.upper()}'s type, {x.dtype}",
                              slot=f"{name}_zero_point", given=str(zero_point.dtype))
    return tuple(np.bitwise_xor(np.ascontiguousarray(value).view(np.uint8), 0x80).view(other)
                 for value in (x, zero_point))


def _pooling_input(op_type, x, channels_last):
    """x as NC[D]HW of 2 or 3 spatial axes (a 1-D pooling gains a height of
    1), and how to give the result back the node's layout."""
    x = np.asarray(x)
    if x.ndim not in (3, 4, 5):
        raise UnsupportedError(f"{op_type}: X has {x.ndim} dimensions; qops pools 1-D, 2-D and "
                               "3-D inputs (3 to 5 dimensions)", slot="x", given=x.shape)
    if channels_last:
        x = np.moveaxis(x, -1, 1)
    squeeze = x.ndim == 3
    if squeeze:
        x = x[:, :, None, :]

    def back(y):
        y = y[:, :, 0, :] if squeeze else y
        return np.ascontiguousarray(np.moveaxis(y, 1, -1)) if channels_last else y

    return np.ascontiguousarray(x), squeeze, back


def _pooling_call(x, x_scale, x_zero_point, y_scale, y_zero_point, op_type, **geometry):
    return api.quantized_linear_average_pooling(
        input=x, input_scale=_scalar(_float32_scale(op_type, "x_scale", x_scale)),
        input_zero_point=_scalar(x_zero_point),
        output_scale=_scalar(_float32_scale(op_type, "y_scale", y_scale)),
        output_zero_point=_scalar(y_zero_point),
        output_dtype=None if y_zero_point is not None else x.dtype, **geometry)


def qlinear_average_pool(inputs, attributes, opset):
    """com.microsoft QLinearAveragePool: X, x_scale, x_zero_point, y_scale,
    y_zero_point; ``kernel_shape``, ``strides``, ``pads`` or ``auto_pad``,
    ``count_include_pad``, ``channels_last``.  ``ceil_mode`` is taken where
    it gives the size the floor does (DirectML's output size is the floor)."""
    x, x_scale, x_zero_point, y_scale, y_zero_point = (list(inputs) + [None] * 5)[:5]
    if x is None:
        raise ValidationError("QLinearAveragePool: X is required", slot="x")
    x4, squeeze, back = _pooling_input("QLinearAveragePool", x, attributes.get("channels_last"))
    spatial = np.asarray(x).ndim - 2
    kernel = attributes.get("kernel_shape")
    if kernel is None or len(kernel) != spatial:
        raise ValidationError(f"QLinearAveragePool: kernel_shape is {kernel!r}; X has {spatial} "
                              "spatial axes", slot="kernel_shape", given=kernel)
    strides = tuple(attributes.get("strides") or (1,) * spatial)
    sizes = x4.shape[2:][-spatial:]
    start, end = conv_padding(attributes.get("auto_pad"), attributes.get("pads"), sizes, kernel,
                              strides, (1,) * spatial)
    if attributes.get("ceil_mode"):
        for size, k, stride, low, high in zip(sizes, kernel, strides, start, end):
            span = size + low + high - k
            if span % stride:
                raise UnsupportedError("QLinearAveragePool: ceil_mode=1 adds a window past the "
                                       "padded input here; DirectML's output size is the floor",
                                       slot="ceil_mode", given=1)
    geometry = dict(window_size=tuple(kernel), strides=strides, start_padding=start,
                    end_padding=end)
    if squeeze:
        geometry = {k: ((1 if k in ("window_size", "strides") else 0),) + tuple(v)
                    for k, v in geometry.items()}
    y = _pooling_call(x4, x_scale, x_zero_point, y_scale, y_zero_point, "QLinearAveragePool",
                      include_padding=bool(attributes.get("count_include_pad")), **geometry)
    return [back(y)]


def qlinear_global_average_pool(inputs, attributes, opset):
    """com.microsoft QLinearGlobalAveragePool: the average over every
    spatial position (the window is the whole image); ``channels_last``."""
    x, x_scale, x_zero_point, y_scale, y_zero_point = (list(inputs) + [None] * 5)[:5]
    if x is None:
        raise ValidationError("QLinearGlobalAveragePool: X is required", slot="x")
    x4, _, back = _pooling_input("QLinearGlobalAveragePool", x, attributes.get("channels_last"))
    y = _pooling_call(x4, x_scale, x_zero_point, y_scale, y_zero_point,
                      "QLinearGlobalAveragePool", window_size=tuple(x4.shape[2:]))
    return [back(y)]


#: MatMulNBits' attributes: the node's names and qops.matmul_n_bits' keywords.
N_BITS_ATTRIBUTES = {"K": "k", "N": "n", "bits": "bits", "block_size": "block_size",
                     "accuracy_level": "accuracy_level", "weight_prepacked": "weight_prepacked"}


def matmul_n_bits(inputs, attributes, opset):
    """com.microsoft MatMulNBits: A, B, scales, zero_points, g_idx, bias;
    ``K``, ``N``, ``bits``, ``block_size``, ``accuracy_level``,
    ``weight_prepacked`` (:func:`qops.matmul_n_bits`)."""
    a, b, scales, zero_points, g_idx, bias = (list(inputs) + [None] * 6)[:6]
    return [api.matmul_n_bits(a, b, scales, zero_points, g_idx, bias,
                              **n_bits_keywords(attributes))]


def n_bits_keywords(attributes):
    """A MatMulNBits node's attributes as qops.matmul_n_bits' keywords; an
    unknown one is named."""
    unknown = sorted(set(attributes) - set(N_BITS_ATTRIBUTES))
    if unknown:
        raise ValidationError(f"MatMulNBits: {unknown[0]} is not an attribute of MatMulNBits "
                              f"(it has {', '.join(N_BITS_ATTRIBUTES)})", slot=unknown[0])
    return {N_BITS_ATTRIBUTES[name]: value for name, value in attributes.items()}


#: op_type -> adapter(inputs, attributes, opset) -> outputs
ADAPTERS = {
    "QLinearConv": qlinear_conv,
    "QLinearMatMul": qlinear_matmul,
    "QuantizeLinear": quantize_linear,
    "DequantizeLinear": dequantize_linear,
    "ConvInteger": conv_integer,
    "MatMulInteger": matmul_integer,
    "DynamicQuantizeLinear": dynamic_quantize_linear,
}

#: The operators of onnxruntime's com.microsoft domain (version 1) that
#: onnxruntime's quantizer writes into models, as adapters of the same form.
CONTRIB_DOMAIN = registry.SOURCES["onnxruntime"]
CONTRIB_ADAPTERS = {
    "QLinearAdd": qlinear_add,
    "MatMulIntegerToFloat": matmul_integer_to_float,
    "QLinearAveragePool": qlinear_average_pool,
    "QLinearGlobalAveragePool": qlinear_global_average_pool,
    "MatMulNBits": matmul_n_bits,
}

# onnxruntime's other QOperator-format nodes (qops/onnx/_qoperator.py); its
# DynamicQuantizeMatMul runs as the two adapters passed here.
from qops.onnx import _qoperator  # noqa: E402

CONTRIB_ADAPTERS.update(_qoperator.adapters(dynamic_quantize_linear, matmul_integer_to_float))
