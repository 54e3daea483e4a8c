"""onnxruntime's QOperator-format nodes (domain ``com.microsoft``) with its numerics.

onnxruntime's quantizer, writing the QOperator format, replaces float
operators by quantized nodes of its own domain.  QLinearConv, QLinearMatMul,
QLinearAdd, QLinearAveragePool and MatMulIntegerToFloat run through
:mod:`qops.onnx._nodes`; this module runs the rest of them, each with the
arithmetic of onnxruntime's CPU kernel (version 1.32 on x86-64 with AVX2 and
FMA3), step for step, so that results equal onnxruntime's bit for bit
wherever its kernels are themselves exact:

* **QGemm** -> :func:`qgemm`: :func:`qops.matrix_multiply_integer` gives the
  exact sums, then the requantization of ``API.md`` with onnxruntime's
  multiplier (``alpha`` enters first) and C added to the exact sums.
* **QLinearMul** -> :func:`qlinear_mul`: MLAS's formula for x86 (the zero
  point is added in float32 before rounding, unlike the matrix products);
  large tensors look their products up in the formula's table of all 65536
  pairs, built once per parameter set.
* **QLinearLeakyRelu**, **QLinearSigmoid** -> :func:`lookup_table` and
  :func:`apply_lookup_table`: onnxruntime's 256-entry table of dequantize ->
  float32 function -> MLAS quantize; the sigmoid is MLAS's rational
  approximation as its FMA3 kernel evaluates it (:func:`logistic`).
* **QLinearSoftmax** -> :func:`softmax_table`, :func:`qlinear_softmax`:
  onnxruntime's table of exponentials and its float32 / float64 arithmetic.
* **QLinearConcat**, **QLinearWhere** -> :func:`qlinear_concat`,
  :func:`qlinear_where`: each input requantized to the output's parameters
  by a table of dequantize -> quantize (copied where the parameters agree).
* **DynamicQuantizeMatMul** -> :func:`dynamic_quantize_matmul_inputs`, then
  the DynamicQuantizeLinear and MatMulIntegerToFloat adapters of
  :mod:`qops.onnx._nodes` (A quantized to uint8 from its range, then
  ``float32(float32(acc) * float32(a_scale * b_scale)) + bias``).

Functions for prepared constants
--------------------------------
The adapters (:func:`adapters`, ``adapter(inputs, attributes, opset) ->
outputs``) validate a node's inputs and call these, which a session can also
call directly with constants prepared once::

    lookup_table(function, x_scale, x_zero_point, y_scale, y_zero_point, dtype)
        -> ndarray (256,) of dtype, indexed by the raw byte of x
    apply_lookup_table(x, table) -> ndarray shaped as x, of table's dtype
    leaky_relu(alpha) -> function of float32 values (for lookup_table)
    logistic(values) -> float32 values (for lookup_table: the sigmoid)
    requantize_table(x_scale, x_zero_point, y_scale, y_zero_point, dtype)
        -> ndarray (256,), or None where x's parameters are y's (a copy)
    softmax_table(x_scale, reduce_size) -> float32 ndarray (256,)
    qlinear_softmax(x, x_scale, y_scale, y_zero_point=None, *, axis=-1, opset=13,
                    table=None) -> ndarray shaped as x
    qlinear_mul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
                y_zero_point) -> ndarray of the broadcast shape, a's dtype
    qlinear_concat(tensors, scales, zero_points, y_scale, y_zero_point, *, axis)
    qlinear_where(condition, x, x_scale, x_zero_point, y, y_scale, y_zero_point,
                  z_scale, z_zero_point)
    qgemm(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c=None, y_scale=None,
          y_zero_point=None, *, alpha=1.0, trans_a=False, trans_b=False)
    dynamic_quantize_matmul_inputs(a, b, b_scale, b_zero_point=None, bias=None)
        -> (a, b, b_scale, b_zero_point, bias) checked
    adapters(dynamic_quantize_linear, matmul_integer_to_float) -> {op_type: adapter}

Scales are positive, finite float32 numbers (Python numbers, 0-d or
one-element arrays; float16 and bfloat16 convert exactly); zero points are Python ints or
0-d / one-element arrays of the quantized type (``None`` means 0 where the
node's zero point is optional).  Every function raises
:class:`qops.ValidationError` naming the node and the slot for what it
cannot take.

Where qops and onnxruntime differ
---------------------------------
Only where onnxruntime's own result is not the rule it computes elsewhere:
integer sums are exact here (onnxruntime's int32 sums wrap, and its u8 x s8
GEMMs on CPUs without VNNI saturate 16-bit pair sums); QLinearMul saturates a
value past 2**31 in magnitude (onnxruntime's conversion turns it into the
type's minimum); QGemm with K = 0 follows the same rule as every other K.
On x86-64 CPUs without AVX2 / FMA3 onnxruntime's logistic kernel multiplies
and adds separately, which can move a sigmoid table entry by one.
"""

from __future__ import annotations

import math

import numpy as np

import qops as api  # the public operator functions
from qops import reference
from qops.errors import DTypeValidationError, ValidationError
from qops.onnx._numpy_ops import native_tables

__all__ = [
    "lookup_table", "apply_lookup_table", "leaky_relu", "logistic", "requantize_table",
    "softmax_table", "qlinear_softmax", "qlinear_mul", "qlinear_concat", "qlinear_where",
    "qgemm", "dynamic_quantize_matmul_inputs", "adapters", "OPERATORS",
]

_BYTE_TYPES = (np.dtype(np.uint8), np.dtype(np.int8))
_RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}
_FLOAT32_MAX = np.finfo(np.float32).max


# -- validation ----------------------------------------------------------------------------

def _fail(op_type, slot, message, cls=ValidationError, given=None):
    raise cls(f"{op_type}: {slot} {message}", operator=op_type, slot=slot, given=given)


def _quantized_tensor(op_type, slot, value, dtype=None):
    """A required int8 or uint8 tensor; with ``dtype``, of that type."""
    if value is None:
        _fail(op_type, slot, "is required")
    value = np.asarray(value)
    if value.dtype not in _BYTE_TYPES:
        _fail(op_type, slot, f"has dtype {value.dtype}; {op_type} takes int8 and uint8 tensors",
              DTypeValidationError, str(value.dtype))
    if dtype is not None and value.dtype != dtype:
        _fail(op_type, slot, f"has dtype {value.dtype}; it must have the type {np.dtype(dtype)} "
              "of the node's other quantized tensors", DTypeValidationError, str(value.dtype))
    return value


