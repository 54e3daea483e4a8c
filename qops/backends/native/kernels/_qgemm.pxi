# The quantized GEMM driver, the packers and the entry points, shared by every
# SIMD variant.  A variant defines what the interface of _variant.pxd names
# (its tile and block constants in its own .pxd; the micro-kernel's forms,
# which _microkernel_contract.pxi joins into the contract, pack_groups, the
# depthwise hooks in its .pyx) and then includes this file,
# so each variant compiles with its own flags and its own micro-tile shape.
# This file holds what every part shares (operands, the Gemm and Epilogue
# structs, the scratch); the parts, by role, are included below it.
#
# Operands.  A is read where it lies, one start per row: a matrix multiply's
# rows of A, or a convolution's output pixels in a channels-last copy of the
# image, whose K values are the real bytes of `steps` runs (one per filter
# tap or filter row) at fixed distances from the pixel's start.  Pack, then
# compute: for each block of K_BLOCK_GROUPS groups of 4 k, the driver packs
# MR rows of A contiguously (in the variant's A_BYTES, zero past K: a
# convolution's runs packed end to end, so K is channels x taps rounded up to
# 4, however few channels a tap has), and the micro-kernel sweeps that block
# across the unit's panels of B.  B is packed once into NR-column panels
# (the variant's B_BYTES and layout): the filter of a convolution or a
# compiled operator's B once, a call's B (or a 1 x 1 convolution's image)
# during the product, a column tile at a time, by the unit that first reads it.
#
# Arithmetic: the micro-kernel multiplies unsigned A' by signed B' (the
# vpdpbusd form).  int8 A is read as A' = A + 128 (xor 0x80) and uint8 B as
# B' = B - 128, and the zero points move with them, so
#     sum_k (A - a_zp)(B - b_zp) = sum_k (A' - a_zp')(B' - b_zp')
#       = S - b_zp' * rowsum(A') - a_zp' * colsum(B') + K * a_zp' * b_zp'
# with S = sum_k A' B'.  |A' B'| <= 255 * 128, so a block's S fits int32
# (a block is at most 65536 k) and blocks add in int64.  Row and column sums
# are int64.  Nothing wraps unnoticed: when the whole value provably fits
# int32 (K * 255 * 255 + |bias| < 2**31), blocks add and the epilogue works
# modulo 2**32 in int32 lanes (`requantize_line`); otherwise in int64.

from libc.math cimport fabs
from libc.stdint cimport (
    INT64_MAX, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t)
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

import threading

cimport numpy as cnp
import numpy as np

from qops.backends.native._outputs cimport empty_array

cnp.import_array()

from qops.backends.native.kernels._qops_pool cimport MAX_WORKERS, run_range, run_tasks
from qops.backends.native.kernels._requantize cimport (
    RowTerms, TileTerms,
    clamped_round,
    exact_line,
    exact_row_line,
    packs_clamp_exactly,
    requantize,
    requantize_line,
    requantize_row_line,
    requantize_sums,
)

cdef enum:
    # |(A - a_zp)(B - b_zp)| <= 255 * 255 for any 8-bit operands.
    MAX_PRODUCT = 65025
    INT32_LIMIT = 2147483647
    # Bytes of a panel per group of 4 k, and of a packed row of A per block.
    GROUP_BYTES = NR * 4 * B_BYTES
    BLOCK_ROW_BYTES = K_BLOCK_GROUPS * 4 * A_BYTES * A_SPREAD
    # A thread's scratch (one slot per thread of a run): two packed blocks of
    # A (the micro-tile's, and the next one's, packed ahead: run_unit), then
    # the unit's sums across blocks (int64 at most), 64-byte aligned ...
    SLOT_A_BYTES = (2 * MR * BLOCK_ROW_BYTES + 63) & ~63
    SLOT_UNIT_OFFSET = SLOT_A_BYTES + TILE_M_PANELS * MR * TILE_COLUMNS * 8
    # ... then the unit's requantized bytes, TILE_COLUMNS per row.
    # (one block more than a unit's TILE_M_PANELS: run_gemm folds a lone
    # short last block into the unit above it).
    SLOT_BYTES = SLOT_UNIT_OFFSET + (((TILE_M_PANELS + 1) * MR * TILE_COLUMNS + 63) & ~63)

