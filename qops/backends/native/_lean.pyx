# cython: language_level=3
"""The lean per-call paths: small matrix multiplies, per-tensor quantization.

For a few thousand multiply-adds a call's time is its overhead: building
slot dictionaries, computing a plan signature, converting arrays, deriving
kernel vectors.  A :class:`LeanMatmul` is made from a fully validated call
(:mod:`qops.ops.matmul`) and remembers the *form* of each argument of that
call: the type, dtype and shape of every operand, and for each scale and
zero point whether it was absent, a Python float, a NumPy scalar or an
all-ones array of some rank.  A later call whose arguments have exactly
those forms would pass the same validation except for values, so this
module checks the values (scales positive and finite, a finite
requantization multiplier, the thread count, ``out=``) in C and runs the
small kernel.  Anything else, including every value that fails a check,
answers ``None`` and the caller takes the validating path, which raises the
error a user should see.
"""

cimport cython
cimport numpy as cnp
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.float cimport FLT_MAX
from libc.math cimport INFINITY
from libc.stdint cimport int8_t, int32_t, uint8_t

import numpy as np

from qops.backends.native._outputs cimport LARGE_OUTPUT_BYTES, empty_array
from qops.backends.native.kernels._small cimport SMALL_LIMIT, SmallMatmul, small_matmul

cnp.import_array()

#: The most multiply-adds a product the lean path runs may have (the small kernel's bound).
SMALL_PRODUCT_LIMIT = SMALL_LIMIT

# The forms an argument may take (see the module docstring).
cdef enum Form:
    ABSENT = 0
    PYTHON_FLOAT = 1
    NUMPY_SCALAR = 2
    ARRAY = 3

# Parameter slots, in the order LeanMatmul.run takes them.
cdef enum:
    A_SCALE = 0
    A_ZERO = 1
    B_SCALE = 2
    B_ZERO = 3
    OUT_SCALE = 4
    OUT_ZERO = 5
    PARAMETERS = 6
    MAX_RANK = 4

PARAMETER_NAMES = ("a_scale", "a_zero_point", "b_scale", "b_zero_point", "output_scale",
                   "output_zero_point")

from qops.threads import MAX_THREADS as _MAX_THREADS

# The largest thread count a call may ask for (its one home is qops.threads).
cdef int MAX_THREADS = _MAX_THREADS

cdef dict SCALAR_TYPES = {np.float32: cnp.NPY_FLOAT32, np.float64: cnp.NPY_FLOAT64,
                          np.int8: cnp.NPY_INT8, np.uint8: cnp.NPY_UINT8}


cdef inline bint behaved(object value, int typenum, int ndim):
    """An exact ndarray of ``typenum`` in native byte order and aligned, of ``ndim`` dimensions."""
    if type(value) is not cnp.ndarray:
        return False
    cdef cnp.ndarray array = <cnp.ndarray>value
    return (cnp.PyArray_TYPE(array) == typenum and cnp.PyArray_NDIM(array) == ndim
            and cnp.PyArray_ISBEHAVED_RO(array))


cdef inline bint same_dims(cnp.ndarray array, const cnp.npy_intp* dims, int ndim):
    cdef cnp.npy_intp* given = cnp.PyArray_DIMS(array)
    cdef int axis
    for axis in range(ndim):
        if given[axis] != dims[axis]:
            return False
    return True


cdef bint usable_out(object out, int rank, const cnp.npy_intp* dims, int type_number,
                     tuple arguments):
    """Whether ``out=`` is what the validating path accepts for an output of
    this form: a C-contiguous, aligned, writeable array of its dtype and
    shape whose bytes meet none of ``arguments`` (the call's others)."""
    cdef object value
    if not (type(out) is cnp.ndarray and cnp.PyArray_TYPE(<cnp.ndarray>out) == type_number
            and cnp.PyArray_NDIM(<cnp.ndarray>out) == rank
            and cnp.PyArray_ISCARRAY(<cnp.ndarray>out)
            and same_dims(<cnp.ndarray>out, dims, rank)):
        return False
    for value in arguments:
        if overlaps(<cnp.ndarray>out, value):
            return False
    return True