def _zero_point(op_type, slot, value, dtype, *, required=False):
    """A per-tensor zero point of ``dtype`` as a Python int (0 when omitted)."""
    if value is None:
        if required:
            _fail(op_type, slot, "is required")
        return 0
    if isinstance(value, int) and not isinstance(value, bool):  # the functions' shorthand
        low, high = _RANGES[np.dtype(dtype)]
        if not low <= value <= high:
            _fail(op_type, slot, f"is {value}; a {np.dtype(dtype)} zero point is in "
                  f"[{low}, {high}]", given=value)
        return value
    value = np.asarray(value)
    if value.dtype != dtype:
        _fail(op_type, slot, f"has dtype {value.dtype}; it must have its tensor's type "
              f"{np.dtype(dtype)}", DTypeValidationError, str(value.dtype))
    if value.size != 1 or value.ndim > 1:
        _fail(op_type, slot, f"has shape {value.shape}; {op_type} takes a per-tensor zero point "
              "(a scalar or a one-element 1-D tensor)", given=value.shape)
    return int(value.reshape(()))


def _zero_point_tensor(op_type, slot, value, dtype):
    """A zero point tensor of ``dtype`` (per tensor or per column); a Python
    int is a per-tensor one."""
    if isinstance(value, int) and not isinstance(value, bool):
        return np.asarray(_zero_point(op_type, slot, value, dtype), dtype)
    value = np.asarray(value)
    if value.dtype != dtype:
        _fail(op_type, slot, f"has dtype {value.dtype}; it must have its tensor's type "
              f"{np.dtype(dtype)}", DTypeValidationError, str(value.dtype))
    return value


def _positive(op_type, slot, values):
    if not np.all(np.isfinite(values) & (values > 0)):
        _fail(op_type, slot, f"is {values.tolist()}; scales must be positive and finite",
              given=values.tolist())


def _scales(op_type, slot, value):
    """A scale tensor as float32: a Python number is taken as float32 (the
    functions' shorthand), float16 and bfloat16 convert exactly."""
    if value is None:
        _fail(op_type, slot, "is required")
    if type(value) in (int, float):  # exactly Python's numbers, not NumPy's float64
        return np.asarray(value, np.float32)
    value = np.asarray(value)
    if value.dtype in (np.dtype(np.float16), np.dtype(np.float32)) or (
            value.dtype.name == "bfloat16"):
        return value.astype(np.float32)
    _fail(op_type, slot, f"has dtype {value.dtype}; ONNX scales are float32, float16 or bfloat16",
          DTypeValidationError, str(value.dtype))


def _scale(op_type, slot, value):
    """A per-tensor scale as a float32 number (positive and finite)."""
    value = _scales(op_type, slot, value)
    if value.size != 1 or value.ndim > 1:
        _fail(op_type, slot, f"has shape {value.shape}; {op_type} takes a per-tensor scale "
              "(a scalar or a one-element 1-D tensor)", given=value.shape)
    scale = np.float32(value.reshape(()))
    _positive(op_type, slot, scale)
    return scale


def _check_attributes(op_type, attributes, known):
    unknown = sorted(set(attributes) - set(known))
    if unknown:
        _fail(op_type, unknown[0], f"is not an attribute of {op_type} (it has "
              f"{', '.join(known) or 'none'})", given=unknown[0])


def _axis(op_type, axis, rank):
    """``axis`` in ``[-rank, rank)`` as a non-negative int."""
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        _fail(op_type, "axis", f"is {axis!r}; it must be an integer", given=axis)
    if not -rank <= axis < rank:
        _fail(op_type, "axis", f"is {axis}; the input has {rank} dimensions, so it must be in "
              f"[{-rank}, {rank - 1}]", given=int(axis))
    return int(axis) % rank


def _saturate(values, dtype):
    low, high = _RANGES[np.dtype(dtype)]
    return np.clip(values, low, high).astype(dtype)


def _padded(inputs, count):
    return (list(inputs) + [None] * count)[:count]


# -- lookup tables: QLinearLeakyRelu, QLinearSigmoid, and the requantizing copies ----------

def _mlas_quantize(values, scale, zero_point, dtype):
    """MLAS's QuantizeLinear of float32 values: ``x / scale`` in float32,
    clamped to the type's range shifted by the zero point (NaN takes the
    lower bound, as its max instruction does), rounded half to even, plus the
    zero point."""
    low, high = _RANGES[np.dtype(dtype)]
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        scaled = np.divide(np.asarray(values, np.float32), np.float32(scale), dtype=np.float32)
    lower, upper = np.float32(low - zero_point), np.float32(high - zero_point)
    scaled = np.clip(np.where(np.isnan(scaled), lower, scaled), lower, upper)
    return (np.rint(scaled).astype(np.int32) + zero_point).astype(dtype)


def lookup_table(function, x_scale, x_zero_point, y_scale, y_zero_point, dtype):
    """onnxruntime's table of ``quantize(function(dequantize(x)))`` for every byte.

    Built as onnxruntime's ``QlinearBuildLookupTable`` builds it: each of the
    256 values of ``dtype`` is dequantized in float32 as
    ``x_scale * float(x - x_zero_point)``, ``function`` maps the 256 float32
    values, and MLAS's QuantizeLinear (see :func:`_mlas_quantize`) quantizes
    them with ``y_scale`` and ``y_zero_point``.

    Parameters
    ----------
    function : callable or None
        float32 array -> float32 array of the same shape; ``None`` is the
        identity (a requantizing copy).
    x_scale, y_scale : float
        float32 scales (taken as given; the adapters validate them).
    x_zero_point, y_zero_point : int
    dtype : uint8 or int8
        The type of x and y.

    Returns
    -------
    ndarray of dtype, shape (256,)
        Entry ``i`` is y for the x whose raw byte is ``i`` (for int8, byte
        ``i`` is the value ``i - 256`` from 128 on); see
        :func:`apply_lookup_table`.
    """
    dtype = np.dtype(dtype)
    values = np.arange(256, dtype=np.uint8).view(dtype).astype(np.int32)
    dequantized = np.multiply(np.float32(x_scale),
                              (values - int(x_zero_point)).astype(np.float32), dtype=np.float32)
    mapped = dequantized if function is None else np.asarray(function(dequantized), np.float32)
    return _mlas_quantize(mapped, y_scale, int(y_zero_point), dtype)


