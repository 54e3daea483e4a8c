"""The compiled implementations, as the dispatch point lists them.

Per operator, best first: the lean paths (``lean``: small matrix multiplies
and per-tensor float32 quantization, checked and run in C,
:mod:`qops.backends.native._lean`), the depthwise kernels (``depthwise
kernels``), the 1 x 1 convolutions as filter x image products (``pointwise
kernels``) and those of one-pixel images as the images' rows times the
filter (``pixel rows kernels``), the GEMM and quantize kernels (``kernels``); the reference
(:mod:`qops.backends.reference`) takes what none of them does.  A lean path
also hands out fast paths: objects that take the operator function's own
arguments and run a call of a form they know without building any Python
object, or answer ``None``.
"""

from __future__ import annotations

import numpy as np

from qops import registry
from qops.backends.contract import Prepared, run_prepared
from qops.backends.native import (
    _lean,
    elementwise,
    gemm,
    matmul_n_bits,
    pooling,
    quantize,
    variants,
)
from qops.registry import dtypes as _dtypes

__all__ = ["register_all"]

#: NumPy's largest dimension count, for a registry row of any number.
_MAX_RANK = 64

# Priorities: a higher one is asked first.
LEAN, DEPTHWISE, POINTWISE, KERNELS = 30, 20, 15, 10

#: Filter taps the depthwise kernels take: sums of that many products of
#: 8-bit differences (and a bias) still fit their int32 lanes.  (Importing
#: this module with no kernel variant built is an ImportError: the reference
#: then runs every call.)
DEPTHWISE_MAX_TAPS = variants.module(variants.selected()).DEPTHWISE_MAX_TAPS


def _has_work(call, *slots):
    """Empty operands and outputs are the reference's: nothing to pack."""
    return all(call.arrays[name].size for name in slots) and all(call.output_shape)


# -- the lean matrix multiply -----------------------------------------------------------------

def _lean_matmul_supported(call):
    """Small per-tensor products (what the lean plan takes), told without making one."""
    arrays = call.arrays
    a = arrays["a"]
    return (_has_work(call, "a", "b") and a.ndim <= 4
            and int(np.prod(call.output_shape, dtype=np.int64)) * a.shape[-1]
            <= _lean.SMALL_PRODUCT_LIMIT
            and all(arrays[name] is None or arrays[name].size == 1 for name in _PARAMETERS))


_PARAMETERS = ("a_scale", "a_zero_point", "b_scale", "b_zero_point", "output_scale",
               "output_zero_point")


_MATMUL_SLOTS = ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "output_scale",
                 "output_zero_point")


def _prepare_lean_matmul(call):
    plan = _lean.lean_plan(call.arrays, call)
    fallback = gemm.prepare_matmul(call)

    def run(call, out, n_threads):
        arrays = dict(call.arrays, a=np.ascontiguousarray(call.arrays["a"]),
                      b=np.ascontiguousarray(call.arrays["b"]))
        if plan is None or plan.run(*(arrays[name] for name in _MATMUL_SLOTS), out,
                                    n_threads) is None:
            # A form the lean plan does not read (a parameter array it does
            # not take in place): the GEMM kernels run the call.
            call.values = fallback.derive(call.arrays, call.checked)
            fallback.run(call, out, n_threads)

    return Prepared(run)


# -- the lean per-tensor quantize -------------------------------------------------------------

class QuantizePerTensor:
    """The fast path of per-tensor float32 to int8 / uint8 QuantizeLinear at
    the defaults (:func:`qops.backends.native._lean.quantize_per_tensor`)."""

    def __init__(self):
        self._entry = variants.quantize_module().lean_entry()

    def run(self, x, y_scale, y_zero_point, out, n_threads):
        return _lean.quantize_per_tensor(self._entry, x, y_scale, y_zero_point, out, n_threads)

    def form(self, slots, call):
        return None  # its form is fixed: nothing to learn

    def learn(self, form):
        pass