cdef inline bint thread_count(object n_threads):
    """Whether ``n_threads`` is a thread count a call may ask for."""
    return type(n_threads) is int and 1 <= n_threads <= MAX_THREADS


cdef inline bint overlaps(cnp.ndarray out, object value):
    """Whether ``value`` (any form) is an array whose bytes meet ``out``'s."""
    if type(value) is not cnp.ndarray:
        return False
    cdef cnp.ndarray array = <cnp.ndarray>value
    cdef char* start = <char*>cnp.PyArray_DATA(array)
    cdef char* out_start = <char*>cnp.PyArray_DATA(out)
    return (start < out_start + cnp.PyArray_NBYTES(out)
            and out_start < start + cnp.PyArray_NBYTES(array))


cdef class LeanMatmul:
    """One validated small matrix-multiply signature, runnable with value checks only."""

    cdef int a_type, b_type, out_type, rank
    cdef cnp.npy_intp a_dims[MAX_RANK]
    cdef cnp.npy_intp b_dims[MAX_RANK]
    cdef cnp.npy_intp out_dims[MAX_RANK]
    cdef int forms[PARAMETERS]
    cdef int types[PARAMETERS]     # the dtype of a NumPy scalar or array form
    cdef int ranks[PARAMETERS]     # the rank of an array form
    cdef SmallMatmul template

    def __init__(self, tuple forms, tuple types, tuple ranks, a, b, tuple out_shape, out_dtype,
                 Py_ssize_t a_batch_stride, Py_ssize_t b_batch_stride, int low, int high):
        cdef int index
        self.rank = len(out_shape)
        self.a_type = np.dtype(a.dtype).num
        self.b_type = np.dtype(b.dtype).num
        self.out_type = np.dtype(out_dtype).num
        for index in range(self.rank):
            self.a_dims[index] = a.shape[index]
            self.b_dims[index] = b.shape[index]
            self.out_dims[index] = out_shape[index]
        for index in range(PARAMETERS):
            self.forms[index] = forms[index]
            self.types[index] = types[index]
            self.ranks[index] = ranks[index]
        self.template.m = a.shape[self.rank - 2]
        self.template.k = a.shape[self.rank - 1]
        self.template.n = b.shape[self.rank - 1]
        self.template.batch = 1
        for index in range(self.rank - 2):
            self.template.batch *= out_shape[index]
        self.template.a_batch_stride = a_batch_stride
        self.template.b_batch_stride = b_batch_stride
        self.template.a_signed = self.a_type == cnp.NPY_INT8
        self.template.b_signed = self.b_type == cnp.NPY_INT8
        self.template.low = low
        self.template.high = high

    cdef bint operands_match(self, object a, object b):
        return (behaved(a, self.a_type, self.rank) and behaved(b, self.b_type, self.rank)
                and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>a)
                and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>b)
                and same_dims(<cnp.ndarray>a, self.a_dims, self.rank)
                and same_dims(<cnp.ndarray>b, self.b_dims, self.rank))

    cdef bint same_operands(self, LeanMatmul other):
        cdef int axis
        if (self.a_type != other.a_type or self.b_type != other.b_type
                or self.rank != other.rank):
            return False
        for axis in range(self.rank):
            if self.a_dims[axis] != other.a_dims[axis] or self.b_dims[axis] != other.b_dims[axis]:
                return False
        return True

    cdef bint read(self, int slot, object value, double* result):
        """The value of one parameter in its recorded form; False when the form differs."""
        cdef int form = self.forms[slot], typenum = self.types[slot], axis
        cdef void* data
        cdef float single
        cdef double wide
        cdef int8_t small
        cdef uint8_t byte
        if form == ABSENT:
            result[0] = 0.0
            return value is None
        if form == PYTHON_FLOAT:
            if type(value) is not float:
                return False
            result[0] = PyFloat_AS_DOUBLE(value)
            return True
        if form == NUMPY_SCALAR:
            if SCALAR_TYPES.get(type(value), -1) != typenum:
                return False
            data = &wide if typenum == cnp.NPY_FLOAT64 else (
                <void*>&single if typenum == cnp.NPY_FLOAT32 else (
                    <void*>&small if typenum == cnp.NPY_INT8 else <void*>&byte))
            cnp.PyArray_ScalarAsCtype(value, data)
        else:
            if not behaved(value, typenum, self.ranks[slot]):
                return False
            for axis in range(self.ranks[slot]):
                if cnp.PyArray_DIMS(<cnp.ndarray>value)[axis] != 1:
                    return False
            data = cnp.PyArray_DATA(<cnp.ndarray>value)
        if typenum == cnp.NPY_FLOAT64:
            result[0] = (<double*>data)[0]
        elif typenum == cnp.NPY_FLOAT32:
            result[0] = (<float*>data)[0]
        elif typenum == cnp.NPY_INT8:
            result[0] = (<int8_t*>data)[0]
        else:
            result[0] = (<uint8_t*>data)[0]
        return True

    def run(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
            output_zero_point, out, n_threads):
        """The product, or ``None`` when the call is not one this signature runs
        (the caller then validates it fully)."""
        cdef double values[PARAMETERS]
        cdef float scales[3]
        cdef int index
        cdef float product32, multiplier
        cdef SmallMatmul call = self.template
        cdef cnp.ndarray result
        if not self.operands_match(a, b):
            return None
        if not (self.read(A_SCALE, a_scale, &values[A_SCALE])
                and self.read(A_ZERO, a_zero_point, &values[A_ZERO])
                and self.read(B_SCALE, b_scale, &values[B_SCALE])
                and self.read(B_ZERO, b_zero_point, &values[B_ZERO])
                and self.read(OUT_SCALE, output_scale, &values[OUT_SCALE])
                and self.read(OUT_ZERO, output_zero_point, &values[OUT_ZERO])):
            return None
        if n_threads is not None and not thread_count(n_threads):
            return None
        # Scales are float32 whatever form they came in (as validation converts
        # them); each must be positive and finite.
        scales[0] = <float>values[A_SCALE]
        scales[1] = <float>values[B_SCALE]
        scales[2] = <float>values[OUT_SCALE]
        for index in range(3):
            if not (0.0 < scales[index] < INFINITY):
                return None
        # The multiplier by the contract's rule, float32(float32(sa * sb) / so):
        # the double product of two float32 values is exact, so rounding it
        # to float32 is the float32 product.  It must be finite (as
        # qops.ops.common.requantization checks).
        product32 = <float>(<double>scales[0] * <double>scales[1])
        multiplier = product32 / scales[2]
        if not (product32 < INFINITY and multiplier < INFINITY):
            return None
        if out is None:
            result = new_output(self.rank, self.out_dims, self.out_type)
        elif usable_out(out, self.rank, self.out_dims, self.out_type,
                        (a, b, a_scale, a_zero_point, b_scale, b_zero_point, output_scale,
                         output_zero_point)):
            result = <cnp.ndarray>out
        else:
            return None
        call.multiplier = multiplier
        call.a_zero = <int32_t>values[A_ZERO]
        call.b_zero = <int32_t>values[B_ZERO]
        call.out_zero = <int32_t>values[OUT_ZERO]
        call.a = <const uint8_t*>cnp.PyArray_DATA(<cnp.ndarray>a)
        call.b = <const uint8_t*>cnp.PyArray_DATA(<cnp.ndarray>b)
        call.out = <uint8_t*>cnp.PyArray_DATA(result)
        with nogil:
            small_matmul(&call)
        return result