def apply_lookup_table(x, table):
    """``table`` looked up with each element's raw byte (shape of ``x``)."""
    x = np.asarray(x)
    # Where built, the kernels read the tables made here: the same bytes.
    native = native_tables()
    if native is not None and x.size >= _NATIVE_LOOKUP_MIN_SIZE:
        return native.lookup(x, table)
    return table[x.view(np.uint8).reshape(-1)].reshape(x.shape)


#: From this many elements on, tables are looked up (and softmaxes run) by
#: the compiled kernels where they are built; below, NumPy's call costs less.
_NATIVE_LOOKUP_MIN_SIZE = 1024



def leaky_relu(alpha):
    """QLinearLeakyRelu's float function: ``v if v >= 0 else float32(alpha * v)``."""
    alpha = np.float32(alpha)

    def function(values):
        with np.errstate(invalid="ignore", over="ignore"):
            return np.where(values >= 0, values, np.multiply(alpha, values, dtype=np.float32))

    return function


# MLAS's logistic constants (Eigen's rational approximation), as its C source
# writes them; each decimal rounds to the float32 here.
_LOGISTIC_RANGE = np.float32(18.0)
_ALPHA = [np.float32(v) for v in (4.37031012579801e-11, 1.15627324459942e-07,
                                  6.08574864600143e-05, 8.51377133304701e-03,
                                  2.48287947061529e-01)]
_BETA = [np.float32(v) for v in (6.10247389755681e-13, 5.76102136993427e-09,
                                 6.29106785017040e-06, 1.70198817374094e-03,
                                 1.16817656904453e-01, 9.93151921023180e-01)]


def _fused_multiply_add(a, b, c):
    """float32 ``a * b + c`` rounded once, as an FMA instruction does.

    The float64 product of two float32 values is exact; the float64 sum
    rounds, and its error is exact (Knuth's two-sum).  Rounding that sum to
    float32 is the single rounding of the exact value except where the sum
    falls exactly halfway between two float32 values: there the error's sign
    says which side the exact value is on.
    """
    a, b, c = (np.asarray(v, np.float32).astype(np.float64) for v in (a, b, c))
    product = a * b
    total = product + c
    partial = total - product
    error = (product - (total - partial)) + (c - partial)
    rounded = total.astype(np.float32)
    above = rounded.astype(np.float64) > total
    lower = np.where(above, np.nextafter(rounded, np.float32(-np.inf)), rounded)
    upper = np.where(above, rounded, np.nextafter(rounded, np.float32(np.inf)))
    halfway = (lower.astype(np.float64) + upper.astype(np.float64)) / 2 == total
    corrected = np.where(error > 0, upper, lower)
    return np.where(halfway & (error != 0), corrected, rounded).astype(np.float32)


def logistic(values):
    """The sigmoid as MLAS's x86-64 FMA3 kernel computes it, in float32.

    ``x`` clamped to [-18, 18]; ``x2 = x * x``; ``p = x * P(x2)`` and
    ``q = Q(x2)`` by Horner's rule, each step one fused multiply-add (the
    first of P and Q too: ``x2 * alpha_9 + alpha_7``, ``x2 * beta_10 + beta_8``);
    ``max(0, p / q + 0.5)``.  onnxruntime calls this kernel on every x86-64
    CPU with AVX2 and FMA3.
    """
    x = np.clip(np.asarray(values, np.float32), -_LOGISTIC_RANGE, _LOGISTIC_RANGE)
    x2 = np.multiply(x, x, dtype=np.float32)
    p = _fused_multiply_add(x2, _ALPHA[0], _ALPHA[1])
    for coefficient in _ALPHA[2:]:
        p = _fused_multiply_add(x2, p, coefficient)
    q = _fused_multiply_add(x2, _BETA[0], _BETA[1])
    for coefficient in _BETA[2:]:
        q = _fused_multiply_add(x2, q, coefficient)
    p = np.multiply(x, p, dtype=np.float32)
    ratio = np.divide(p, q, dtype=np.float32)
    return np.maximum(np.float32(0), np.add(ratio, np.float32(0.5), dtype=np.float32))


def requantize_table(x_scale, x_zero_point, y_scale, y_zero_point, dtype):
    """The table that takes x's quantization to y's (QLinearConcat,
    QLinearWhere), or ``None`` where both are the same: onnxruntime copies
    the bytes then, which can differ from the table for scales so large or
    small that ``x_scale * q`` leaves float32's normal range."""
    if np.float32(x_scale) == np.float32(y_scale) and int(x_zero_point) == int(y_zero_point):
        return None
    return lookup_table(None, x_scale, x_zero_point, y_scale, y_zero_point, dtype)


def _table_node(op_type, function_of, inputs, attributes, known):
    x, x_scale, x_zero_point, y_scale, y_zero_point = _padded(inputs, 5)
    _check_attributes(op_type, attributes, known)
    x = _quantized_tensor(op_type, "X", x)
    table = lookup_table(function_of(attributes), _scale(op_type, "X_scale", x_scale),
                         _zero_point(op_type, "X_zero_point", x_zero_point, x.dtype),
                         _scale(op_type, "Y_scale", y_scale),
                         _zero_point(op_type, "Y_zero_point", y_zero_point, x.dtype), x.dtype)
    return [apply_lookup_table(x, table)]


def qlinear_leaky_relu_node(inputs, attributes, opset):
    """com.microsoft QLinearLeakyRelu: X, X_scale, X_zero_point, Y_scale,
    Y_zero_point; ``alpha`` (default 0.01)."""
    def function_of(attributes):
        alpha = attributes.get("alpha", 0.01)
        if not np.isfinite(np.float32(alpha)):
            _fail("QLinearLeakyRelu", "alpha", f"is {alpha!r}; it must be finite", given=alpha)
        return leaky_relu(alpha)

    return _table_node("QLinearLeakyRelu", function_of, inputs, attributes, ("alpha",))


def qlinear_sigmoid_node(inputs, attributes, opset):
    """com.microsoft QLinearSigmoid: X, X_scale, X_zero_point, Y_scale, Y_zero_point."""
    return _table_node("QLinearSigmoid", lambda attributes: logistic, inputs, attributes, ())


# -- QLinearSoftmax ------------------------------------------------------------------------