class LeanAdd:
    """The fast path of the quantized add of two operands of one shape with
    scalar parameters (:func:`qops.backends.native._lean.quantized_add_same_shape`),
    for the dimension counts the registry allows at the default feature level
    (none where it allows data or zero points other than uint8 and int8,
    which are all the C path reads)."""

    def __init__(self):
        self._entry = variants.quantize_module().lean_add_entry()
        support = registry.get("ELEMENT_WISE_QUANTIZED_LINEAR_ADD").support(
            registry.NEWEST_FEATURE_LEVEL)
        shaped = [support.tensor(name) for name in ("a", "b", "output")]
        self._min_rank = max(row.min_dims for row in shaped)
        self._max_rank = min(_MAX_RANK if row.max_dims is None else row.max_dims
                             for row in shaped)
        if any(set(support.tensor(name).dtypes) - {"UINT8", "INT8"}
               for name in ("a", "a_zero_point", "b", "b_zero_point", "output",
                            "output_zero_point")):
            self._max_rank = -1

    def run(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
            output_zero_point, out, n_threads):
        return _lean.quantized_add_same_shape(self._entry, self._min_rank, self._max_rank, a,
                                              a_scale, a_zero_point, b, b_scale, b_zero_point,
                                              output_scale, output_zero_point, out, n_threads)

    def form(self, slots, call):
        return None  # its form is fixed: nothing to learn

    def learn(self, form):
        pass


def _lean_quantize_supported(call):
    arrays, attributes = call.arrays, call.attributes
    x, scale = arrays["x"], arrays["y_scale"]
    return (call.granularity["y_scale"] == "per-tensor" and x.dtype == np.float32
            and x.size > 0 and x.flags.c_contiguous and scale.dtype == np.float32
            and attributes["precision"] in (None, "FLOAT32")
            and _dtypes.name_of(call.output_dtype) in ("INT8", "UINT8"))


def _prepare_lean_quantize(call):
    path = QuantizePerTensor()
    fallback = run_prepared(quantize.prepare_quantize)

    def run(call, out, n_threads):
        arrays = call.arrays
        scale, zero_point = arrays["y_scale"], arrays["y_zero_point"]
        if zero_point is None:
            zero_point = np.zeros(scale.shape, call.output_dtype)
        x = np.ascontiguousarray(arrays["x"])
        if path.run(x, scale, zero_point, out, n_threads) is None:
            fallback(call, out, n_threads)  # values the C checks read otherwise

    return Prepared(run)


def _prepare_integer_to_float_16(call, variant=None):
    from qops.backends import reference  # the exact path for values past 8 bits

    return gemm.prepare_integer_to_float_16(call, variant, exact=reference.integer_to_float)


def register_helpers(register_helper):
    """The value-check helpers the kernels run faster than NumPy."""
    register_helper("float32 range", quantize.float32_range)


