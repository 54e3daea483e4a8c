# QuantizeLinear and DequantizeLinear, the quantized add (whose last step is
# QuantizeLinear's), the byte tables of onnxruntime's QOperator nodes, float32
# erf, the quantized average pooling and MatMulNBits (its weights dequantized
# a panel at a time): typed loops over raw
# bytes, included by one module per instruction set (_quantize_<variant>.pyx),
# each compiled with its variant's flags so the same loops vectorize for it.
#
# The glue (qops.backends.native.quantize) views every array as bytes or float32
# vectors and describes the tensor as (outer, axis, inner) with how a row
# finds its scale; nothing here validates.  Work is split into rows that never
# share an output element, so results do not depend on the thread count.
#
# Each row is processed in pieces of at most ``PIECE`` elements through a
# float32 buffer on the thread's stack: load (and widen) the input, compute,
# then convert to the output type.  Every stage is a plain loop the compiler
# vectorizes; conversions follow the bit-level rules of NumPy (float16) and
# ml_dtypes (bfloat16, float8, float4), rounding to nearest even.

import numpy as np

from cpython.pycapsule cimport PyCapsule_New
from libc.stdint cimport int8_t, int16_t, int32_t, uint8_t, uint16_t, uint32_t
from libc.string cimport memset

from qops.backends.native.kernels._qops_pool cimport run_range
from qops.backends.native.kernels._rounding cimport DOUBLE_ROUNDING_MAGIC, round_half_even
from qops.backends.native.kernels._requantize cimport narrow_line


cdef extern from "qops_quantize.h":
    uint32_t bits_of "qops_bits_of"(float value) noexcept nogil
    float float_of "qops_float_of"(uint32_t bits) noexcept nogil


# Input kinds of DequantizeLinear's x (the glue's table must match).
cpdef enum:
    X_INT8 = 0
    X_UINT8 = 1
    X_INT16 = 2
    X_UINT16 = 3
    X_INT32 = 4
    X_INT4 = 5
    X_UINT4 = 6
    X_TABLE = 7     # float8 / float4: one float32 per byte value

# Float kinds: QuantizeLinear's x and division, DequantizeLinear's output;
# F_INT32 is a QuantizeLinear x only (widened to float32, nearest even).
cpdef enum:
    F_FLOAT32 = 0
    F_FLOAT16 = 1
    F_BFLOAT16 = 2
    F_INT32 = 3

# QuantizeLinear's output kinds.
cpdef enum:
    Q_INT8 = 0
    Q_UINT8 = 1
    Q_INT16 = 2
    Q_UINT16 = 3
    Q_INT4 = 4
    Q_UINT4 = 5
    Q_INT2 = 6
    Q_UINT2 = 7      # the integer kinds end here (kind <= Q_UINT2)
    Q_E4M3FN = 8
    Q_E4M3FNUZ = 9
    Q_E5M2 = 10
    Q_E5M2FNUZ = 11
    Q_E2M1 = 12      # the sub-byte floats from here: no infinity, no NaN
    Q_E2M3 = 13
    Q_E3M2 = 14

# The capsule name of the lean path's entry; its C type is
# qops.backends.native._lean.QuantizeTensor.
cdef const char* LEAN_ENTRY = b"qops.backends.native.kernels.quantize_float32_tensor"
cdef const char* LEAN_ADD_ENTRY = b"qops.backends.native.kernels.quantized_add_tensor"

cdef enum:
    PIECE = 512
    # Fewer elements than this run on the calling thread: a job on the pool
    # costs more than it saves.
    PARALLEL_MIN = 32768

# Elements per row of a per-tensor call: rows are what threads share out
# (the glue reads it too).
cpdef enum:
    ROW = 16384

# The kernels by role, each part using the ones above it.
include "_quantize_conversions.pxi"
include "_dequantize_linear.pxi"
include "_quantize_linear.pxi"
include "_quantized_add.pxi"
include "_tables.pxi"
include "_erf.pxi"
include "_layer_normalization.pxi"
include "_max_pool.pxi"
include "_softmax.pxi"
include "_average_pooling.pxi"
include "_matmul_n_bits.pxi"
include "_range.pxi"