def softmax_table(x_scale, reduce_size):
    """onnxruntime's QLinearSoftmax table: ``exp`` of every difference from a row's maximum.

    Entry ``255 + d`` is the float32 value of ``exp((d + shift) * x_scale)``
    for ``d = x - max(x)`` from -255 to 0, evaluated in float64 as
    onnxruntime does: ``shift = max(0, log(q) - 5) / x_scale`` where
    ``q = float32(FLT_MAX / float32(reduce_size))`` and ``log(q)`` is the
    float32 logarithm (C's ``logf``, correctly rounded here; float64's
    logarithm rounded to float32 is that value, where NumPy's float32
    logarithm is not always).  The shift keeps the sum of ``reduce_size``
    entries below float32's largest value.

    Parameters
    ----------
    x_scale : float
        The input's float32 scale.
    reduce_size : int
        The number of elements each softmax sums over (the axis' length
        from opset 13; the product of the sizes from the axis on before).
    """
    x_scale = np.float32(x_scale)
    quotient = np.float32(_FLOAT32_MAX / np.float32(reduce_size))
    log_quotient = float(np.float32(np.log(np.float64(quotient))))
    shift = max(0.0, log_quotient - 5.0) / float(x_scale)
    differences = np.arange(256, dtype=np.float64) - 255.0
    return np.exp((differences + shift) * float(x_scale)).astype(np.float32)


def qlinear_softmax(x, x_scale, y_scale, y_zero_point=None, *, axis=-1, opset=13, table=None):
    """onnxruntime's QLinearSoftmax (its CPU kernel's arithmetic).

    Along each softmax (the ``axis`` from ``opset`` 13; before, the
    flattened sizes from ``axis`` on)::

        e = table[255 + x - max(x)]                      (:func:`softmax_table`)
        total = e[0] + e[1] + ...                        float32, in element order
        y = saturate(round_half_even(float64(e) * c / float64(total)) + y_zero_point)

    with ``c = floor(float32(1 / y_scale))``.  The input's zero point does
    not enter (a softmax does not change when every input moves by the same
    amount).

    Parameters
    ----------
    x : ndarray of uint8 or int8
    x_scale, y_scale : float
        Positive, finite float32 scales.
    y_zero_point : int or array of x's type, optional
    axis : int
    opset : int
        The ONNX opset of the Softmax the node replaces (its ``opset``
        attribute): 13 and later reduce over one axis, earlier ones over
        every axis from ``axis`` on.
    table : ndarray of float32 (256,), optional
        ``softmax_table(x_scale, reduce_size)``, if prepared already.
    """
    op = "QLinearSoftmax"
    x = _quantized_tensor(op, "X", x)
    x_scale = _scale(op, "X_scale", x_scale)
    y_scale = _scale(op, "y_scale", y_scale)
    zero_point = _zero_point(op, "y_zero_point", y_zero_point, x.dtype)
    if x.ndim == 0:
        _fail(op, "X", "is a scalar; a softmax needs at least one axis", given=())
    axis = _axis(op, axis, x.ndim)
    if int(opset) >= 13:
        moved = np.moveaxis(x, axis, -1)
        reduce_size = x.shape[axis]
    else:
        moved = x
        reduce_size = int(np.prod(x.shape[axis:], dtype=np.int64))
    if x.size == 0:
        return np.empty_like(x)
    if table is None:
        table = softmax_table(x_scale, reduce_size)
    table = np.asarray(table, np.float32)
    if table.shape != (256,):
        _fail(op, "table", f"has shape {table.shape}; a softmax table has 256 entries",
              given=table.shape)
    multiplier = float(np.floor(np.divide(np.float32(1), y_scale, dtype=np.float32)))
    rows = moved.reshape(-1, reduce_size)
    native = native_tables()
    # The kernel takes finite tables and multipliers (the NumPy statement
    # here covers a table given with infinities, or a subnormal y_scale).
    if (native is not None and x.size >= _NATIVE_LOOKUP_MIN_SIZE and math.isfinite(multiplier)
            and np.isfinite(table).all()):
        y = native.softmax_rows(rows, table, multiplier, zero_point)
    else:
        y = _softmax_rows(rows, table, multiplier, zero_point)
    y = y.reshape(moved.shape)
    return np.ascontiguousarray(np.moveaxis(y, -1, axis)) if int(opset) >= 13 else y


def _softmax_rows(rows, table, multiplier, zero_point):
    """QLinearSoftmax's rule (:func:`qlinear_softmax`) along each row of the
    2-D ``rows``, in NumPy; a new array of rows' shape and dtype."""
    dtype = rows.dtype
    rows = rows.view(np.uint8)
    if dtype == np.int8:
        # Flipping the sign bit maps int8 to uint8 in order (v -> v + 128), so
        # differences from the row's maximum stay what they were.
        rows = np.bitwise_xor(rows, np.uint8(0x80))
    # 255 + x - max(x) in uint8: x <= max(x), so it neither wraps nor goes below 0.
    offsets = np.subtract(np.uint8(255), rows.max(axis=1, keepdims=True))
    indices = np.add(rows, offsets)
    # The float32 sums add one element at a time, left to right, as
    # onnxruntime's loop does (np.sum's pairwise sum would round differently).
    by_column = rows.shape[0] >= _SOFTMAX_COLUMN_SUM_MIN_ROWS
    if by_column:
        # Softmaxes as columns: each step adds the next element of every
        # softmax at once (cheaper than np.cumsum along rows when they are many).
        exps = np.take(table, np.ascontiguousarray(indices.T))
        totals = exps[0].copy()
        for elements in exps[1:]:
            np.add(totals, elements, out=totals)
    else:
        exps = np.take(table, indices)
        totals = np.cumsum(exps, axis=1, dtype=np.float32)[:, -1:]
    totals = totals.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        # float64(e) * c / float64(total), with no float64 copy of the exponentials.
        quotients = np.multiply(exps, multiplier, dtype=np.float64)
        np.divide(quotients, totals, out=quotients)
    if not (np.isfinite(multiplier) and np.all(totals > 0) and np.all(np.isfinite(totals))):
        # An infinite multiplier (a subnormal y_scale) times an entry that
        # underflowed to 0, or a total of 0 or inf from a table given.
        quotients = np.where(exps == 0, 0.0, quotients)
    np.rint(quotients, out=quotients)
    np.add(quotients, zero_point, out=quotients)
    low, high = _RANGES[dtype]
    np.clip(quotients, low, high, out=quotients)
    y = quotients.astype(dtype)
    return np.ascontiguousarray(y.T) if by_column else y


#: From this many softmaxes on, their sums are taken a column at a time.
_SOFTMAX_COLUMN_SUM_MIN_ROWS = 256