def register_all(register):
    """Put the compiled implementations ahead of the reference."""
    register("QUANTIZED_LINEAR_MATRIX_MULTIPLY", "lean", run_prepared(_prepare_lean_matmul),
             priority=LEAN, supports=_lean_matmul_supported,
             prepare=_prepare_lean_matmul, fast=_lean.LeanCache)
    register("QUANTIZED_LINEAR_MATRIX_MULTIPLY", "kernels", run_prepared(gemm.prepare_matmul),
             priority=KERNELS, supports=lambda call: _has_work(call, "a", "b"),
             prepare=gemm.prepare_matmul)
    register("QUANTIZED_LINEAR_CONVOLUTION", "depthwise kernels",
             run_prepared(gemm.prepare_depthwise), priority=DEPTHWISE,
             supports=lambda call: (_has_work(call, "input", "filter") and gemm.is_depthwise(call)
                                    and call.arrays["filter"][0].size <= DEPTHWISE_MAX_TAPS),
             prepare=gemm.prepare_depthwise)
    register("QUANTIZED_LINEAR_CONVOLUTION", "pointwise kernels",
             run_prepared(gemm.prepare_pointwise), priority=POINTWISE,
             supports=lambda call: _has_work(call, "input", "filter") and gemm.is_pointwise(call),
             prepare=gemm.prepare_pointwise)
    register("QUANTIZED_LINEAR_CONVOLUTION", "pixel rows kernels",
             run_prepared(gemm.prepare_pixel_rows), priority=POINTWISE,
             supports=lambda call: (_has_work(call, "input", "filter")
                                    and gemm.is_pixel_rows(call)),
             prepare=gemm.prepare_pixel_rows)
    register("QUANTIZED_LINEAR_CONVOLUTION", "kernels", run_prepared(gemm.prepare_convolution),
             priority=KERNELS, supports=lambda call: _has_work(call, "input", "filter"),
             prepare=gemm.prepare_convolution)
    # The integer operators share the GEMM kernels, whose raw epilogue writes
    # the exact sums as int32: only where K proves every sum fits.
    register("MATRIX_MULTIPLY_INTEGER", "kernels", run_prepared(gemm.prepare_matmul),
             priority=KERNELS,
             supports=lambda call: (_has_work(call, "a", "b")
                                    and gemm.fits_int32(call.arrays["a"].shape[-1])),
             prepare=gemm.prepare_matmul)
    register("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", "kernels",
             run_prepared(gemm.prepare_integer_to_float), priority=KERNELS,
             supports=lambda call: (_has_work(call, "a", "b")
                                    and call.arrays["a"].dtype.itemsize == 1
                                    and gemm.fits_int32(call.arrays["a"].shape[-1])),
             prepare=gemm.prepare_integer_to_float)
    register("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", "narrowed kernels",
             run_prepared(_prepare_integer_to_float_16), priority=KERNELS - 1,
             supports=lambda call: (_has_work(call, "a", "b")
                                    and call.arrays["a"].dtype.itemsize == 2
                                    and gemm.fits_int32(call.arrays["a"].shape[-1])),
             prepare=_prepare_integer_to_float_16)
    register("CONVOLUTION_INTEGER", "pointwise kernels", run_prepared(gemm.prepare_pointwise),
             priority=POINTWISE,
             supports=lambda call: (_has_work(call, "input", "filter") and gemm.is_pointwise(call)
                                    and gemm.fits_int32(call.arrays["filter"][0].size)),
             prepare=gemm.prepare_pointwise)
    register("CONVOLUTION_INTEGER", "kernels", run_prepared(gemm.prepare_convolution),
             priority=KERNELS,
             supports=lambda call: (_has_work(call, "input", "filter")
                                    and gemm.fits_int32(call.arrays["filter"][0].size)),
             prepare=gemm.prepare_convolution)
    register("DYNAMIC_QUANTIZE_LINEAR", "kernels",
             run_prepared(quantize.prepare_dynamic_quantize), priority=KERNELS,
             prepare=quantize.prepare_dynamic_quantize)
    register("ELEMENT_WISE_QUANTIZED_LINEAR_ADD", "kernels",
             run_prepared(elementwise.prepare_add), priority=KERNELS,
             prepare=elementwise.prepare_add, fast=LeanAdd)
    register("QUANTIZED_LINEAR_AVERAGE_POOLING", "kernels",
             run_prepared(pooling.prepare_average_pooling), priority=KERNELS,
             supports=pooling.supports_average_pooling, prepare=pooling.prepare_average_pooling)
    for name in ("ELEMENT_WISE_QUANTIZE_LINEAR", "ELEMENT_WISE_DEQUANTIZE_LINEAR"):
        register(name, "kernels", run_prepared(quantize.prepare_element_wise), priority=KERNELS,
                 supports=quantize.element_wise_supported, prepare=quantize.prepare_element_wise)
    for name in ("QUANTIZE", "DEQUANTIZE"):
        register(name, "kernels", run_prepared(quantize.prepare_blocks), priority=KERNELS,
                 supports=quantize.blocks_supported, prepare=quantize.prepare_blocks)
    register("QuantizeLinear", "lean", run_prepared(_prepare_lean_quantize), priority=LEAN,
             supports=_lean_quantize_supported, prepare=_prepare_lean_quantize,
             fast=QuantizePerTensor)
    register("QuantizeLinear", "kernels", run_prepared(quantize.prepare_quantize),
             priority=KERNELS, supports=quantize.quantize_supported,
             prepare=quantize.prepare_quantize)
    register("DequantizeLinear", "kernels", run_prepared(quantize.prepare_dequantize),
             priority=KERNELS, supports=quantize.dequantize_supported,
             prepare=quantize.prepare_dequantize)
    register("MatMulNBits", "kernels", run_prepared(matmul_n_bits.prepare), priority=KERNELS,
             supports=matmul_n_bits.supported, prepare=matmul_n_bits.prepare)