cdef class LeanCache:
    """The lean signatures of one caller (the plain function, or one compiled
    operator), most recently learnt first; at most ``capacity``."""

    cdef list plans
    cdef Py_ssize_t capacity

    def __init__(self, Py_ssize_t capacity=8):
        self.plans = []
        self.capacity = capacity

    def run(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
            output_zero_point, out, n_threads):
        """The product if a learnt signature runs this call, else ``None``."""
        cdef LeanMatmul plan
        for plan in self.plans:
            if plan.operands_match(a, b):
                return plan.run(a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                                output_scale, output_zero_point, out, n_threads)
        return None

    def form(self, dict slots, call):
        """The fast path's form of a validated call (its :class:`LeanMatmul`),
        or ``None`` when the lean path does not take calls like it."""
        return lean_plan(slots, call)

    def learn(self, LeanMatmul plan not None):
        """Take calls of ``plan``'s form from now on (after one has run)."""
        self.add(plan)

    def add(self, LeanMatmul plan not None):
        """Put ``plan`` (from :func:`lean_plan`) first; operands decide which
        plan runs a call, so it replaces any plan with the same operands."""
        cdef LeanMatmul other
        if self.plans and self.plans[0] is plan:
            return
        # A new list, whole before it is published: calls in other threads
        # may be walking the old one.
        plans = [plan] + [other for other in self.plans if not other.same_operands(plan)]
        self.plans = plans[:self.capacity]

    def __len__(self):
        return len(self.plans)

    def clear(self):
        self.plans = []


