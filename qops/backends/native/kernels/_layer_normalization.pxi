# LayerNormalization of float32 rows (include/qops_layer_normalization.h),
# for the model session's LayerNormalization (qops.onnx._numpy_ops states
# the same steps in NumPy).  Each row is one task's alone, its sums in a
# fixed order, so results do not depend on the thread count.

cdef extern from "qops_layer_normalization.h":
    void layer_normalization_row "qops_layer_normalization_row"(
        const float* x, Py_ssize_t n, const float* scale, const float* bias, float epsilon,
        float* out) noexcept nogil


cdef struct NormalizationJob:
    const float* x
    const float* scale
    const float* bias
    float epsilon
    float* out
    Py_ssize_t length


cdef void normalization_range(void* context, Py_ssize_t start, Py_ssize_t stop,
                              int slot) noexcept nogil:
    cdef const NormalizationJob* job = <const NormalizationJob*>context
    cdef Py_ssize_t row
    for row in range(start, stop):
        layer_normalization_row(job.x + row * job.length, job.length, job.scale, job.bias,
                                job.epsilon, job.out + row * job.length)


def layer_normalization_rows(const float[:, ::1] x, const float[::1] scale, bias,
                             float epsilon, float[:, ::1] out, int n_threads):
    """out <- each row of x normalized, times scale (plus bias: float32 of
    the rows' length, or None).  The shapes are checked (ValueError)."""
    cdef NormalizationJob job
    cdef const float[::1] bias_view
    cdef Py_ssize_t rows = x.shape[0], length = x.shape[1]
    if (out.shape[0] != rows or out.shape[1] != length or scale.shape[0] != length
            or length == 0):
        raise ValueError("layer_normalization_rows: the arrays do not cover the output")
    job.bias = NULL
    if bias is not None:
        bias_view = bias
        if bias_view.shape[0] != length:
            raise ValueError("layer_normalization_rows: the arrays do not cover the output")
        job.bias = &bias_view[0]
    if rows == 0:
        return
    job.x = &x[0, 0]
    job.scale = &scale[0]
    job.epsilon = epsilon
    job.out = &out[0, 0]
    job.length = length
    with nogil:
        run_range(normalization_range, &job, rows, max(1, PARALLEL_MIN // (8 * length)),
                  n_threads if rows * length >= PARALLEL_MIN // 4 else 1)
