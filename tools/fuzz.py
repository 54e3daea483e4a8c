"""Fuzz the boundary between validation and the kernels (atheris).

Each input becomes one call of a public operator: dtypes drawn from every
NumPy and ml_dtypes type qops knows plus some it does not, shapes with zero
and large sizes, strided and reversed views, attributes beyond their ranges,
scales that are zero, negative, subnormal, NaN or infinite, and ``out=``
arrays of every kind.  A call must either raise ``qops.ValidationError``
(leaving ``out`` untouched) or return what the NumPy reference returns for
the same validated call.  Anything else -- another exception, a crash, a
sanitizer report, a wrong result, a written ``out`` after an error -- is a
finding.

    python tools/fuzz.py -max_total_time=3600        # an hour
    python tools/fuzz.py -runs=2000                  # a bounded number of calls

Arguments are libFuzzer's (atheris passes them on).
"""

from __future__ import annotations

import atexit
import collections
import os
import sys

import atheris

with atheris.instrument_imports():
    import ml_dtypes
    import numpy as np

    import qops
    from qops import reference
    from qops.backends import dispatch as _dispatch
    from qops.ops.dry_run import PREPARE as _PREPARE

DTYPES = [np.uint8, np.int8, np.int16, np.uint16, np.int32, np.int64, np.float16, np.float32,
          np.float64, np.bool_, ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.float8_e4m3fn,
          ml_dtypes.float8_e5m2, ml_dtypes.bfloat16, ml_dtypes.float4_e2m1fn]
SPECIAL_FLOATS = [0.0, -1.0, 1e-45, 1e-40, np.nan, np.inf, -np.inf, 3e38, 1e-3, 0.5, 1.0, 7.0]
LEVELS = [None, "2_1", "4_0", "1_0", (9, 9)]
OPSETS = [None, 10, 13, 19, 21, 23, 24]


BENIGN_SCALES = [0.01, 0.02, 0.003, 0.5, 1.0, 0.25]
QUANTIZED = [np.uint8, np.int8]
QUANTIZE_OUTPUTS = [np.uint8, np.int8, np.int16, np.uint16, ml_dtypes.int4, ml_dtypes.uint4,
                    ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float4_e2m1fn]


class Draw:
    """Values for one call, read from the fuzzer's bytes.

    Two calls in three are benign (valid types, attributes in range, good
    scales), so that most reach the kernels; the third is hostile throughout.
    """

    def __init__(self, data):
        self.data = atheris.FuzzedDataProvider(data)
        self.hostile = self.integer(0, 2) == 0

    def integer(self, low, high):
        return self.data.ConsumeIntInRange(low, high)

    def pick(self, options):
        return options[self.integer(0, len(options) - 1)]

    def flag(self):
        return self.data.ConsumeBool()

    def shape(self, rank, largest=6):
        return tuple(self.integer(0, largest) if self.integer(0, 9) == 0 else
                     self.integer(1, largest) for _ in range(rank))

    def array(self, shape, dtype=None):
        dtype = np.dtype(dtype if dtype is not None else self.pick(DTYPES))
        size = int(np.prod(shape)) if shape else 1
        raw = self.data.ConsumeBytes(size * dtype.itemsize)
        raw = raw + bytes(size * dtype.itemsize - len(raw))
        values = np.frombuffer(raw, dtype=np.uint8).view(dtype).reshape(shape).copy()
        form = self.integer(0, 5)
        if form == 1 and values.ndim >= 1:
            values = np.asfortranarray(values)
        elif form == 2 and values.ndim >= 1 and values.shape[-1] > 0:
            values = values[..., ::-1]
        elif form == 3 and values.ndim >= 1:
            wide = np.repeat(values, 2, axis=-1)
            values = wide[..., ::2]
        elif form == 4:
            values.flags.writeable = False
        return values

    def scale(self):
        if not self.hostile:
            value = self.pick(BENIGN_SCALES)
            return float(value) if self.flag() else np.float32(value)
        kind = self.integer(0, 4)
        value = self.pick(SPECIAL_FLOATS)
        if kind == 0:
            return value
        if kind == 1:
            return np.float32(value)
        if kind == 2:
            return np.array(value, self.pick([np.float32, np.float64, np.float16]))
        if kind == 3:
            return np.full((self.integer(1, 4),), value, np.float32)
        return None

    def zero_point(self, like):
        if not self.hostile:
            return None if self.flag() else self.array((), like)
        kind = self.integer(0, 4)
        if kind == 0:
            return None
        if kind == 1:
            return self.integer(-300, 300)
        dtype = like if kind in (2, 3) else self.pick(DTYPES)
        shape = () if kind == 2 else (self.integer(1, 4),)
        return self.array(shape, dtype)

    def ints(self, count, low=0):
        if not self.hostile:
            return tuple(self.integer(low, 2) for _ in range(count))
        return tuple(self.pick([0, 1, 1, 2, 3, -1, 2**31, 2**40]) for _ in range(count))

    def dtype(self, benign, hostile=DTYPES):
        return self.pick(benign if not self.hostile else list(benign) + list(hostile))