def qlinear_softmax_node(inputs, attributes, opset):
    """com.microsoft QLinearSoftmax: X, X_scale, x_zero_point, y_scale,
    y_zero_point; ``opset`` (required) and ``axis``, -1 when absent whatever
    the opset (the schema's default, which onnxruntime gives the kernel)."""
    op = "QLinearSoftmax"
    x, x_scale, x_zero_point, y_scale, y_zero_point = _padded(inputs, 5)
    _check_attributes(op, attributes, ("axis", "opset"))
    if "opset" not in attributes:
        _fail(op, "opset", "is a required attribute (the opset of the Softmax it replaces)")
    softmax_opset = attributes["opset"]
    if not isinstance(softmax_opset, (int, np.integer)) or softmax_opset < 1:
        _fail(op, "opset", f"is {softmax_opset!r}; it must be a positive integer",
              given=softmax_opset)
    x = _quantized_tensor(op, "X", x)
    _zero_point(op, "x_zero_point", x_zero_point, x.dtype)
    if y_zero_point is None:
        _fail(op, "y_zero_point", "is required")
    axis = attributes.get("axis", -1)
    return [qlinear_softmax(x, x_scale, y_scale, y_zero_point, axis=axis,
                            opset=int(softmax_opset))]


# -- QLinearMul ----------------------------------------------------------------------------

def qlinear_mul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    """onnxruntime's QLinearMul (MLAS's ``MlasQLinearMul`` for x86), broadcasting.

    ::

        m = float32(float32(a_scale * b_scale) / y_scale)
        v = float32(float32(float32((a - a_zp) * (b - b_zp)) * m) + float32(y_zp))
        y = saturate(round_half_even(v))

    The product of the differences is exact (|value| <= 65025); unlike the
    matrix products, the zero point is added before rounding.  A ``v`` past
    2**31 in magnitude saturates here; onnxruntime's conversion makes it the
    type's minimum.

    Parameters
    ----------
    a, b : ndarray of uint8 or int8 (one type), broadcastable
    a_scale, b_scale, y_scale : float
    a_zero_point, b_zero_point, y_zero_point : int or array of the type, or None (0)

    Returns
    -------
    ndarray of a's type, of the broadcast shape
    """
    op = "QLinearMul"
    a = _quantized_tensor(op, "A", a)
    b = _quantized_tensor(op, "B", b, a.dtype)
    scales = [_scale(op, slot, value) for slot, value in
              (("A_scale", a_scale), ("B_scale", b_scale), ("C_scale", y_scale))]
    zero_points = [_zero_point(op, slot, value, a.dtype) for slot, value in
                   (("A_zero_point", a_zero_point), ("B_zero_point", b_zero_point),
                    ("C_zero_point", y_zero_point))]
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        _fail(op, "B", f"has shape {b.shape}, which does not broadcast with A's {a.shape}",
              given=b.shape)
    with np.errstate(over="ignore"):
        multiplier = np.divide(np.multiply(scales[0], scales[1], dtype=np.float32), scales[2],
                               dtype=np.float32)
    # Every path below evaluates the same rule (_mul_values), on the pairs
    # themselves or on every pair once; the results are the same bit for bit.
    size = int(np.prod(shape, dtype=np.int64))
    a_bytes, b_bytes = a.view(np.uint8), b.view(np.uint8)
    if size >= 256 and (a.size == 1 or b.size == 1):
        # One operand is a single value: a 256-entry row of the rule, indexed by the other.
        if b.size == 1:
            row = _mul_values(EVERY_BYTE[a.dtype], b.reshape(1), zero_points, multiplier)
            return apply_lookup_table(a, row).reshape(shape)
        row = _mul_values(a.reshape(1), EVERY_BYTE[a.dtype], zero_points, multiplier)
        return apply_lookup_table(b, row).reshape(shape)
    native = native_tables()
    if (native is not None and a.shape == b.shape == shape and size >= _MUL_COMPUTED_MIN_SIZE
            and np.isfinite(multiplier)):
        return native.mul(a, b, zero_points, multiplier)
    key = (a.dtype.char, float(multiplier), *zero_points)
    table = _MUL_TABLES.get(key)
    if table is None and size >= _MUL_TABLE_MIN_SIZE:
        table = _mul_table(key, multiplier, zero_points, a.dtype)
    if table is None or not shape:
        return _mul_values(a, b, zero_points, multiplier)
    if native is not None and a.shape == b.shape == shape:
        return native.lookup(a, table, b)
    # (a << 8) | b as uint16: the row-major index of the pair in the table.
    index = np.left_shift(a_bytes, 8, dtype=np.uint16)
    if index.shape == shape:
        np.bitwise_or(index, b_bytes, out=index)
    else:
        index = np.bitwise_or(index, b_bytes, dtype=np.uint16)
    return np.take(table, index)


#: Every value of each byte type, in byte order (entry i has raw byte i): the
#: inputs a 256-entry table is made from (here, and by the session's fusions).
EVERY_BYTE = {dtype: np.arange(256, dtype=np.uint8).view(dtype) for dtype in _BYTE_TYPES}
#: Tensors from this many elements on are multiplied through the 65536-entry
#: product table (building one costs about as much as applying the rule to
#: this many pairs); smaller ones take the rule directly unless a table for
#: their parameters is built already.
_MUL_TABLE_MIN_SIZE = 32768
#: Two tensors of one shape from this many elements on are multiplied in the
#: kernels by the rule itself (where they are built): lanes at a time, where
#: a table is read one byte at a time.
_MUL_COMPUTED_MIN_SIZE = 32768
_MUL_TABLES_KEPT = 16
#: (dtype char, multiplier, zero points) -> read-only product table, oldest first.
_MUL_TABLES = {}


def _mul_values(a, b, zero_points, multiplier):
    """QLinearMul's rule (see :func:`qlinear_mul`), element by element, broadcasting."""
    products = (a.astype(np.int32) - zero_points[0]) * (b.astype(np.int32) - zero_points[1])
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = np.multiply(products.astype(np.float32), multiplier, dtype=np.float32)
        values = np.add(scaled, np.float32(zero_points[2]), dtype=np.float32)
    # A zero product is the zero point even when the multiplier overflowed.
    values = np.where(products == 0, np.float32(zero_points[2]), values)
    return _saturate(np.rint(values), a.dtype)