if 2 * MR * BLOCK_ROW_BYTES > TILE_M_PANELS * MR * TILE_COLUMNS * 8:
    raise ImportError("BLOCK_ROW_BYTES: run_unit keeps two packed blocks in the sums' scratch")
if PACK_COLUMNS % NR:
    raise ImportError("PACK_COLUMNS: a packing task takes whole panels")
if TILE_COLUMNS % 16:
    raise ImportError("TILE_COLUMNS: store_unit transposes blocks of 16 columns")
if <Py_ssize_t>TILE_COLUMNS > <Py_ssize_t>PACK_COLUMNS:
    raise ImportError("TILE_COLUMNS: a unit's columns of B are packed as one task")
# A block's S fits int32 for up to 65792 k (|A' B'| <= 255 * 128).
if K_BLOCK_GROUPS > 16384:
    raise ImportError("K_BLOCK_GROUPS: a block of more than 65536 k could wrap int32")
# k per block of K, at Python level: the tests that cross blocks size K by it.
K_BLOCK = K_BLOCK_GROUPS * 4
if int(A_SPREAD) not in (1, 4) or (A_SPREAD == 4 and A_BYTES != 2):
    raise ImportError("A_SPREAD: spread_pairs makes four copies of int16 pairs")


cdef struct Gemm:
    const uint8_t* a              # row r of A starts at a + row_offset[r] (or r * lda)
    const Py_ssize_t* row_offset  # NULL: rows are lda bytes apart
    Py_ssize_t lda
    Py_ssize_t m
    uint8_t a_flip                # A' = A ^ a_flip (0x80 for int8 A)
    const Py_ssize_t* step_offset  # per step, added to a row's start
    Py_ssize_t steps
    Py_ssize_t step_length         # K values per step (K = steps * step_length)
    # A_SLACK when every run of A may be read A_SLACK bytes past its end
    # (a convolution's copy, allocated with that slack), else 0.
    Py_ssize_t a_slack
    Py_ssize_t groups              # ceil(K / 4): the packed depth
    const int8_t* b                # NR-column panels of `groups` groups
    # The same panels narrowed to a byte per value (B_BYTES 2 only), which
    # a product of one or two rows reads instead (microkernel_narrow); or
    # NULL.  Member b_i at b_narrow + b_i * b_batch_stride / 2.
    const int8_t* b_narrow
    Py_ssize_t n
    uint8_t* out                   # (r, c) at out[r * out_row_stride + c * out_col_stride]
    Py_ssize_t out_row_stride
    Py_ssize_t out_col_stride
    # `batch` products of one shape: product i reads A at a + a_i *
    # a_batch_stride and B at b + b_i * b_batch_stride, and writes out + i *
    # out_batch_stride, with a_i = a_index[i] and b_i = b_index[i] (i where
    # an index is NULL): a matrix multiply's broadcast batch, or a chunk of
    # a convolution's images (one B).
    Py_ssize_t batch
    const int64_t* a_index
    const int64_t* b_index
    Py_ssize_t a_batch_stride
    Py_ssize_t b_batch_stride
    Py_ssize_t out_batch_stride
    # A constant A packed once (BoundProduct), whole rows of K at a_packed +
    # row * a_packed_stride (the rows past M zero, to a whole block), member
    # a_i a_packed_batch_stride on; NULL when each unit packs its blocks.
    const uint8_t* a_packed
    Py_ssize_t a_packed_stride
    Py_ssize_t a_packed_batch_stride
    uint8_t* scratch               # SLOT_BYTES per thread, 64-byte aligned
    # B packed during the run (b_ready NULL when it comes packed): each
    # unit's column tile of B member b_i (K x N bytes at b_source + b_i * K
    # * N) is packed into its panels (b_panels, b_batch_stride per member)
    # and column sums (b_sums, b_sums_stride per member) by the first unit
    # that needs it; b_ready[b_i * b_column_tiles + tile] says how far that
    # is (PackState).
    const uint8_t* b_source
    uint8_t b_source_flip
    int8_t* b_panels
    int64_t* b_sums
    Py_ssize_t b_sums_stride
    int32_t* b_ready
    Py_ssize_t b_column_tiles
    # Row sums computed during the run (a_ready NULL when none are, or they
    # come computed): each unit's band of rows of A member a_i is summed
    # into a_sums + a_i * a_sums_stride by the first unit that needs it;
    # a_ready[a_i * a_row_states + p] says how far that is (PackState) for
    # the band starting at micro-tile p.
    int64_t* a_sums
    Py_ssize_t a_sums_stride
    int32_t* a_ready
    Py_ssize_t a_row_states