def convolution_call(draw):
    x_type, w_type = draw.dtype(QUANTIZED), draw.dtype(QUANTIZED)
    groups = draw.integer(1, 3)
    group_channels, per_group = draw.integer(1, 3), draw.integer(1, 3)
    kernel = draw.shape(2, 3)
    x = draw.array((draw.integer(0, 2), groups * group_channels)
                   + tuple(k + draw.integer(0, 5) for k in kernel), x_type)
    w = draw.array((groups * per_group, group_channels) + kernel, w_type)
    slots = dict(input=x, input_scale=draw.scale(), input_zero_point=draw.zero_point(x_type),
                 filter=w, filter_scale=draw.scale(), filter_zero_point=draw.zero_point(w_type),
                 bias=draw.array((w.shape[0],), np.int32) if draw.flag() else None,
                 output_scale=draw.scale(), output_zero_point=draw.zero_point(x_type))
    attributes = dict(strides=draw.ints(2, 1) if draw.flag() else None,
                      dilations=draw.ints(2, 1) if draw.flag() else None,
                      start_padding=draw.ints(2) if draw.flag() else None,
                      end_padding=draw.ints(2) if draw.flag() else None,
                      group_count=groups if not draw.hostile else draw.pick(
                          [None, 1, 2, 4, 0, -1]))
    return "quantized_linear_convolution", slots, attributes, dict(
        feature_level=draw.pick(LEVELS) if draw.hostile else None)


def matmul_call(draw):
    rank = draw.integer(1, 5) if draw.hostile else draw.integer(2, 4)
    a_type, b_type = draw.dtype(QUANTIZED), draw.dtype(QUANTIZED)
    batch = draw.shape(max(rank - 2, 0), 3)
    m, k, n = draw.integer(0, 9), draw.integer(0, 70), draw.integer(0, 9)
    a = draw.array(batch + (m, k) if rank >= 2 else (k,), a_type)
    b = draw.array(tuple(1 if draw.flag() else s for s in batch) + (k, n) if rank >= 2
                   else (k,), b_type)
    slots = dict(a=a, a_scale=draw.scale(), a_zero_point=draw.zero_point(a_type), b=b,
                 b_scale=draw.scale(), b_zero_point=draw.zero_point(b_type),
                 output_scale=draw.scale(), output_zero_point=draw.zero_point(a_type))
    attributes = dict(output_dtype=draw.pick([None, np.uint8, np.int8, np.int32, "bad"])
                      if draw.hostile else None)
    return "quantized_linear_matrix_multiply", slots, attributes, dict(
        feature_level=draw.pick(LEVELS) if draw.hostile else None)


def integer_matmul_call(draw):
    _, slots, _, keywords = matmul_call(draw)
    return "matrix_multiply_integer", {k: slots[k] for k in (
        "a", "a_zero_point", "b", "b_zero_point")}, {}, keywords


def integer_convolution_call(draw):
    _, slots, attributes, keywords = convolution_call(draw)
    return "convolution_integer", {k: slots[k] for k in (
        "input", "input_zero_point", "filter", "filter_zero_point")}, attributes, keywords


def quantize_call(draw):
    x = draw.array(draw.shape(draw.integer(0, 4)), draw.dtype(
        [np.float32, np.float16, ml_dtypes.bfloat16], [np.float64, np.int32]))
    zero = draw.zero_point(draw.dtype(QUANTIZE_OUTPUTS))
    if zero is not None and not draw.hostile and zero.dtype.kind == "V":
        zero = np.zeros((), zero.dtype)  # float8 / float4 zero points must be 0
    slots = dict(x=x, y_scale=draw.scale() if draw.flag() or not draw.hostile else draw.array(
        draw.shape(draw.integer(0, 4), 4), np.float32), y_zero_point=zero)
    keywords = dict(axis=draw.integer(-5, 5) if draw.hostile else 1,
                    block_size=draw.pick([0, 0, 1, 2, 3, -1]) if draw.hostile else 0,
                    saturate=draw.flag(), opset=draw.pick(OPSETS) if draw.hostile else None,
                    output_dtype=draw.pick([None, None] + DTYPES) if draw.hostile else None)
    return "quantize_linear", slots, {}, keywords


