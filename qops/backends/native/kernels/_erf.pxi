# The error function of float32 values (include/qops_erf.h), for the model
# session's Erf (qops.onnx._numpy_ops states the same approximation in
# NumPy).  Each element is computed alone, so results do not depend on the
# thread count.

cdef extern from "qops_erf.h":
    void erf_values "qops_erf_float32"(const float* x, float* out,
                                       Py_ssize_t count) noexcept nogil
    void gelu_values "qops_gelu_float32"(const float* x, float* out, Py_ssize_t count,
                                         float divisor, float addend, float factor,
                                         int factor_first) noexcept nogil


cdef struct ErfJob:
    const float* x
    float* out
    Py_ssize_t count


cdef void erf_range(void* context, Py_ssize_t start, Py_ssize_t stop, int slot) noexcept nogil:
    """Elements [start * ROW, stop * ROW) of the job (the last ROW short)."""
    cdef const ErfJob* job = <const ErfJob*>context
    cdef Py_ssize_t first = start * ROW
    erf_values(job.x + first, job.out + first, min(stop * ROW, job.count) - first)


def erf_float32(const float[::1] x, float[::1] out, int n_threads):
    """out <- erf(x), element by element (x and out of one length: ValueError
    otherwise)."""
    cdef ErfJob job
    cdef Py_ssize_t count = x.shape[0]
    if out.shape[0] != count:
        raise ValueError("erf_float32: the arrays do not cover the output")
    if count == 0:
        return
    job.x = &x[0]
    job.out = &out[0]
    job.count = count
    with nogil:
        run_range(erf_range, &job, (count + ROW - 1) // ROW, 1,
                  n_threads if count >= PARALLEL_MIN else 1)


cdef struct GeluJob:
    const float* x
    float* out
    Py_ssize_t count
    float divisor, addend, factor
    bint factor_first


cdef void gelu_range(void* context, Py_ssize_t start, Py_ssize_t stop, int slot) noexcept nogil:
    """Elements [start * ROW, stop * ROW) of the job (the last ROW short)."""
    cdef const GeluJob* job = <const GeluJob*>context
    cdef Py_ssize_t first = start * ROW
    gelu_values(job.x + first, job.out + first, min(stop * ROW, job.count) - first,
                job.divisor, job.addend, job.factor, job.factor_first)


def gelu_float32(const float[::1] x, float[::1] out, float divisor, float addend, float factor,
                 int n_threads, bint factor_first=False):
    """out <- (x * (erf(x / divisor) + addend)) * factor, element by element,
    or with ``factor_first`` (factor * x) * (addend + erf(x / divisor)) (x and
    out of one length: ValueError otherwise)."""
    cdef GeluJob job
    cdef Py_ssize_t count = x.shape[0]
    if out.shape[0] != count:
        raise ValueError("gelu_float32: the arrays do not cover the output")
    if count == 0:
        return
    job.x = &x[0]
    job.out = &out[0]
    job.count = count
    job.divisor = divisor
    job.addend = addend
    job.factor = factor
    job.factor_first = factor_first
    with nogil:
        run_range(gelu_range, &job, (count + ROW - 1) // ROW, 1,
                  n_threads if count >= PARALLEL_MIN else 1)