# Python-level logic, run once per signature: negative indices as in Python.
@cython.wraparound(True)
@cython.boundscheck(True)
def _form(value, array):
    """(form, dtype number, rank) of a parameter as given, or ``None`` when the
    lean path does not take it; ``array`` is its validated value."""
    if value is None:
        return ABSENT, -1, 0
    if array is None or array.size != 1:
        return None
    if type(value) is float:
        return PYTHON_FLOAT, -1, 0
    typenum = SCALAR_TYPES.get(type(value))
    if typenum is not None:
        return NUMPY_SCALAR, typenum, 0
    if (type(value) is np.ndarray and value.dtype.num in SCALAR_TYPES.values()
            and value.dtype.isnative and value.flags.aligned and value.ndim <= MAX_RANK):
        return ARRAY, value.dtype.num, value.ndim
    return None


@cython.wraparound(True)
@cython.boundscheck(True)
def _batch_stride(array, out_batch):
    """Bytes between an operand's matrices in the output's batch order, or
    ``None`` when its broadcast is not one stride (0 for a single matrix)."""
    batch = array.shape[:-2]
    if all(size == 1 for size in batch):
        return 0
    if tuple(batch) == tuple(out_batch):
        return array.shape[-2] * array.shape[-1]
    return None


@cython.wraparound(True)
@cython.boundscheck(True)
def lean_plan(dict slots, call):
    """A :class:`LeanMatmul` for a validated small per-tensor call, else ``None``."""
    a, b = slots.get("a"), slots.get("b")
    if call.arrays is None or type(a) is not np.ndarray or type(b) is not np.ndarray:
        return None
    if not (a.flags.c_contiguous and b.flags.c_contiguous and a.ndim == b.ndim <= MAX_RANK
            and a.dtype == call.arrays["a"].dtype and b.dtype == call.arrays["b"].dtype):
        return None
    out_shape = tuple(call.output_shape)
    if int(np.prod(out_shape, dtype=np.int64)) * a.shape[-1] > SMALL_LIMIT:
        return None
    strides = _batch_stride(a, out_shape[:-2]), _batch_stride(b, out_shape[:-2])
    if None in strides:
        return None
    forms = [_form(slots.get(name), call.arrays[name]) for name in PARAMETER_NAMES]
    if None in forms:
        return None
    # A zero point's form must hold the validated dtype (a Python int does not qualify).
    for name, (form, typenum, rank) in zip(PARAMETER_NAMES, forms):
        if name.endswith("zero_point") and form != ABSENT and (
                typenum != call.arrays[name].dtype.num):
            return None
        if name.endswith("scale") and form in (NUMPY_SCALAR, ARRAY) and typenum not in (
                cnp.NPY_FLOAT32, cnp.NPY_FLOAT64):
            return None
    info = np.iinfo(call.output_dtype)
    return LeanMatmul(tuple(f[0] for f in forms), tuple(f[1] for f in forms),
                      tuple(f[2] for f in forms), a, b, out_shape, call.output_dtype,
                      strides[0], strides[1], int(info.min), int(info.max))