def dequantize_call(draw):
    dtype = draw.dtype(QUANTIZE_OUTPUTS, [np.int32, np.float32, np.bool_])
    x = draw.array(draw.shape(draw.integer(0, 4)), dtype)
    zero = draw.zero_point(dtype)
    if zero is not None and not draw.hostile and np.dtype(dtype).kind == "V":
        zero = np.zeros((), dtype)
    slots = dict(x=x, x_scale=draw.scale() if draw.flag() or not draw.hostile else draw.array(
        draw.shape(draw.integer(0, 4), 4), draw.pick([np.float32, np.float16])),
        x_zero_point=zero)
    keywords = dict(axis=draw.integer(-5, 5) if draw.hostile else 1,
                    block_size=draw.pick([0, 0, 1, 2, 3, -1]) if draw.hostile else 0,
                    opset=draw.pick(OPSETS) if draw.hostile else None)
    return "dequantize_linear", slots, {}, keywords


def dynamic_quantize_call(draw):
    x = draw.array(draw.shape(draw.integer(0, 4)), draw.dtype([np.float32, np.float16],
                                                              [np.float64, np.int32]))
    attributes = dict(output_dtype=draw.pick([None, np.uint8, np.int8, np.int16])
                      if draw.hostile else None)
    return "dynamic_quantize_linear", dict(input=x), attributes, dict(
        feature_level=draw.pick(LEVELS) if draw.hostile else None)


#: Calls that ran (and matched the reference) and calls rejected, per function;
#: with QOPS_FUZZ_STATS=1 printed every 500 calls and at exit (libFuzzer may
#: end the process without running exit handlers).
OUTCOMES = collections.Counter()
_REPORT_EVERY = 500


@atexit.register
def _report():
    if os.environ.get("QOPS_FUZZ_STATS"):
        summary = ", ".join(f"{key} {count}" for key, count in sorted(OUTCOMES.items()))
        print(f"qops fuzz outcomes: {summary}", file=sys.stderr, flush=True)


def _count(key):
    OUTCOMES[key] += 1
    if sum(OUTCOMES.values()) % _REPORT_EVERY == 0:
        _report()


MAKERS = [convolution_call, matmul_call, integer_matmul_call, integer_convolution_call,
          quantize_call, dequantize_call, dynamic_quantize_call]
#: Functions that take no out= (they return several arrays).
NO_OUT = {"dynamic_quantize_linear"}


def same(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return False
    width = actual.dtype.itemsize
    view = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[width]
    return np.array_equal(actual.view(view), expected.view(view))


def one_input(data):
    draw = Draw(data)
    function_name, slots, attributes, keywords = draw.pick(MAKERS)(draw)
    function = getattr(qops, function_name)
    out = None
    if draw.hostile and draw.flag() and function_name not in NO_OUT:
        out = draw.array(draw.shape(draw.integer(0, 4)), draw.pick(DTYPES))
    before = None if out is None else out.copy()
    threads = draw.pick([None, 1, 2])
    if function_name not in NO_OUT:
        keywords = dict(keywords, out=out)
    try:
        result = function(**slots, **attributes, **keywords, n_threads=threads)
    except qops.ValidationError:
        if out is not None and not same(out, before):
            raise AssertionError(f"{function_name}: a rejected call wrote into out")
        _count(function_name + " rejected")
        return
    op = qops.registry.get(function_name)
    version = keywords.get("feature_level") or keywords.get("opset")
    extra = {k: v for k, v in keywords.items() if k not in ("feature_level", "opset", "out")}
    call = _PREPARE[op.name](slots, dict(attributes, **extra), version)
    if function_name == "dynamic_quantize_linear":
        expected = reference.dynamic_quantize_linear(
            np.asarray(call.arrays["input"], np.float32), call.output_dtype)
        if not all(map(same, result, expected)):
            raise AssertionError(f"{function_name}: the result differs from the reference")
        _count(function_name + " ran")
        return
    expected = _dispatch.execute(call, 1, implementation="reference")
    if not same(np.asarray(result).reshape(expected.shape) if np.size(result) == expected.size
                else result, expected):
        raise AssertionError(f"{function_name}: the result differs from the reference")
    if out is not None and result is not out:
        raise AssertionError(f"{function_name}: out was not the array returned")
    _count(function_name + " ran")


def main(argv=None):
    atheris.Setup(list(argv if argv is not None else sys.argv), one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