def _mul_table(key, multiplier, zero_points, dtype):
    """The rule on every (a, b) pair: entry ``(byte(a) << 8) | byte(b)``.

    Each entry is the rule evaluated on its pair, so looking products up
    gives what evaluating the rule gives, bit for bit.  Kept for the last
    few parameter sets (a session's QDQ Mul groups reuse theirs on every run).
    """
    values = EVERY_BYTE[dtype]
    table = _mul_values(values[:, None], values[None, :], zero_points, multiplier).reshape(-1)
    table.flags.writeable = False
    _MUL_TABLES[key] = table
    while len(_MUL_TABLES) > _MUL_TABLES_KEPT:
        try:
            del _MUL_TABLES[next(iter(_MUL_TABLES))]
        except (KeyError, RuntimeError, StopIteration):  # another thread's eviction
            break
    return table


def qlinear_mul_node(inputs, attributes, opset):
    """com.microsoft QLinearMul: A, A_scale, A_zero_point, B, B_scale,
    B_zero_point, C_scale, C_zero_point."""
    _check_attributes("QLinearMul", attributes, ())
    return [qlinear_mul(*_padded(inputs, 8))]


# -- QLinearConcat and QLinearWhere --------------------------------------------------------

def _requantized(x, table):
    return x if table is None else apply_lookup_table(x, table)


def qlinear_concat(tensors, scales, zero_points, y_scale, y_zero_point, *, axis):
    """onnxruntime's QLinearConcat: each tensor requantized to y's parameters
    (:func:`requantize_table`), then concatenated along ``axis``.

    Parameters
    ----------
    tensors : sequence of ndarray of y_zero_point's type
    scales, zero_points : sequences of each tensor's parameters
    y_scale : float
    y_zero_point : int or array of uint8 or int8
        An array's type is the output's; with an int, the tensors' type
        comes from the first tensor.
    axis : int
    """
    op = "QLinearConcat"
    if not tensors:
        _fail(op, "inputs", "are missing; the node takes at least one (tensor, scale, "
              "zero point) triple")
    dtype = (np.asarray(y_zero_point).dtype if isinstance(y_zero_point, (np.ndarray, np.generic))
             else _quantized_tensor(op, "inputs[0]", tensors[0]).dtype)
    if dtype not in _BYTE_TYPES:
        _fail(op, "Y_zero_point", f"has dtype {dtype}; QLinearConcat takes int8 and uint8",
              DTypeValidationError, str(dtype))
    y_scale = _scale(op, "Y_scale", y_scale)
    y_zero = _zero_point(op, "Y_zero_point", y_zero_point, dtype, required=True)
    parts = []
    for index, (tensor, scale, zero_point) in enumerate(zip(tensors, scales, zero_points)):
        tensor = _quantized_tensor(op, f"inputs[{index}]", tensor, dtype)
        table = requantize_table(_scale(op, f"inputs[{index}] scale", scale),
                                 _zero_point(op, f"inputs[{index}] zero point", zero_point,
                                             dtype, required=True),
                                 y_scale, y_zero, dtype)
        parts.append(_requantized(tensor, table))
    rank = parts[0].ndim
    if rank == 0:
        _fail(op, "inputs[0]", "is a scalar; concatenation needs at least one axis", given=())
    axis = _axis(op, axis, rank)
    for index, part in enumerate(parts):
        if part.ndim != rank or part.shape[:axis] + part.shape[axis + 1:] != (
                parts[0].shape[:axis] + parts[0].shape[axis + 1:]):
            _fail(op, f"inputs[{index}]", f"has shape {part.shape}; every input must have "
                  f"inputs[0]'s shape {parts[0].shape} except along axis {axis}",
                  given=part.shape)
    return np.concatenate(parts, axis=axis)


def qlinear_concat_node(inputs, attributes, opset):
    """com.microsoft QLinearConcat: Y_scale, Y_zero_point, then (tensor,
    scale, zero point) triples; ``axis`` (required)."""
    op = "QLinearConcat"
    _check_attributes(op, attributes, ("axis",))
    if "axis" not in attributes:
        _fail(op, "axis", "is a required attribute")
    inputs = list(inputs)
    if len(inputs) < 5 or (len(inputs) - 2) % 3:
        _fail(op, "inputs", f"are {len(inputs)}; the node takes Y_scale, Y_zero_point and "
              "then (tensor, scale, zero point) triples", given=len(inputs))
    y_scale, y_zero_point = inputs[:2]
    if y_zero_point is None:
        _fail(op, "Y_zero_point", "is required")
    triples = inputs[2:]
    return [qlinear_concat(triples[0::3], triples[1::3], triples[2::3], y_scale,
                           np.asarray(y_zero_point), axis=attributes["axis"])]


def qlinear_where(condition, x, x_scale, x_zero_point, y, y_scale, y_zero_point, z_scale,
                  z_zero_point):
    """onnxruntime's QLinearWhere: ``where(condition, x', y')``, broadcasting
    the three, where x' and y' are x and y requantized to z's parameters
    (:func:`requantize_table`).  The zero points have x's type, which is y's
    and z's."""
    op = "QLinearWhere"
    if condition is None:
        _fail(op, "condition", "is required")
    condition = np.asarray(condition)
    if condition.dtype != np.bool_:
        _fail(op, "condition", f"has dtype {condition.dtype}; it must be bool",
              DTypeValidationError, str(condition.dtype))
    x = _quantized_tensor(op, "X", x)
    y = _quantized_tensor(op, "Y", y, x.dtype)
    z_scale = _scale(op, "z_scale", z_scale)
    z_zero = _zero_point(op, "z_zero_point", z_zero_point, x.dtype, required=True)
    chosen = []
    for name, tensor, scale, zero_point in (("x", x, x_scale, x_zero_point),
                                            ("y", y, y_scale, y_zero_point)):
        table = requantize_table(_scale(op, f"{name}_scale", scale),
                                 _zero_point(op, f"{name}_zero_point", zero_point, x.dtype,
                                             required=True),
                                 z_scale, z_zero, x.dtype)
        chosen.append(_requantized(tensor, table))
    try:
        np.broadcast_shapes(condition.shape, x.shape, y.shape)
    except ValueError:
        _fail(op, "condition", f"has shape {condition.shape}, which does not broadcast with X's "
              f"{x.shape} and Y's {y.shape}", given=condition.shape)
    return np.where(condition, chosen[0], chosen[1])