# -- QuantizeLinear, per tensor ------------------------------------------------------------
#
# float32 x to int8 or uint8 with one scale is the commonest QuantizeLinear,
# and even a large one spends a measurable share of its time in the validating path
# (slot dictionaries, plan signature, parameter arrays, kernel keywords).
# Its form is fixed, so no learning is needed: a call whose every argument
# has one of the forms below would pass validation except for values, which
# are checked here; anything else answers None and takes the full path.

ctypedef void (*QuantizeTensor)(const float* x, Py_ssize_t count, float scale, float zero,
                                uint8_t* out, bint to_int8, int n_threads) noexcept nogil

cdef const char* QUANTIZE_ENTRY = b"qops.backends.native.kernels.quantize_float32_tensor"


cdef bint scale_value(object value, float* scale, int* rank):
    """A per-tensor float32 scale in a form validation converts without loss
    of meaning: a Python float, a float32 scalar, a float32 array of shape
    () or (1,).  The value is float32, as validation converts it."""
    if type(value) is float:
        scale[0] = <float>PyFloat_AS_DOUBLE(value)
        rank[0] = 0
        return True
    if type(value) is np.float32:
        cnp.PyArray_ScalarAsCtype(value, scale)
        rank[0] = 0
        return True
    if behaved(value, cnp.NPY_FLOAT32, 0) or (
            behaved(value, cnp.NPY_FLOAT32, 1) and cnp.PyArray_DIMS(<cnp.ndarray>value)[0] == 1):
        scale[0] = (<float*>cnp.PyArray_DATA(<cnp.ndarray>value))[0]
        rank[0] = cnp.PyArray_NDIM(<cnp.ndarray>value)
        return True
    return False


cdef bint zero_point_value(object value, int rank, float* zero, int* out_type):
    """An int8 or uint8 zero point of the scale's shape, or none (uint8 output)."""
    cdef void* data
    cdef int typenum
    cdef uint8_t byte
    if value is None:
        zero[0] = 0
        out_type[0] = cnp.NPY_UINT8
        return True
    if type(value) is np.uint8 or type(value) is np.int8:
        if rank != 0:
            return False
        typenum = cnp.NPY_UINT8 if type(value) is np.uint8 else cnp.NPY_INT8
        cnp.PyArray_ScalarAsCtype(value, &byte)
        data = &byte
    elif behaved(value, cnp.NPY_UINT8, rank) or behaved(value, cnp.NPY_INT8, rank):
        if rank == 1 and cnp.PyArray_DIMS(<cnp.ndarray>value)[0] != 1:
            return False
        typenum = cnp.PyArray_TYPE(<cnp.ndarray>value)
        data = cnp.PyArray_DATA(<cnp.ndarray>value)
    else:
        return False
    # (Not one conditional expression: Cython would give it one 8-bit type.)
    if typenum == cnp.NPY_INT8:
        zero[0] = (<int8_t*>data)[0]
    else:
        zero[0] = (<uint8_t*>data)[0]
    out_type[0] = typenum
    return True


def quantize_per_tensor(object entry, x, y_scale, y_zero_point, out, n_threads):
    """``qops.quantize_linear(x, y_scale, y_zero_point, out=out,
    n_threads=n_threads)`` with every other argument at its default, or
    ``None`` when the call is not of the lean form or a value would fail.

    ``entry``: the selected kernels' :func:`lean_entry` capsule;
    ``n_threads``: resolved by the caller when not given.
    """
    cdef float scale = 0, zero = 0
    cdef int rank = 0, out_type = 0  # (set by the checks before any read)
    cdef QuantizeTensor kernel
    cdef cnp.ndarray source, result
    cdef Py_ssize_t count
    cdef int threads
    if not (type(x) is cnp.ndarray and cnp.PyArray_TYPE(<cnp.ndarray>x) == cnp.NPY_FLOAT32
            and cnp.PyArray_ISCARRAY_RO(<cnp.ndarray>x) and cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>x)):
        return None
    source = <cnp.ndarray>x
    count = cnp.PyArray_SIZE(source)
    if count == 0:
        return None
    if not (scale_value(y_scale, &scale, &rank) and 0.0 < scale < INFINITY):
        return None
    if not zero_point_value(y_zero_point, rank, &zero, &out_type):
        return None
    if not thread_count(n_threads):
        return None
    threads = n_threads
    if out is None:
        result = new_output(cnp.PyArray_NDIM(source), cnp.PyArray_DIMS(source), out_type)
    elif usable_out(out, cnp.PyArray_NDIM(source), cnp.PyArray_DIMS(source), out_type,
                    (x, y_scale, y_zero_point)):
        result = <cnp.ndarray>out
    else:
        return None
    kernel = <QuantizeTensor>PyCapsule_GetPointer(entry, QUANTIZE_ENTRY)
    with nogil:
        kernel(<const float*>cnp.PyArray_DATA(source), count, scale, zero,
               <uint8_t*>cnp.PyArray_DATA(result), out_type == cnp.NPY_INT8, threads)
    return result


