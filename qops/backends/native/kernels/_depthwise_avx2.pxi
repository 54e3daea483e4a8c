# -- depthwise convolution with AVX2: pairs of taps per vpmaddwd ------------------
# Included by the AVX2 variant before _qgemm.pxi (whose _depthwise.pxi drives
# it); the AVX-512 variants include _depthwise_avx512.pxi, the portable one
# _depthwise_sse2.pxi.  Its plane driver, the same at 128 bits, is
# _depthwise_pair_driver.pxi.
#
# The design of _depthwise_avx512.pxi on 256-bit registers: a 32-bit lane j
# of a 32-byte load from int16 element e of the widened plane holds elements
# (e + 2j, e + 2j + 1), and vpmaddwd multiplies that pair by a pair of int16
# weights and adds the two products, exactly (|x| <= 255, |w - w_zp| <= 255:
# no pair reaches the one input, -32768 twice, that it saturates); vpaddd
# adds the pair to the lane's int32 sum.  A term covers two horizontally
# adjacent taps (dilation 1) or one (other dilations):
#
# * stride 2: lane j of a load at 2 ow0 + term offset is output ow0 + j;
# * stride 1: lane j of a load at ow0 + term offset is output ow0 + 2j, of
#   a load at ow0 + 1 + term offset output ow0 + 2j + 1, interleaved on the
#   way out.
#
# A block of outputs spans 16 plane columns (half the AVX-512 block, so the
# driver's plane, sized for 32-column blocks, covers every load).  A pass
# computes four output rows of two vectors each in eight accumulators, as
# the AVX-512 kernel does: eight of the sixteen ymm registers, with room for
# the two loads and the broadcast weight pair.  Requantization stays in the
# registers: float32 scale, clamp, round half to even (vcvtps2dq in the
# default rounding mode), zero point, low byte.  The driver runs this only
# when every sum plus bias fits int32.
#
# Two refinements for the common case.  When a channel's scaled sums are
# bounded well inside int32 (the driver passes the largest |sum|), the float
# clamp goes and saturating packs clamp to the output type instead.  And for
# 3 x 3 filters at vertical stride 1 or 2 (MobileNet's depthwise layers) a
# whole plane runs in C loops whose trip counts are constants: unrolled, with
# no tests of the kernel row and the sums kept in registers.

from libc.stdint cimport int16_t

# The C: include/qops_depthwise_avx2.h (in C: written in Cython, GCC copies
# the sums between registers on every iteration of the term loop).
cdef extern from "qops_depthwise_avx2.h":
    ctypedef struct dw_int "__m256i":
        pass
    ctypedef struct dw_float "__m256":
        pass
    dw_int dw_broadcast "_mm256_set1_epi32"(int value) nogil
    dw_float dw_broadcast_float "_mm256_set1_ps"(float value) nogil
    void depthwise_rows4 "qops_depthwise_rows4_avx2"(
        const int16_t* a, const int16_t* b, Py_ssize_t pitch, Py_ssize_t span,
        const int32_t* kernel_rows, const Py_ssize_t* offsets, Py_ssize_t columns,
        const int32_t* weights, int32_t start, dw_int* sums) nogil
    void store_pair_block "qops_depthwise_store_pairs_avx2"(
        dw_int even, dw_int odd, dw_float multiplier, dw_float floor_value,
        dw_float ceiling_value, dw_int zero_point, uint8_t* target, Py_ssize_t count) nogil
    void depthwise_plane_3x3s1 "qops_depthwise_plane_3x3s1_avx2"(
        const int16_t* plane, Py_ssize_t pitch, const int32_t* weights, Py_ssize_t out_h,
        Py_ssize_t out_w, int interleaved, int32_t bias, float multiplier, int32_t zero_point,
        int is_signed, uint8_t* out) nogil
    void depthwise_plane_3x3s2 "qops_depthwise_plane_3x3s2_avx2"(
        const int16_t* plane, Py_ssize_t pitch, const int32_t* weights, Py_ssize_t out_h,
        Py_ssize_t out_w, int interleaved, int32_t bias, float multiplier, int32_t zero_point,
        int is_signed, uint8_t* out) nogil
    void store_pair_block_packed "qops_depthwise_store_pairs_packed_avx2"(
        dw_int even, dw_int odd, dw_float multiplier, dw_int zero_point, int is_signed,
        uint8_t* target, Py_ssize_t count) nogil
    void store_blocks_packed "qops_depthwise_store_blocks_packed_avx2"(
        dw_int first, dw_int second, dw_float multiplier, dw_int zero_point, int is_signed,
        uint8_t* target, Py_ssize_t count) nogil
    void store_block "qops_depthwise_store_block_avx2"(
        dw_int sums, dw_float multiplier, dw_float floor_value, dw_float ceiling_value,
        dw_int zero_point, uint8_t* target, Py_ssize_t count) nogil
    void widen_run "qops_depthwise_widen_run_avx2"(const uint8_t* x, Py_ssize_t count,
                                                    int is_signed, int16_t* line) nogil
    # int32 lanes per ymm: a stride-2 block's outputs, half a pass's
    # (_depthwise_pair_driver.pxi).
    enum: DW_LANES "8"


include "_depthwise_pair_driver.pxi"