cdef struct Epilogue:
    # value[r, c] = S[r, c] + column_term[c] - column_zero[c] * row_term[r]
    #               - row_zero[r] * column_sum[c],
    # row_term[r] = row_sum[r] - k * row_zero[r]; then requantized.
    # With per_row, the bias, multiplier and output zero point belong to the
    # row (column_term[r], multiplier[r], out_zero[r]) and column_zero is one
    # value for every column: a pointwise convolution computed as filter x
    # image, whose rows are output channels.
    const int64_t* column_term      # bias per column, or NULL for none
    const int32_t* column_zero      # b_zp' per column
    const int64_t* column_sum       # sum_k B' per column
    const int32_t* row_zero         # a_zp' at [r * row_zero_step]
    Py_ssize_t row_zero_step        # 0: one for every row
    const int64_t* row_sum          # sum_k A' per row; NULL when every b_zp' is 0
    Py_ssize_t row_sum_batch_stride # between the row sums of A matrices (a_i)
    Py_ssize_t column_sum_batch_stride  # between the column sums of B matrices (b_i)
    int64_t k                       # the real K
    const float* multiplier         # at [r * multiplier_step + c]
    Py_ssize_t multiplier_step
    const int32_t* out_zero         # at [r * out_zero_step + c]
    Py_ssize_t out_zero_step
    int32_t low
    int32_t high
    bint per_row
    bint row_sums_given             # row_sum is the caller's: read, never computed
    bint sums_fit_int32             # the whole value fits int32
    # raw: write the exact value as int32, unrequantized (CONVOLUTION_INTEGER,
    # MATRIX_MULTIPLY_INTEGER; the glue runs them here only when K proves the
    # value fits).  The output is then int32: strides count elements of 4 bytes.
    bint raw
    # to_float (with raw): write float32(value) * multiplier[r, c], plus
    # float_bias[c] when given, as float32 instead (MATRIX_MULTIPLY_INTEGER_TO_FLOAT's
    # rule, each step rounded once: the kernels are built without contraction).
    bint to_float
    const float* float_bias
    # The RowTermsStore of each block of MR rows (_gemm_epilogues.pxi), made
    # once where a bound product runs many times with one A (BoundProduct);
    # NULL: each unit makes its blocks' terms.
    const void* row_stores


