"""ONNX operators written in vectorized NumPy, where ``onnx.reference``'s
own are loops in Python (MaxPool: seconds for ResNet-50's first pooling) or
call a scalar function per element (Erf), or make a new array at every step
(Softmax, LayerNormalization).

``implementation(node, attributes, opset)`` returns ``run(arguments) ->
outputs`` for a node these cover, or None, and the session then takes
``onnx.reference``'s.  Each gives what ``onnx.reference`` gives, except
where its docstring says otherwise (Erf's float32 approximation is within a
stated bound; Softmax before opset 13 and LayerNormalization on 16-bit floats
follow ONNX's definition where onnx.reference does not); the tests compare
them.
"""

from __future__ import annotations

import math

import numpy as np


def native_tables():
    """:mod:`qops.backends.native.tables` where the compiled kernels are
    built, else None (the NumPy statements then run alone)."""
    try:
        from qops.backends.native import tables
    except ImportError:
        return None
    return tables if tables.built() else None


def _lowest(dtype):
    """The value a padded MaxPool position takes: below every element."""
    if np.issubdtype(dtype, np.integer):
        return np.iinfo(dtype).min
    return -np.inf


def _pool_geometry(sizes, kernel, strides, dilations, pads, auto_pad, ceil_mode):
    """(begins, ends, output sizes) per spatial axis, as ONNX's pooling
    defines them (ceil mode drops a window that would start in the end
    padding)."""
    rank = len(sizes)
    begins, ends, outputs = [], [], []
    for axis in range(rank):
        size, k, s, d = sizes[axis], kernel[axis], strides[axis], dilations[axis]
        extent = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = -(-size // s)
            total = max(0, (out - 1) * s + extent - size)
            small, large = total // 2, total - total // 2
            begin, end = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
        elif auto_pad == "VALID":
            begin = end = 0
            out = (size - extent) // s + 1
        else:
            begin, end = pads[axis], pads[axis + rank]
            span = size + begin + end - extent
            out = (-(-span // s) if ceil_mode else span // s) + 1
            if ceil_mode and (out - 1) * s >= size + begin:
                out -= 1
        begins.append(begin)
        ends.append(end)
        outputs.append(max(out, 0))
    return begins, ends, outputs


def max_pool(node, attributes, opset):
    """MaxPool's first output (a node that asks for Indices is left to onnx.reference)."""
    if len([name for name in node.output if name]) != 1 or node.output[0] == "":
        return None
    kernel = attributes.get("kernel_shape")
    if not kernel:
        return None
    rank = len(kernel)
    strides = tuple(attributes.get("strides") or (1,) * rank)
    dilations = tuple(attributes.get("dilations") or (1,) * rank)
    pads = tuple(attributes.get("pads") or (0,) * (2 * rank))
    auto_pad = attributes.get("auto_pad", "NOTSET") or "NOTSET"
    ceil_mode = bool(attributes.get("ceil_mode", 0))
    if len(strides) != rank or len(dilations) != rank or len(pads) != 2 * rank:
        return None

    def run(arguments):
        x = np.asarray(arguments[0])
        if x.ndim != rank + 2:
            raise ValueError(f"MaxPool: X has {x.ndim} dimensions; kernel_shape has {rank} "
                             "values, so X takes "
                             f"{rank + 2}")
        begins, ends, outputs = _pool_geometry(x.shape[2:], kernel, strides, dilations, pads,
                                               auto_pad, ceil_mode)
        extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
        # Pad far enough for every window the output has, the extra with the lowest value.
        needed = [(o - 1) * s + e if o else 0 for o, s, e in zip(outputs, strides, extents)]
        after = [max(end, need - begin - size) for end, need, begin, size
                 in zip(ends, needed, begins, x.shape[2:])]
        if not all(outputs):
            return [np.empty(x.shape[:2] + tuple(outputs), x.dtype)]
        tables = native_tables()
        if (tables is not None and rank <= 2 and x.dtype in (np.uint8, np.int8)
                and min(begins) >= 0):
            # The kernels' planes are 2-D: a 1-D pooling is one of height 1.
            ones = (1,) * (2 - rank)
            y = tables.max_pool_bytes(x.reshape(x.shape[:2] + ones + x.shape[2:]),
                                      ones + tuple(kernel), ones + strides, ones + dilations,
                                      (0,) * (2 - rank) + tuple(begins),
                                      ones + tuple(outputs))
            return [y.reshape(x.shape[:2] + tuple(outputs))]
        # Bytes compare as uint8: int8 with its sign bit flipped keeps its order.
        flip = x.dtype == np.int8
        paired = x.dtype in (np.uint8, np.int8) and strides[-1] == 2 and dilations[-1] == 1
        if paired:
            # Whole pairs along the last axis, each tap's pair there.
            last = max(x.shape[-1] + begins[-1] + after[-1],
                       2 * (outputs[-1] + (kernel[-1] - 1) // 2))
            after[-1] = last + last % 2 - x.shape[-1] - begins[-1]
        sizes = [b + size + a for b, size, a in zip(begins, x.shape[2:], after)]
        lowest = np.uint8(0) if flip else _lowest(x.dtype)
        padded = np.full(x.shape[:2] + tuple(sizes), lowest,
                         np.uint8 if flip else x.dtype)
        inside = (slice(None), slice(None)) + tuple(
            slice(b, b + size) for b, size in zip(begins, x.shape[2:]))
        if flip:
            np.bitwise_xor(x.view(np.uint8), np.uint8(0x80), out=padded[inside])
        else:
            padded[inside] = x
        # A window's maximum is the maximum over each axis in turn, so each
        # axis takes its own taps: a pass per tap of one axis rather than per
        # tap of the whole window.  Outer axes first: their slices are whole
        # rows, and the innermost axis, read with the stride, is then smallest.
        result = padded
        passes = list(enumerate(zip(kernel, dilations, outputs, strides)))
        for axis, (k, d, o, s) in passes[:-1] if paired else passes:
            index = [slice(None)] * padded.ndim
            reduced = None
            for tap in range(k):
                index[axis + 2] = slice(tap * d, tap * d + (o - 1) * s + 1, s)
                view = result[tuple(index)]
                reduced = view.copy() if reduced is None else np.maximum(reduced, view,
                                                                            out=reduced)
            result = reduced
        if paired:
            # Stride 2 along the last axis: its bytes as pairs in uint16, the
            # even taps the pairs' low bytes and the odd ones their high
            # bytes, so that every pass reads contiguous values (NumPy does
            # not vectorize a pass over bytes read with a stride).
            pairs = np.ascontiguousarray(result).view("<u2")
            halves = (np.bitwise_and(pairs, np.uint16(0xFF)), np.right_shift(pairs, 8))
            reduced = None
            for tap in range(kernel[-1]):
                view = halves[tap % 2][..., tap // 2:tap // 2 + outputs[-1]]
                reduced = view.copy() if reduced is None else np.maximum(reduced, view,
                                                                            out=reduced)
            result = reduced.astype(np.uint8)
        if flip:
            result = np.bitwise_xor(result, np.uint8(0x80), out=result).view(np.int8)
        elif result.dtype != x.dtype:
            result = result.view(x.dtype)
        return [result]

    def run_channels_last(arguments):
        """``run`` of a channels-last image (N x H x W x C), its output so:
        the kernels' pooling of channels-last bytes, else ``run`` on the
        image transposed."""
        x = np.asarray(arguments[0])
        tables = native_tables()
        if (tables is not None and rank == 2 and x.ndim == 4
                and x.dtype in (np.uint8, np.int8)):
            begins, _, outputs = _pool_geometry(x.shape[1:3], kernel, strides, dilations,
                                                pads, auto_pad, ceil_mode)
            if min(begins) >= 0:
                return [tables.max_pool_channels_last(x, kernel, strides, dilations, begins,
                                                      outputs)]
        (y,) = run([x.transpose(0, x.ndim - 1, *range(1, x.ndim - 1))])
        return [np.ascontiguousarray(np.moveaxis(y, 1, -1))]

    run.channels_last = run_channels_last
    return run


# -- Erf ------------------------------------------------------------------------------------

# erf(x) = x + x * q(x * x) for |x| < 0.875, q of degree 5, and
# erf(x) = 1 - C * exp(u * P(u)), u = |x| - 0.875, for 0.875 <= |x| <= 4, P of
# degree 5 and C = float32(erfc(0.875)).  Both fitted against float64 erf / erfc
# by weighted minimax (Lawson's iteratively reweighted least squares; weights
# that make the error one in units of the result's last place), then rounded to
# float32 one coefficient at a time, the remaining ones refitted after each.
_ERF_SPLIT = np.float32(0.875)
_ERF_SMALL = tuple(np.float32(c) for c in (
    0.12837916612625122, -0.3761255145072937, 0.11282455176115036,
    -0.026791462674736977, 0.005032181274145842, -0.0006203255034051836))
_ERF_LARGE = tuple(np.float32(c) for c in (
    -2.4302175045013428, -0.8265727758407593, -0.04675295948982239,
    0.011045346967875957, -0.0019178815418854356, 0.00016856628644745797))
_ERFC_AT_SPLIT = np.float32(0.215924933552742)
# erfc(x) < 2**-25 from x = 3.92 on, where float32 erf is 1.
_ERF_CLAMP = np.float32(4.0)
_SIGN_BIT = np.uint32(0x80000000)
# Elements per block: the five float32 buffers of a block (256 KiB each) stay in
# a core's L2 cache; on 128 x 3072 values the blocks take a third of the time
# whole-array passes take.
_ERF_BLOCK = 65536


def _erf_block(x, out, magnitude, square, tail):
    """float32 erf of the 1-D block ``x`` into ``out`` (the other three are scratch)."""
    np.abs(x, out=magnitude)
    # NaN stays NaN through the clip (and gives NaN below); infinities become 4.
    np.clip(magnitude, np.float32(0), _ERF_CLAMP, out=magnitude)
    np.multiply(magnitude, magnitude, out=square)
    # Small branch into tail: |x| + |x| * q(x^2), Horner's rule.
    np.multiply(square, _ERF_SMALL[-1], out=tail)
    for coefficient in _ERF_SMALL[-2:0:-1]:
        np.add(tail, coefficient, out=tail)
        np.multiply(tail, square, out=tail)
    np.add(tail, _ERF_SMALL[0], out=tail)
    np.multiply(tail, magnitude, out=tail)
    np.add(tail, magnitude, out=tail)
    # Large branch into out: 1 - C * exp(u * P(u)).  Centring on the split keeps
    # the exponent small where erfc is large, so its rounding hardly shows.
    offset = square
    np.subtract(magnitude, _ERF_SPLIT, out=offset)
    np.multiply(offset, _ERF_LARGE[-1], out=out)
    for coefficient in _ERF_LARGE[-2::-1]:
        np.add(out, coefficient, out=out)
        np.multiply(out, offset, out=out)
    np.exp(out, out=out)
    np.multiply(out, _ERFC_AT_SPLIT, out=out)
    np.subtract(np.float32(1), out, out=out)
    # Blend without a branch: the offset's sign, spread over all 32 bits, is an
    # all-ones mask exactly where the small branch applies (np.where costs
    # several times as much on a mixed mask).
    mask = offset.view(np.int32)
    np.right_shift(mask, 31, out=mask)
    large_bits, small_bits = out.view(np.int32), tail.view(np.int32)
    np.bitwise_xor(small_bits, large_bits, out=small_bits)
    np.bitwise_and(small_bits, mask, out=small_bits)
    np.bitwise_xor(large_bits, small_bits, out=large_bits)
    # erf is odd: x's sign bit onto the non-negative result (keeps -0.0).
    sign = magnitude.view(np.uint32)
    np.bitwise_and(x.view(np.uint32), _SIGN_BIT, out=sign)
    np.bitwise_or(out.view(np.uint32), sign, out=out.view(np.uint32))


def erf_float32(x):
    """The error function of float32 values, vectorized, within 2 ulp of erf.

    Two approximations fitted for float32 (constants above), evaluated with
    float32 NumPy passes over blocks of the input:

    * ``|x| < 0.875``: ``erf(x) = x + x * q(x**2)``, q a degree-5 polynomial
      (adding ``x`` last keeps the relative error small for small ``x``,
      subnormals included);
    * ``0.875 <= |x|``: ``erf(x) = 1 - C * exp(u * P(u))`` with ``u = |x| - 0.875``
      (``|x|`` clamped to 4, where erf is 1 in float32), P a degree-5
      polynomial and ``C = erfc(0.875)``; the exponential's own error is
      scaled down by ``erfc(x) <= 0.22`` in the result.

    Both branches are evaluated for every element and blended by bit
    operations; the sign is x's.  NaN gives NaN, +-inf give +-1, -0.0 gives
    -0.0.

    Accuracy: the fit's error is well inside the 2 ulp the tests hold it
    to, which leaves room for the error of NumPy's float32 ``exp`` (each ulp
    of it adds at most a quarter ulp here, scaled down by ``erfc``); beyond
    ``|x| = 6`` the result is +-1, erf rounded to float32.  It is faster than
    SciPy's float32 ``special.erf``, which is why float32 does not use SciPy;
    the measured error and times are in docs/benchmarks.rst.

    Parameters
    ----------
    x : array_like of float32

    Returns
    -------
    ndarray of float32, shaped as ``x``
    """
    x = np.asarray(x, dtype=np.float32)
    flat = x.reshape(-1)  # a copy where x is not contiguous
    out = np.empty_like(flat)
    size = min(_ERF_BLOCK, flat.size)
    scratch = [np.empty(size, np.float32) for _ in range(3)]
    # Infinities and NaN meet 0 * inf and inf - inf in the discarded branch.
    with np.errstate(all="ignore"):
        for start in range(0, flat.size, _ERF_BLOCK):
            stop = min(start + _ERF_BLOCK, flat.size)
            count = stop - start
            _erf_block(flat[start:stop], out[start:stop], *(buffer[:count] for buffer in scratch))
    return out.reshape(x.shape)


def _erf_float32(x):
    """:func:`erf_float32`'s approximation on the compiled kernels where they
    are built (:func:`qops.backends.native.tables.erf_float32`, its own
    exponential within the same bound), else in NumPy."""
    tables = native_tables()
    return erf_float32(x) if tables is None else tables.erf_float32(x)


def erf(node, attributes, opset):
    """Erf: float32 and float16 by :func:`erf_float32`'s approximation
    (:func:`_erf_float32`; float16 rounded from its float32 result); float64
    by SciPy's ``special.erf`` where SciPy is installed; anything else by
    ``math.erf`` element by element, as onnx.reference does."""
    def run(arguments):
        x = np.asarray(arguments[0])
        if x.dtype == np.float32:
            return [_erf_float32(x)]
        if x.dtype == np.float16:
            return [_erf_float32(x.astype(np.float32)).astype(np.float16)]
        if x.dtype == np.float64:
            try:
                from scipy import special
            except ImportError:
                pass
            else:
                return [special.erf(x)]
        return [np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)]

    return run


# -- GELU ---------------------------------------------------------------------------------------

#: The element types ONNX's Gelu (opset 20) and onnxruntime's Gelu, BiasGelu
#: and FastGelu take.
_GELU_TYPES = ("float16", "float32", "float64", "bfloat16")


def _gelu_input(x, op_type):
    x = np.asarray(x)
    if x.dtype.name not in _GELU_TYPES:
        raise TypeError(f"{op_type}: X is {x.dtype}; it takes {', '.join(_GELU_TYPES)}")
    return x


def _like(x, value):
    """A float32 constant cast to x's type, as the function's CastLike does."""
    return x.dtype.type(np.float32(value))


def gelu_of(x, approximate="none"):
    """ONNX's Gelu function (opset 20) of ``x``, each constant cast to x's
    type and each step rounded to it: ``(0.5 * x) * (1 + erf(x / sqrt(2)))``,
    or with ``approximate="tanh"`` ``(0.5 * x) * (1 + tanh(sqrt(2 / pi) * (x
    + 0.044715 * x ** 3)))``.  The erf is the session's Erf (:func:`erf`: in
    float32 :func:`erf_float32`'s approximation, within 2 ulp, so the erf form
    is within that of onnx.reference's); float32's erf form runs fused on the
    compiled kernels (:func:`qops.backends.native.tables.gelu_float32`, the
    same steps).  The tanh form is NumPy's, the steps onnx.reference takes."""
    half, one = _like(x, 0.5), _like(x, 1.0)
    if approximate == "tanh":
        root = np.sqrt(_like(x, 0.63661975))
        cubed = np.power(x, _like(x, 3.0))
        return (half * x) * (one + np.tanh(root * (x + _like(x, 0.044715) * cubed)))
    root_two = np.sqrt(_like(x, 2.0))
    tables = native_tables() if x.dtype == np.float32 else None
    if tables is not None:
        return tables.gelu_float32(x, root_two, one, half, factor_first=True)
    return (half * x) * (one + _erf_of(x / root_two))


def _erf_of(x):
    return erf(None, {}, None)([x])[0]


def _inputs_between(node, op_type, least, most):
    """A node's inputs counted (omitted trailing ones aside) against its
    operator's, where the session loads it: ValueError naming both."""
    names = list(node.input) if node is not None else []
    while names and not names[-1]:
        names.pop()
    if not least <= len(names) <= most or (names and not all(names[:least])):
        takes = f"{least}" if least == most else f"{least} to {most}"
        raise ValueError(f"{op_type} takes {takes} inputs (the first {least} required); "
                         f"the node has {len(names)}: {names}")


def gelu(node, attributes, opset):
    """Gelu (opset 20): :func:`gelu_of`, its ``approximate`` "none" or "tanh";
    None before opset 20, where ONNX has no Gelu."""
    if opset is not None and opset < 20:
        return None
    _inputs_between(node, "Gelu", 1, 1)
    approximate = attributes.get("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise ValueError(f"Gelu: approximate is {approximate!r}; it takes 'none' or 'tanh'")

    def run(arguments):
        return [gelu_of(_gelu_input(arguments[0], "Gelu"), approximate)]

    return run


def contrib_gelu(node, attributes, opset):
    """com.microsoft Gelu: ``0.5 * x * (1 + erf(x / sqrt(2)))`` as ONNX's Gelu
    computes it (:func:`gelu_of`)."""
    _inputs_between(node, "Gelu", 1, 1)

    def run(arguments):
        return [gelu_of(_gelu_input(arguments[0], "Gelu"))]

    return run


def bias_gelu(node, attributes, opset):
    """com.microsoft BiasGelu: Gelu of ``A + B``, B broadcast as NumPy
    broadcasts (a bias along the last axis)."""
    _inputs_between(node, "BiasGelu", 2, 2)

    def run(arguments):
        a, b = (_gelu_input(value, "BiasGelu") for value in arguments[:2])
        if a.dtype != b.dtype:
            raise TypeError(f"BiasGelu: A is {a.dtype} and B {b.dtype}; both take one type")
        return [gelu_of(a + b)]

    return run


def fast_gelu(node, attributes, opset):
    """com.microsoft FastGelu: ``0.5 * x * (1 + tanh(0.797885 * x + 0.035677 *
    x * x * x))`` with ``x = X + bias`` where the bias is given, as its
    schema writes it, left to right in X's type (onnxruntime's kernel orders
    the terms differently: within a few units of float32's last place of
    ``|x|``, since ``1 + tanh`` cancels for large negative x)."""
    _inputs_between(node, "FastGelu", 1, 2)

    def run(arguments):
        x = _gelu_input(arguments[0], "FastGelu")
        bias = arguments[1] if len(arguments) > 1 else None
        if bias is not None:
            bias = _gelu_input(bias, "FastGelu")
            if bias.dtype != x.dtype:
                raise TypeError(f"FastGelu: X is {x.dtype} and bias {bias.dtype}; both take "
                                "one type")
            x = x + bias
        inner = _like(x, 0.797885) * x + _like(x, 0.035677) * x * x * x
        return [_like(x, 0.5) * x * (_like(x, 1.0) + np.tanh(inner))]

    return run


# -- Softmax and LayerNormalization ---------------------------------------------------------

def softmax(node, attributes, opset, before=None):
    """Softmax: ``exp(x - max) / sum(exp(x - max))`` along ``axis`` (from
    opset 13, default -1), or over the sizes from ``axis`` on taken as one
    (before 13, default 1), in x's type, computed in one buffer.

    The steps are onnx.reference's (its sum is NumPy's along the axis too),
    which makes the results equal for opset 13 on; onnx.reference applies the
    opset-13 rule at every opset, qops the earlier opsets' own.  With the
    opset unknown (None) the node is declined.

    float32 along the last axis goes to the compiled kernels where they are
    built (:func:`qops.backends.native.tables.softmax_float32`): the same
    steps with an exponential of their own and the sum in float64, within 3
    units in the last place of the exact softmax of ``x - max`` (NumPy's own
    float32 sum loses more: docs/models.rst).

    ``before`` is a Div or Mul node's step taken in, ``("Div", c)`` or
    ``("Mul", c)`` with ``c`` a constant of one value: the softmax of
    ``x / c`` or ``x * c``, the quotient or product rounded as NumPy rounds it
    (so as those nodes make it), in the shape the two broadcast to.
    """
    if opset is None or len(node.output) != 1:
        return None
    single_axis = opset >= 13
    axis = attributes.get("axis", -1 if single_axis else 1)
    operation, constant = before or (None, None)

    def run(arguments):
        x = np.asarray(arguments[0])
        if operation is not None:
            x = x.reshape(np.broadcast_shapes(x.shape, constant.shape))
        if x.dtype.kind != "f":
            raise TypeError(f"Softmax takes floating-point tensors, not {x.dtype}")
        if x.ndim == 0:
            raise ValueError("Softmax: X is a scalar; it needs an axis")
        if not -x.ndim <= axis < x.ndim:
            raise ValueError(f"Softmax: axis {axis} is out of range for {x.ndim} dimensions")
        if single_axis:
            view, along = x, axis
        else:  # the sizes from axis on as one axis
            view = x.reshape(int(np.prod(x.shape[:axis % x.ndim], dtype=np.int64)), -1)
            along = 1
        tables = native_tables()
        if (tables is not None and x.size and x.dtype == np.float32
                and along % view.ndim == view.ndim - 1
                and (operation is None or constant.dtype == np.float32)):
            scalar = None if operation is None else constant.reshape(())
            return [tables.softmax_float32(
                view, divisor=scalar if operation == "Div" else None,
                multiplier=scalar if operation == "Mul" else None).reshape(x.shape)]
        if operation is not None:
            view = (np.divide if operation == "Div" else np.multiply)(view, constant.reshape(()))
        if x.size == 0:
            return [view.reshape(x.shape).copy()]
        y = np.subtract(view, view.max(axis=along, keepdims=True))
        np.exp(y, out=y)
        np.divide(y, y.sum(axis=along, keepdims=True), out=y)
        return [y.reshape(x.shape)]

    return run


def _one_per_column(x, value, start):
    """Whether ``value``'s shape, with ones before it to x's rank, is ones
    before ``start`` and x's own sizes from there: one value per element of a
    row, the same for every row."""
    shape = np.shape(value)
    if len(shape) > x.ndim:
        return False
    padded = (1,) * (x.ndim - len(shape)) + tuple(shape)
    return all(size == 1 for size in padded[:start]) and padded[start:] == x.shape[start:]


def _native_layer_normalization(x, scale, bias, start):
    """The compiled kernels' LayerNormalization
    (:func:`qops.backends.native.tables.layer_normalization`) where they are
    built and the call is float32 rows (axes from ``start`` on) with a scale
    (and bias) of one value per column; else None."""
    if x.dtype != np.float32 or scale.dtype != np.float32 or not _one_per_column(
            x, scale, start):
        return None
    if bias is not None and (np.asarray(bias).dtype != np.float32
                             or not _one_per_column(x, bias, start)):
        return None
    tables = native_tables()
    return None if tables is None else tables.layer_normalization


def layer_normalization(node, attributes, opset):
    """LayerNormalization's Y (a node that asks for Mean or InvStdDev is left
    to onnx.reference), in one full-size buffer where onnx.reference's steps
    make five.

    Over the sizes from ``axis`` on (default -1), per row::

        mean = sum(x) / n;  d = x - mean
        Y = d * (1 / sqrt(sum(d * d) / n + epsilon)) * Scale  (+ B)

    with onnx.reference's operations in its order except for the order of
    the additions in the two sums (einsum's, not np.sum's pairwise order;
    on the compiled kernels, for float32 with a scale and bias of one value
    per column, sixteen lanes of the kernel's own): float32 results agree
    with its to a few ulp of the mean, magnified by
    ``1 / sqrt(variance + epsilon)``.  ``stash_type`` 1 (the default)
    computes float16 and bfloat16 in float32 as ONNX defines it
    (onnx.reference stays in the input's type); float64 stays in float64.
    Other stash types are declined.
    """
    outputs = [name for name in node.output[1:] if name]
    if outputs or attributes.get("stash_type", 1) != 1:
        return None
    axis = int(attributes.get("axis", -1))
    epsilon = float(attributes.get("epsilon", 1e-5))

    def run(arguments):
        x, scale, bias = (list(arguments) + [None, None])[:3]
        x, scale = np.asarray(x), np.asarray(scale)
        if x.dtype.kind not in "fV" or x.ndim == 0:
            raise TypeError(f"LayerNormalization takes a floating-point tensor of at least one "
                            f"dimension, not {x.dtype} of shape {x.shape}")
        if not -x.ndim <= axis < x.ndim:
            raise ValueError(f"LayerNormalization: axis {axis} is out of range for {x.ndim} "
                             "dimensions")
        start = axis % x.ndim
        work = np.float64 if x.dtype == np.float64 else np.float32
        rows = int(np.prod(x.shape[:start], dtype=np.int64))
        count = int(np.prod(x.shape[start:], dtype=np.int64))
        if x.size == 0:
            return [np.empty(np.broadcast_shapes(x.shape, scale.shape), x.dtype)]
        matrix = x.reshape(rows, count).astype(work, copy=False)
        native = _native_layer_normalization(x, scale, bias, start)
        if native is not None:
            return [native(matrix, scale, bias, epsilon).reshape(x.shape)]
        # einsum's row sums: one pass each, no squares array, and (unlike a
        # BLAS product) the same order of additions at any thread count.
        mean = np.einsum("ij->i", matrix) / work(count)
        centred = np.subtract(matrix, mean[:, None])
        variance = np.einsum("ij,ij->i", centred, centred) / work(count)
        inverse = np.reciprocal(np.sqrt(variance + work(epsilon)))
        np.multiply(centred, inverse[:, None], out=centred)
        y = centred.reshape(x.shape)
        scale = scale.astype(work, copy=False)
        if np.broadcast_shapes(x.shape, scale.shape) == x.shape:
            np.multiply(y, scale, out=y)
        else:
            y = y * scale
        if bias is not None:
            bias = np.asarray(bias).astype(work, copy=False)
            if np.broadcast_shapes(y.shape, bias.shape) == y.shape:
                np.add(y, bias, out=y)
            else:
                y = y + bias
        return [y.astype(x.dtype, copy=False)]

    return run


# -- Flatten, Reshape and Transpose ---------------------------------------------------------
# Pure data movement, so NumPy's reshape and transpose are the definition
# (views where NumPy makes them, as onnx.reference returns); here rather
# than on onnx.reference for its fixed cost per node, which the graphs'
# reshapes between attention heads and before a classifier pay on tiny
# tensors.

def flatten(node, attributes, opset):
    """Flatten: the dimensions before ``axis`` (default 1, negative from
    the end) as the rows of a matrix, the rest as its columns."""
    axis = int(attributes.get("axis", 1))

    def run(arguments):
        x = np.asarray(arguments[0])
        at = axis + x.ndim if axis < 0 else axis
        if not 0 <= at <= x.ndim:
            raise ValueError(f"Flatten: axis {axis} is outside a tensor of rank {x.ndim}")
        return [x.reshape(math.prod(x.shape[:at]), math.prod(x.shape[at:]))]

    return run


def reshape(node, attributes, opset):
    """Reshape with the shape as an input (opset 5 on): a 0 copies the
    input's dimension at its place unless ``allowzero`` (opset 14 on), one
    -1 is inferred; ``None`` before opset 5 or with the opset unknown."""
    if opset is None or opset < 5:
        return None
    allowzero = int(attributes.get("allowzero", 0))

    def run(arguments):
        x = np.asarray(arguments[0])
        shape = np.array(arguments[1], dtype=np.int64).reshape(-1)
        if not allowzero:
            zeros = np.flatnonzero(shape == 0)
            if zeros.size and zeros[-1] >= x.ndim:
                raise ValueError(f"Reshape: shape {shape.tolist()} copies dimension "
                                 f"{int(zeros[-1])} of a tensor of rank {x.ndim}")
            shape[zeros] = np.asarray(x.shape, np.int64)[zeros]
        return [x.reshape(tuple(int(size) for size in shape))]

    return run


def transpose(node, attributes, opset):
    """Transpose: the axes in ``perm``'s order (default: reversed)."""
    perm = attributes.get("perm")
    axes = None if perm is None else tuple(int(axis) for axis in perm)

    def run(arguments):
        return [np.transpose(np.asarray(arguments[0]), axes)]

    return run


# -- Add, Sub and Mul -----------------------------------------------------------------------
# onnx.reference's are NumPy's ufunc of two operands of one dtype; here
# without its fixed cost per node (a transformer's residual Adds).

def _binary(ufunc, op_type):
    def implementation(node, attributes, opset):
        """``{op}``: NumPy's ``{ufunc}`` of two operands of one dtype, broadcast
        as NumPy broadcasts (ONNX's multidirectional rule)."""
        def run(arguments):
            a, b = (np.asarray(value) for value in arguments[:2])
            if a.dtype != b.dtype:
                raise TypeError(f"{op_type}: A is {a.dtype} and B {b.dtype}; both take one type")
            return [np.asarray(ufunc(a, b))]

        return run

    implementation.__doc__ = implementation.__doc__.format(op=op_type, ufunc=ufunc.__name__)
    return implementation


add = _binary(np.add, "Add")
subtract = _binary(np.subtract, "Sub")
multiply = _binary(np.multiply, "Mul")


#: op_type -> implementation(node, attributes, opset), for the default domain.
IMPLEMENTATIONS = {"MaxPool": max_pool, "Erf": erf, "Gelu": gelu, "Softmax": softmax,
                   "LayerNormalization": layer_normalization, "Flatten": flatten,
                   "Reshape": reshape, "Transpose": transpose, "Add": add, "Sub": subtract,
                   "Mul": multiply}

#: op_type -> implementation(node, attributes, opset), for onnxruntime's
#: com.microsoft domain (its float operators; the quantized ones are
#: qops.onnx._nodes' adapters).
CONTRIB_IMPLEMENTATIONS = {"Gelu": contrib_gelu, "BiasGelu": bias_gelu, "FastGelu": fast_gelu}