cdef cnp.ndarray new_output(int rank, cnp.npy_intp* dims, int type_number):
    """A new output array, as qops.backends.contract.empty_output makes them."""
    cdef cnp.npy_intp count = 1
    cdef int i
    cdef cnp.dtype descr = cnp.PyArray_DescrFromType(type_number)
    for i in range(rank):
        count *= dims[i]
    if count * descr.itemsize < LARGE_OUTPUT_BYTES:
        return cnp.PyArray_EMPTY(rank, dims, type_number, 0)
    return empty_array(rank, dims, descr)


# -- ELEMENT_WISE_QUANTIZED_LINEAR_ADD of two operands of one shape -------------------------
#
# The residual add of a network: A and B of one shape, contiguous, each
# parameter a scalar (a Python float or NumPy scalar, or a 0-d array).  Such
# a call would pass validation except for values, which are checked here as
# the validating path checks them (add_values); anything else answers None
# and takes that path, which gives the result or the error a user should see.

ctypedef void (*AddTensor)(const uint8_t* a, uint8_t a_flip, int32_t a_zero, float a_multiplier,
                           const uint8_t* b, uint8_t b_flip, int32_t b_zero, float b_multiplier,
                           Py_ssize_t count, int32_t zero_point, int32_t low, int32_t high,
                           uint8_t* out, int n_threads) noexcept nogil

cdef const char* ADD_ENTRY = b"qops.backends.native.kernels.quantized_add_tensor"

# float32's largest / 255 (elementwise._LARGEST_MULTIPLIER): a larger
# multiplier could make a product infinite.
cdef double LARGEST_ADD_MULTIPLIER = <double>FLT_MAX / 255.0


cdef bint scalar_byte(object value, int typenum, int32_t* zero):
    """A zero point of ``typenum`` (uint8 or int8) as a NumPy scalar or a 0-d
    array, or none (0)."""
    cdef uint8_t byte
    if value is None:
        zero[0] = 0
        return True
    if (typenum == cnp.NPY_UINT8 and type(value) is np.uint8) or (
            typenum == cnp.NPY_INT8 and type(value) is np.int8):
        cnp.PyArray_ScalarAsCtype(value, &byte)
    elif behaved(value, typenum, 0):
        byte = (<uint8_t*>cnp.PyArray_DATA(<cnp.ndarray>value))[0]
    else:
        return False
    if typenum == cnp.NPY_INT8:  # (not one conditional expression: see zero_point_value)
        zero[0] = <int8_t>byte
    else:
        zero[0] = byte
    return True


cdef bint scalar_scale(object value, float* scale):
    """A scale as scale_value reads it, of no dimension, positive and finite."""
    cdef int rank = -1
    return scale_value(value, scale, &rank) and rank == 0 and 0.0 < scale[0] < INFINITY


cdef inline bint byte_array(object value):
    if type(value) is not cnp.ndarray:
        return False
    cdef int typenum = cnp.PyArray_TYPE(<cnp.ndarray>value)
    return ((typenum == cnp.NPY_UINT8 or typenum == cnp.NPY_INT8)
            and cnp.PyArray_ISCARRAY_RO(<cnp.ndarray>value))