def qlinear_where_node(inputs, attributes, opset):
    """com.microsoft QLinearWhere: condition, X, x_scale, x_zero_point, Y,
    y_scale, y_zero_point, z_scale, z_zero_point."""
    _check_attributes("QLinearWhere", attributes, ())
    return [qlinear_where(*_padded(inputs, 9))]


# -- QGemm ---------------------------------------------------------------------------------

def qgemm(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c=None, y_scale=None,
          y_zero_point=None, *, alpha=1.0, trans_a=False, trans_b=False):
    """onnxruntime's QGemm (see :func:`qgemm_checked` for the rule)."""
    a2, b2, a_zero, tail = qgemm_checked(a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                                         c, y_scale, y_zero_point, alpha=alpha,
                                         trans_a=trans_a, trans_b=trans_b)
    return tail(a2, b2, a_zero)


def qgemm_checked(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c=None, y_scale=None,
                  y_zero_point=None, *, alpha=1.0, trans_a=False, trans_b=False):
    """onnxruntime's QGemm: ``alpha * A' @ B' + C`` in quantized form.

    With ``acc`` the exact sum of ``(a - a_zero_point) * (b - b_zero_point)``
    (:func:`qops.matrix_multiply_integer`) plus C, and per column n::

        s[n] = float32(float32(float32(alpha) * a_scale) * b_scale[n])
        s[n] = float32(s[n] / y_scale)                          if y_scale is given
        y    = saturate(round_half_even(float32(float32(acc) * s)) + y_zero_point)
                                                                 if y_zero_point is given
        y    = float32(float32(acc) * s)                         otherwise (float32 output)

    exactly what onnxruntime computes (its multiplier, then MLAS's
    requantization or scaling), its int32 sums apart.  Without
    ``y_zero_point`` the output is float32, divided by ``y_scale`` if that is
    given, as in onnxruntime; ``y_zero_point`` without ``y_scale`` takes 1.

    Parameters
    ----------
    a : ndarray of uint8 or int8, (M, K), or (K, M) with ``trans_a``
    a_scale : float
    a_zero_point : int or array of a's type
    b : ndarray of uint8 or int8, (K, N), or (N, K) with ``trans_b``
    b_scale : float or 1-D array of N float32 (per column)
    b_zero_point : int or array of b's type, per tensor or 1-D of N
    c : ndarray of int32, optional
        Broadcastable to (M, N) (``()``, ``(N,)``, ``(1, N)``, ``(M, 1)``,
        ``(M, N)``), in units of ``a_scale * b_scale``; added to the exact sums.
    y_scale : float, optional
    y_zero_point : 0-d or one-element array of uint8 or int8, optional
        Its type is the output's.
    alpha : float
    trans_a, trans_b : bool

    Raises
    ------
    qops.ValidationError
        Also for sums int32 cannot hold (onnxruntime's wrap around).

    Returns
    -------
    a, b, a_zero_point, tail
        A' and B' contiguous, A's zero point, and ``tail(a, b, a_zero_point)``
        the product (its ``requantized(sums)`` the rule from the exact sums).
    """
    op = "QGemm"
    a = _quantized_tensor(op, "A", a)
    b = _quantized_tensor(op, "B", b)
    for slot, value in (("A", a), ("B", b)):
        if value.ndim != 2:
            _fail(op, slot, f"has shape {value.shape}; QGemm takes 2-D matrices",
                  given=value.shape)
    a2 = a.T if trans_a else a
    b2 = b.T if trans_b else b
    (m, k), (k_b, n) = a2.shape, b2.shape
    if k != k_b:
        _fail(op, "B", f"has shape {b.shape}; with A of shape {a.shape} (transA={int(trans_a)}, "
              f"transB={int(trans_b)}) it needs {k} rows of the inner dimension", given=b.shape)
    a_scale = _scale(op, "a_scale", a_scale)
    a_zero = _zero_point(op, "a_zero_point", a_zero_point, a.dtype, required=True)
    b_scales = _scales(op, "b_scale", b_scale)
    if not (b_scales.ndim == 0 or (b_scales.ndim == 1 and b_scales.size in (1, n))):
        _fail(op, "b_scale", f"has shape {b_scales.shape}; it is a scalar or a 1-D tensor of 1 "
              f"or N = {n} values (per column)", given=b_scales.shape)
    _positive(op, "b_scale", b_scales)
    b_scales = b_scales.reshape(-1)
    if b_zero_point is None:
        _fail(op, "b_zero_point", "is required")
    b_zeros = _zero_point_tensor(op, "b_zero_point", b_zero_point, b.dtype)
    if not (b_zeros.ndim == 0 or (b_zeros.ndim == 1 and b_zeros.size in (1, n))):
        _fail(op, "b_zero_point", f"has shape {b_zeros.shape}; it is a scalar or a 1-D tensor "
              f"of 1 or N = {n} values (per column)", given=b_zeros.shape)
    if c is not None:
        c = np.asarray(c)
        if c.dtype != np.int32:
            _fail(op, "C", f"has dtype {c.dtype}; it must be int32", DTypeValidationError,
                  str(c.dtype))
        try:
            fits = c.ndim <= 2 and np.broadcast_shapes(c.shape, (m, n)) == (m, n)
        except ValueError:
            fits = False
        if not fits:
            _fail(op, "C", f"has shape {c.shape}; it must broadcast to (M, N) = {(m, n)}",
                  given=c.shape)
    y_scale = None if y_scale is None else _scale(op, "y_scale", y_scale)
    if y_zero_point is not None:
        y_zeros = np.asarray(y_zero_point)
        if y_zeros.dtype not in _BYTE_TYPES:
            _fail(op, "y_zero_point", f"has dtype {y_zeros.dtype}; the quantized output is int8 "
                  "or uint8", DTypeValidationError, str(y_zeros.dtype))
        y_zero = _zero_point(op, "y_zero_point", y_zeros, y_zeros.dtype)
    alpha = np.float32(alpha)
    if not np.isfinite(alpha):
        _fail(op, "alpha", f"is {float(alpha)!r}; it must be finite", given=float(alpha))

    tail = _QGemmTail(a.dtype, b_zeros, n, c, a_scale, b_scales, alpha, y_scale,
                      None if y_zero_point is None else (y_zero, y_zeros.dtype))
    return np.ascontiguousarray(a2), np.ascontiguousarray(b2), a_zero, tail


