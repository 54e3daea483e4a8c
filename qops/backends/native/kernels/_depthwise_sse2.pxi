# -- depthwise convolution with SSE2: pairs of taps per pmaddwd --------------------
# Included by the portable variant before _qgemm.pxi (whose _depthwise.pxi
# drives it).  SSE2 is the baseline of x86-64, so every x86-64 target takes
# this; elsewhere DEPTHWISE_PAIRS is 0 (_qgemm_portable.pxd) and
# _depthwise.pxi runs its row kernel, so the names below exist only to
# compile.
#
# The AVX2 kernel's design (_depthwise_avx2.pxi) on 128-bit registers: lane
# j of a 16-byte load from int16 element e of the widened plane holds the
# pair (e + 2j, e + 2j + 1); pmaddwd multiplies it by a pair of int16
# weights and adds the two products exactly (neither operand reaches
# -32768), and paddd adds that to the lane's int32 sum.  A pass computes
# four output rows of two vectors, 8 outputs per row (a stride-1 block's
# four even and four odd outputs, or two stride-2 blocks of four), in eight
# of the sixteen xmm registers, leaving room for the two loads, a weight
# pair and the copies that SSE2's two-operand forms need.  Requantization
# stays in the registers: float32 scale, clamp, round half to even
# (cvtps2dq in the default rounding mode), zero point, low byte; where the
# driver has bounded the sums, saturating packs clamp instead.  SSE2 has
# neither pmovzxbw nor packusdw: bytes widen by unpacking (against zero, or
# against themselves and an arithmetic shift for signed bytes), and int32
# packs through packssdw, whose saturation is exact here (the values are
# already inside int16 or clamped to a byte).

from libc.stdint cimport int16_t

# The C: include/qops_depthwise_sse2.h.
cdef extern from "qops_depthwise_sse2.h":
    ctypedef struct dw_int "qops_dw_int":
        pass
    ctypedef struct dw_float "qops_dw_float":
        pass
    dw_int dw_broadcast "qops_dw_broadcast"(int value) nogil
    dw_float dw_broadcast_float "qops_dw_broadcast_float"(float value) nogil
    void depthwise_rows4 "qops_depthwise_rows4_sse2"(
        const int16_t* a, const int16_t* b, Py_ssize_t pitch, Py_ssize_t span,
        const int32_t* kernel_rows, const Py_ssize_t* offsets, Py_ssize_t columns,
        const int32_t* weights, int32_t start, dw_int* sums) nogil
    void store_pair_block "qops_depthwise_store_pairs_sse2"(
        dw_int even, dw_int odd, dw_float multiplier, dw_float floor_value,
        dw_float ceiling_value, dw_int zero_point, uint8_t* target, Py_ssize_t count) nogil
    void store_block "qops_depthwise_store_block_sse2"(
        dw_int sums, dw_float multiplier, dw_float floor_value, dw_float ceiling_value,
        dw_int zero_point, uint8_t* target, Py_ssize_t count) nogil
    void store_pair_block_packed "qops_depthwise_store_pairs_packed_sse2"(
        dw_int even, dw_int odd, dw_float multiplier, dw_int zero_point, int is_signed,
        uint8_t* target, Py_ssize_t count) nogil
    void store_blocks_packed "qops_depthwise_store_blocks_packed_sse2"(
        dw_int first, dw_int second, dw_float multiplier, dw_int zero_point, int is_signed,
        uint8_t* target, Py_ssize_t count) nogil
    void depthwise_plane_3x3s1 "qops_depthwise_plane_3x3s1_sse2"(
        const int16_t* plane, Py_ssize_t pitch, const int32_t* weights, Py_ssize_t out_h,
        Py_ssize_t out_w, int interleaved, int32_t bias, float multiplier, int32_t zero_point,
        int is_signed, uint8_t* out) nogil
    void depthwise_plane_3x3s2 "qops_depthwise_plane_3x3s2_sse2"(
        const int16_t* plane, Py_ssize_t pitch, const int32_t* weights, Py_ssize_t out_h,
        Py_ssize_t out_w, int interleaved, int32_t bias, float multiplier, int32_t zero_point,
        int is_signed, uint8_t* out) nogil
    void widen_run "qops_depthwise_widen_run_sse2"(const uint8_t* x, Py_ssize_t count,
                                                    int is_signed, int16_t* line) nogil
    # int32 lanes per xmm: a stride-2 block's outputs, half a pass's
    # (_depthwise_pair_driver.pxi).
    enum: DW_LANES "4"


include "_depthwise_pair_driver.pxi"