def quantized_add_same_shape(object entry, int min_rank, int max_rank, a, a_scale, a_zero_point,
                             b, b_scale, b_zero_point, output_scale, output_zero_point, out,
                             n_threads):
    """``qops.element_wise_quantized_linear_add(...)`` of A and B of one
    shape with scalar parameters and ``output_dtype`` and ``feature_level``
    at their defaults, or ``None`` when the call is not of that form or a
    value would fail.

    ``entry``: the selected kernels' :func:`lean_add_entry` capsule;
    ``min_rank``, ``max_rank``: the dimension counts the registry allows A,
    B and the output at the default feature level;
    ``n_threads``: resolved by the caller when not given.
    """
    cdef float scales[3]
    cdef int32_t a_zero, b_zero, out_zero
    cdef int a_type, b_type, out_type, rank, threads
    cdef float a_multiplier, b_multiplier
    cdef cnp.ndarray left, right, result
    cdef Py_ssize_t count
    cdef AddTensor kernel
    if not (byte_array(a) and byte_array(b)):
        return None
    left, right = <cnp.ndarray>a, <cnp.ndarray>b
    rank = cnp.PyArray_NDIM(left)
    count = cnp.PyArray_SIZE(left)
    if not (min_rank <= rank <= max_rank and cnp.PyArray_NDIM(right) == rank and count > 0
            and same_dims(right, cnp.PyArray_DIMS(left), rank)):
        return None
    a_type, b_type = cnp.PyArray_TYPE(left), cnp.PyArray_TYPE(right)
    if not (scalar_scale(a_scale, &scales[0]) and scalar_scale(b_scale, &scales[1])
            and scalar_scale(output_scale, &scales[2])):
        return None
    if not (scalar_byte(a_zero_point, a_type, &a_zero)
            and scalar_byte(b_zero_point, b_type, &b_zero)):
        return None
    if output_zero_point is None:
        out_type, out_zero = a_type, 0  # the output takes A's type
    elif type(output_zero_point) is np.uint8 or (
            type(output_zero_point) is cnp.ndarray
            and cnp.PyArray_TYPE(<cnp.ndarray>output_zero_point) == cnp.NPY_UINT8):
        out_type = cnp.NPY_UINT8
        if not scalar_byte(output_zero_point, out_type, &out_zero):
            return None
    else:
        out_type = cnp.NPY_INT8
        if not scalar_byte(output_zero_point, out_type, &out_zero):
            return None
    # add_values' multipliers: one float32 division each, finite products.
    a_multiplier = scales[0] / scales[2]
    b_multiplier = scales[1] / scales[2]
    if not (a_multiplier <= LARGEST_ADD_MULTIPLIER and b_multiplier <= LARGEST_ADD_MULTIPLIER):
        return None
    if not thread_count(n_threads):
        return None
    threads = n_threads
    if out is None:
        result = new_output(rank, cnp.PyArray_DIMS(left), out_type)
    elif usable_out(out, rank, cnp.PyArray_DIMS(left), out_type,
                    (a, b, a_scale, a_zero_point, b_scale, b_zero_point, output_scale,
                     output_zero_point)):
        result = <cnp.ndarray>out
    else:
        return None
    kernel = <AddTensor>PyCapsule_GetPointer(entry, ADD_ENTRY)
    with nogil:
        kernel(<const uint8_t*>cnp.PyArray_DATA(left), 0x80 if a_type == cnp.NPY_INT8 else 0,
               a_zero + (128 if a_type == cnp.NPY_INT8 else 0), a_multiplier,
               <const uint8_t*>cnp.PyArray_DATA(right), 0x80 if b_type == cnp.NPY_INT8 else 0,
               b_zero + (128 if b_type == cnp.NPY_INT8 else 0), b_multiplier, count, out_zero,
               -128 if out_type == cnp.NPY_INT8 else 0, 127 if out_type == cnp.NPY_INT8 else 255,
               <uint8_t*>cnp.PyArray_DATA(result), threads)
    return result
