# Softmax of float32 rows (include/qops_softmax.h), for the model session's
# Softmax (qops.onnx._numpy_ops states the same steps in NumPy), a Div or Mul
# by a constant before it taken in.  Each row is one task's alone, its sum
# in a fixed order, so results do not depend on the thread count.

cdef extern from "qops_softmax.h":
    void softmax_row "qops_softmax_row"(const float* x, Py_ssize_t n, int before,
                                        float constant, float* out) noexcept nogil
    cdef enum:
        SOFTMAX_PLAIN "QOPS_SOFTMAX_PLAIN"
        SOFTMAX_DIVIDED "QOPS_SOFTMAX_DIVIDED"
        SOFTMAX_MULTIPLIED "QOPS_SOFTMAX_MULTIPLIED"


cdef struct FloatSoftmaxJob:
    const float* x
    float* out
    Py_ssize_t length
    int before
    float constant


cdef void float_softmax_range(void* context, Py_ssize_t start, Py_ssize_t stop,
                        int slot) noexcept nogil:
    cdef const FloatSoftmaxJob* job = <const FloatSoftmaxJob*>context
    cdef Py_ssize_t row
    for row in range(start, stop):
        softmax_row(job.x + row * job.length, job.length, job.before, job.constant,
                    job.out + row * job.length)


def softmax_float32_rows(const float[:, ::1] x, float[:, ::1] out, divisor, multiplier,
                         int n_threads):
    """out <- the softmax of each row of x, after x / divisor or x * multiplier
    (float32, or None; not both).  The shapes are checked (ValueError); out
    must not be x."""
    cdef FloatSoftmaxJob job
    cdef Py_ssize_t rows = x.shape[0], length = x.shape[1]
    if out.shape[0] != rows or out.shape[1] != length:
        raise ValueError("softmax_float32_rows: the arrays do not cover the output")
    if divisor is not None and multiplier is not None:
        raise ValueError("softmax_float32_rows: a divisor or a multiplier, not both")
    if rows == 0 or length == 0:
        return
    if &out[0, 0] == &x[0, 0]:
        raise ValueError("softmax_float32_rows: out must not be x")
    job.before, job.constant = SOFTMAX_PLAIN, 1.0
    if divisor is not None:
        job.before, job.constant = SOFTMAX_DIVIDED, divisor
    elif multiplier is not None:
        job.before, job.constant = SOFTMAX_MULTIPLIED, multiplier
    job.x = &x[0, 0]
    job.out = &out[0, 0]
    job.length = length
    with nogil:
        run_range(float_softmax_range, &job, rows, max(1, PARALLEL_MIN // (8 * length)),
                  n_threads if rows * length >= PARALLEL_MIN // 4 else 1)