class _QGemmTail:
    """QGemm's checked constants: the exact sums of ``A' @ B'`` then
    onnxruntime's multiplier and requantization, with C and the multipliers
    made once (a session's QGemm keeps one, with B' compiled)."""

    def __init__(self, a_dtype, b_zeros, n, c, a_scale, b_scales, alpha, y_scale, y_zero):
        self.a_zero_dtype = a_dtype
        self.b_zero_point = b_zeros.reshape(()) if b_zeros.size == 1 else b_zeros.reshape(1, n)
        self.c = None if c is None else c.astype(np.int64)
        multipliers = np.multiply(np.multiply(alpha, a_scale, dtype=np.float32), b_scales,
                                  dtype=np.float32)
        with np.errstate(over="ignore"):
            if y_scale is not None:
                multipliers = np.divide(multipliers, y_scale, dtype=np.float32)
        self.multipliers = multipliers
        self.y_zero = y_zero

    def __call__(self, a, b, a_zero, compiled=None):
        if compiled is None:
            sums = api.matrix_multiply_integer(
                a=a, a_zero_point=np.asarray(a_zero, self.a_zero_dtype), b=b,
                b_zero_point=self.b_zero_point)
        else:
            sums = compiled(a)
        return self.requantized(sums)

    def requantized(self, sums):
        accumulator = sums.astype(np.int64)
        if self.c is not None:
            accumulator = accumulator + self.c
        if self.y_zero is None:
            with np.errstate(over="ignore"):
                return np.multiply(accumulator.astype(np.float32), self.multipliers,
                                   dtype=np.float32)
        y_zero, dtype = self.y_zero
        return reference.requantize(accumulator, self.multipliers, y_zero, dtype)


def qgemm_node(inputs, attributes, opset):
    """com.microsoft QGemm: A, a_scale, a_zero_point, B, b_scale,
    b_zero_point, C, y_scale, y_zero_point; ``alpha``, ``transA``, ``transB``
    (QGemm has no ``beta``: C enters as it is)."""
    op = "QGemm"
    _check_attributes(op, attributes, ("alpha", "transA", "transB"))
    flags = {}
    for name in ("transA", "transB"):
        value = attributes.get(name, 0)
        if value not in (0, 1):
            _fail(op, name, f"is {value!r}; it must be 0 or 1", given=value)
        flags[name] = bool(value)
    return [qgemm(*_padded(inputs, 9), alpha=attributes.get("alpha", 1.0),
                  trans_a=flags["transA"], trans_b=flags["transB"])]


# -- DynamicQuantizeMatMul -----------------------------------------------------------------

def dynamic_quantize_matmul_inputs(a, b, b_scale, b_zero_point=None, bias=None):
    """DynamicQuantizeMatMul's inputs checked: ``(a, b, b_scale, b_zero_point, bias)``.

    The node is ``A`` quantized to uint8 as DynamicQuantizeLinear quantizes
    it (scale and zero point from its range widened to include 0), then
    MatMulIntegerToFloat with B's parameters:
    ``float32(float32(acc) * float32(a_scale * b_scale)) + bias``; the
    adapter (see :func:`adapters`) runs those two nodes' adapters.

    Parameters
    ----------
    a : ndarray of float32, (..., M, K)
        Finite values, at least one.
    b : ndarray of uint8 or int8, (..., K, N)
    b_scale : float or 1-D array of N float32 (per column)
    b_zero_point : int or array of b's type, per tensor or 1-D of N, optional
    bias : ndarray of float32 (N,), optional
    """
    op = "DynamicQuantizeMatMul"
    if a is None:
        _fail(op, "A", "is required")
    a = np.asarray(a)
    if a.dtype != np.float32:
        _fail(op, "A", f"has dtype {a.dtype}; it must be float32", DTypeValidationError,
              str(a.dtype))
    if a.size == 0:
        _fail(op, "A", f"has shape {a.shape}; its quantization comes from its range, which an "
              "empty tensor does not have", given=a.shape)
    if not np.all(np.isfinite(a)):
        _fail(op, "A", "has NaN or infinite values; its quantization comes from its finite range")
    b = _quantized_tensor(op, "B", b)
    b_scales = _scales(op, "b_scale", b_scale)
    _positive(op, "b_scale", b_scales)
    if b_scales.ndim > 1:
        _fail(op, "b_scale", f"has shape {b_scales.shape}; it is a scalar or 1-D (per column)",
              given=b_scales.shape)
    if b_zero_point is not None:
        b_zero_point = _zero_point_tensor(op, "b_zero_point", b_zero_point, b.dtype)
    if bias is not None:
        bias = np.asarray(bias)
        if bias.dtype != np.float32 or bias.ndim != 1:
            _fail(op, "bias", f"is {bias.dtype} of shape {bias.shape}; it must be a 1-D float32 "
                  "tensor of N values", DTypeValidationError if bias.dtype != np.float32
                  else ValidationError, str(bias.dtype))
    return a, b, b_scales, b_zero_point, bias


_ADAPTERS = {
    "QGemm": qgemm_node,
    "QLinearMul": qlinear_mul_node,
    "QLinearLeakyRelu": qlinear_leaky_relu_node,
    "QLinearSigmoid": qlinear_sigmoid_node,
    "QLinearSoftmax": qlinear_softmax_node,
    "QLinearConcat": qlinear_concat_node,
    "QLinearWhere": qlinear_where_node,
}

#: The com.microsoft operators of this module.
OPERATORS = (*_ADAPTERS, "DynamicQuantizeMatMul")


def adapters(dynamic_quantize_linear, matmul_integer_to_float):
    """``op_type -> adapter(inputs, attributes, opset) -> outputs`` for :data:`OPERATORS`.

    DynamicQuantizeMatMul runs as the two adapters given, DynamicQuantizeLinear's
    then MatMulIntegerToFloat's: :mod:`qops.onnx._nodes` passes its own in
    (it imports this module, so this module does not import it).
    """
    def dynamic_quantize_matmul_node(inputs, attributes, opset):
        """com.microsoft DynamicQuantizeMatMul: A, B, b_scale, b_zero_point, bias."""
        _check_attributes("DynamicQuantizeMatMul", attributes, ())
        a, b, b_scale, b_zero_point, bias = dynamic_quantize_matmul_inputs(*_padded(inputs, 5))
        quantized, a_scale, a_zero_point = dynamic_quantize_linear([a], {}, opset)
        return matmul_integer_to_float(
            [quantized, b, a_scale, b_scale, a_zero_point, b_zero_point, bias], {}, opset)

    return dict(_ADAPTERS, DynamicQuantizeMatMul=dynamic_quantize_matmul_node)