cdef inline Py_ssize_t ceil_div(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return (a + b - 1) // b


cdef inline Py_ssize_t round_up(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return ceil_div(a, b) * b


cdef inline Py_ssize_t unit_panels(Py_ssize_t n) noexcept nogil:
    """Panels of B in each column of units (the last may have fewer): as few
    columns as TILE_COLUMNS allows, their panels shared out as evenly as one
    width for all allows (13 panels as 7 and 6, not 8 and 5; 19 as 7, 7 and
    5), so that threads taking whole columns get near-equal work.  The unit
    run (run_gemm) and the packing during the product (ensure_packed) both
    cut B this way."""
    cdef Py_ssize_t n_panels = ceil_div(n, NR)
    return max(ceil_div(n_panels, max(ceil_div(n_panels, TILE_COLUMNS // NR), 1)), 1)


cdef inline Py_ssize_t unit_columns(Py_ssize_t n) noexcept nogil:
    """Columns of units over N (unit_panels' cut): one packing state each
    when B is packed during the product."""
    return ceil_div(ceil_div(n, NR), unit_panels(n))


def scratch_bytes(int n_threads):
    """Bytes of scratch a run on ``n_threads`` threads needs (Gemm.scratch),
    with room to align it."""
    return max(n_threads, 1) * SLOT_BYTES + 64


# Buffers that live for one call only (the threads' scratch, a plain call's
# packed B, a convolution's channels-last copy and offsets) are kept per
# Python thread and reused by its next call: a fresh buffer of more than
# 128 KiB is a new mapping from the allocator, and its first touch of every
# page is a page fault, which on small products costs as much as the
# arithmetic.  Above WORKSPACE_LIMIT bytes a buffer is allocated afresh
# (the work then dwarfs the faults) and not kept.
WORKSPACE_LIMIT = 16 << 20
_workspace = threading.local()


cdef tuple new_buffer(Py_ssize_t nbytes):
    """(array, capacity, address): a buffer of at least nbytes, and 64 bytes
    more so that workspace_bytes can align its start."""
    cdef uint8_t[::1] view
    capacity = max(nbytes, 64)
    array = np.empty(capacity + 64, np.uint8)
    view = array
    return array, capacity, <Py_ssize_t>&view[0]


cdef tuple thread_buffer(str name, Py_ssize_t nbytes):
    buffers = _workspace.__dict__.setdefault("buffers", {})
    entry = buffers.get(name)
    if entry is None or <Py_ssize_t>entry[1] < nbytes:
        entry = buffers[name] = new_buffer(nbytes)
    return entry


def workspace(str name, Py_ssize_t count, dtype):
    """A 1-D array of ``count`` values of ``dtype``, uninitialized, from this
    thread's buffer ``name``; it holds until this thread's next request of
    ``name``, so it must never outlive the call."""
    dtype = np.dtype(dtype)
    cdef Py_ssize_t nbytes = count * dtype.itemsize
    if nbytes > WORKSPACE_LIMIT:
        return np.empty(count, dtype)
    return thread_buffer(name, nbytes)[0][:nbytes].view(dtype)


cdef uint8_t* workspace_bytes(str name, Py_ssize_t nbytes, list keep) except NULL:
    """The 64-byte aligned start of nbytes of this thread's buffer ``name``,
    as workspace() but with no array view of it (a view and its memoryview
    cost about a microsecond, and a call asked for four); a buffer above
    WORKSPACE_LIMIT is fresh, appended to ``keep``, which the caller holds
    until the run ends."""
    if nbytes > WORKSPACE_LIMIT:
        entry = new_buffer(nbytes)
        keep.append(entry[0])
    else:
        entry = thread_buffer(name, nbytes)
    cdef Py_ssize_t address = entry[2]
    return <uint8_t*>(address + (-address & 63))


cdef inline bint bytes_taken(object operand, Py_ssize_t nbytes, const uint8_t** data):
    """Whether a bound run takes ``operand`` as it is: a C-contiguous NumPy
    array of single bytes, ``nbytes`` of them, its first at ``*data``."""
    cdef cnp.ndarray array
    if type(operand) is not np.ndarray:
        return False
    array = <cnp.ndarray>operand
    if (not cnp.PyArray_IS_C_CONTIGUOUS(array) or cnp.PyArray_ITEMSIZE(array) != 1
            or cnp.PyArray_NBYTES(array) != nbytes):
        return False
    data[0] = <const uint8_t*>cnp.PyArray_DATA(array)
    return True


cdef int output_form(object shape, object dtype, Py_ssize_t nbytes, cnp.npy_intp* dims,
                     int* rank) except -1:
    """``dims`` and ``rank`` of ``shape`` (at most NPY_MAXDIMS dimensions),
    whose values of ``dtype`` must be exactly ``nbytes`` bytes (ValueError
    otherwise, and nothing written)."""
    cdef Py_ssize_t i, size = np.dtype(dtype).itemsize
    shape = tuple(shape)
    if len(shape) > cnp.NPY_MAXDIMS:
        raise ValueError("bound run: too many output dimensions")
    for i in range(len(shape)):
        if shape[i] < 0:
            raise ValueError("bound run: a negative output dimension")
        size *= shape[i]
    if size != nbytes:
        raise ValueError("bound run: the output shape does not hold the output's bytes")
    for i in range(len(shape)):
        dims[i] = shape[i]
    rank[0] = len(shape)
    return 0


# The GEMM by role, each part using the ones above it.
include "_microkernel_contract.pxi"
include "_gemm_pack_b.pxi"
include "_gemm_pack_a.pxi"
include "_gemm_epilogues.pxi"
include "_gemm_units.pxi"
include "_gemm_matmul.pxi"
include "_gemm_convolution.pxi"
include "_depthwise.pxi"
include "_depthwise_channels_last.pxi"
include "_expand_depthwise.pxi"
