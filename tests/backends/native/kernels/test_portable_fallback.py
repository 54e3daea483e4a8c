"""The kernels' C where the target has no SSE2 (the portable variant's
micro-kernel and packer, the SSE2 depthwise kernel, the GEMM driver's
transposed store and spreading of A): built here twice, as the build
compiles it and with __SSE2__ undefined, which selects the plain loops,
both against NumPy."""

import ctypes
import pathlib
import shutil
import subprocess

import numpy as np
import pytest
from kernel_cases import at_page_end

SOURCE = (pathlib.Path(__file__).parents[4] / "qops" / "backends" / "native" / "kernels"
          / "_qgemm_portable.pyx")
KERNEL_SOURCE = SOURCE.with_name("include") / "qops_portable.h"
COMPILER = shutil.which("cc") or shutil.which("gcc")


def build(code, directory, mode, warnings=()):
    """code compiled into a shared library in `directory`: as the build does
    ("sse2") or with __SSE2__ undefined ("plain")."""
    source = directory / "kernels.c"
    source.write_text(code)
    library = directory / "kernels.so"
    # The inlined kernels made external, to call them through ctypes.
    flags = ["-DQOPS_PORTABLE_INLINE="] + (["-U__SSE2__"] if mode == "plain" else [])
    # The headers' own includes are found beside them.
    subprocess.run([COMPILER, "-O2", *warnings, "-shared", "-fPIC", *flags,
                    f"-I{SOURCE.with_name('include')}", "-o", str(library), str(source)],
                   check=True, capture_output=True)
    return ctypes.CDLL(str(library))


def kernel_source():
    """The C kernels of the portable variant (its header), exported for
    ctypes (static in the extension module)."""
    return KERNEL_SOURCE.read_text().replace("static void", "void") + """
int qops_portable_sse2(void) { return QOPS_PORTABLE_SSE2; }
"""


@pytest.fixture(scope="module", params=["sse2", "plain"])
def kernels(request, tmp_path_factory):
    if COMPILER is None:
        pytest.skip("no C compiler")
    return build(kernel_source(), tmp_path_factory.mktemp(request.param), request.param)


def address(array):
    return ctypes.c_void_p(array.ctypes.data)


def spread(a):
    """Rows of int16 values as the packed block holds them (A_SPREAD 4): each
    pair of a row four times over."""
    pairs = a.reshape(a.shape[0], -1, 1, 2)
    return np.ascontiguousarray(np.repeat(pairs, 4, axis=2)).reshape(a.shape[0], -1)


def test_the_micro_kernel_sums_exactly(kernels):
    rng = np.random.default_rng(0)
    for groups in (1, 2, 7, 40):
        a = rng.integers(0, 256, (6, 4 * groups)).astype(np.int16)   # A' as int16
        b = rng.integers(-128, 128, (groups, 2, 8, 2)).astype(np.int16)  # [g][pair][c][2 k]
        tile = np.zeros(48, np.int32)
        block = spread(a)
        kernels.qops_portable_microkernel(address(block), ctypes.c_ssize_t(block.strides[0]),
                                          ctypes.c_ssize_t(groups), address(b), address(tile))
        columns = b.transpose(0, 1, 3, 2).reshape(4 * groups, 8)
        assert np.array_equal(tile, (a.astype(np.int64) @ columns).ravel())


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5])
def test_a_pass_of_fewer_rows_sums_them_and_zeroes_the_rest(kernels, rows):
    """qops_portable_microkernel_rows: the first `rows` rows of the tile are
    the block's exact products, the others zero.  The block is zero past its
    rows, as the driver packs it (the plain build reads it whole); with SSE2
    the rows past are filled with 255 instead, which a pass that read them
    would add to the tile's zero rows."""
    rng = np.random.default_rng(rows)
    for groups in (1, 3, 40):
        a = np.zeros((6, 4 * groups), np.int16)
        a[:rows] = rng.integers(0, 256, (rows, 4 * groups))
        b = rng.integers(-128, 128, (groups, 2, 8, 2)).astype(np.int16)
        block = spread(a)
        if kernels.qops_portable_sse2():
            block[rows:] = 255
        tile = np.full(48, 7, np.int32)
        kernels.qops_portable_microkernel_rows(
            address(block), ctypes.c_ssize_t(block.strides[0]), ctypes.c_ssize_t(groups),
            address(b), address(tile), ctypes.c_ssize_t(rows))
        columns = b.transpose(0, 1, 3, 2).reshape(4 * groups, 8)
        expected = a.astype(np.int64) @ columns
        expected[rows:] = 0
        assert np.array_equal(tile, expected.ravel())


@pytest.mark.parametrize("low", [0, -128], ids=["uint8", "int8"])
@pytest.mark.parametrize("row_terms", [False, True], ids=["no row terms", "row terms"])
def test_the_micro_kernel_requantizes_its_tile_in_one_call(kernels, low, row_terms):
    """qops_portable_tile_requantized against the rule stated in NumPy: the
    exact sums plus the column terms less the row's term (modulo 2**32),
    times the column's float32 multiplier, rounded half to even, plus the
    offset, clamped to [0, 255], plus low as a byte.  Multipliers of 2**-j
    make ties; most values land inside the range, and two columns with
    large terms saturate it at both ends.  With row terms, both terms are
    stored 2**31 off their values, so that only their difference modulo
    2**32 gives the right result."""
    if not kernels.qops_portable_sse2():
        pytest.skip("without SSE2 the tile epilogue is the module's plain rule")
    rng = np.random.default_rng([low + 128, row_terms])
    groups = 9
    a = rng.integers(0, 256, (6, 4 * groups)).astype(np.int16)
    b = rng.integers(-128, 128, (groups, 2, 8, 2)).astype(np.int16)
    block = spread(a)
    sums = a.astype(np.int64) @ b.transpose(0, 1, 3, 2).reshape(4 * groups, 8)
    exponent = rng.integers(10, 13, 8)
    multiplier = (2.0 ** -exponent).astype(np.float32)
    column = rng.integers(-2**10, 2**10, 8)
    column[:2] = (2**26, -2**26)
    row_term = rng.integers(-2**10, 2**10, 6) if row_terms else np.zeros(6, np.int64)
    # Row 0 of columns 2 to 4 exactly halfway between two integers once scaled.
    half = 2 ** (exponent[2:5] - 1)
    start = sums[0, 2:5] + column[2:5] - row_term[0]
    column[2:5] += (start // half | 1) * half - start
    shift = 2**31 if row_terms else 0
    stored_column = ((column + shift) % 2**32).astype(np.uint32)
    stored_row_term = ((row_term + shift) % 2**32).astype(np.uint32)
    offset = rng.integers(96, 160, 8).astype(np.int32)
    result = np.full((6, 24), 77, np.uint8)   # a pitch of 24: the bytes past 8 stay
    kernels.qops_portable_tile_requantized(
        address(block), ctypes.c_ssize_t(block.strides[0]), ctypes.c_ssize_t(groups),
        address(b), address(stored_column), address(stored_row_term) if row_terms else None,
        address(multiplier), address(offset), ctypes.c_int32(low), address(result),
        ctypes.c_ssize_t(24))
    value = sums + column - row_term[:, None]
    scaled = value.astype(np.float32) * multiplier
    rounded = np.rint(scaled).astype(np.int64) + offset
    integers = np.clip(rounded, 0, 255)
    inside = (rounded > 0) & (rounded < 255)
    assert inside.mean() > 0.5, "most values should lie inside the range"
    assert np.any((scaled == np.floor(scaled) + 0.5) & inside), "no ties inside the range"
    assert integers.min() == 0 and integers.max() == 255, "nothing saturates"
    assert np.array_equal(result[:, :8], ((integers + low) % 256).astype(np.uint8))
    assert np.all(result[:, 8:] == 77)


def test_groups_pack_to_int16_pairs_with_their_column_sums(kernels):
    """count groups of four rows (ldb bytes apart, wider than the panel's 8
    columns) into int16 pairs per group; the sums added to what was there."""
    rng = np.random.default_rng(1)
    for flip in (0, 128):
        for count in (0, 1, 5):
            rows = rng.integers(0, 256, (4 * count, 11)).astype(np.uint8)
            target = np.zeros((count, 32), np.int16)
            sums = np.full(8, 5, np.int32)
            kernels.qops_portable_pack_groups(
                address(rows), ctypes.c_ssize_t(11), ctypes.c_ssize_t(count),
                ctypes.c_uint8(flip), address(target), address(sums))
            values = (rows[:, :8] ^ flip).view(np.int8).astype(np.int16)
            for g in range(count):
                group = values[4 * g:4 * g + 4]
                assert np.array_equal(target[g], np.stack([group[0:2].T, group[2:4].T]).ravel())
            assert np.array_equal(sums, 5 + values.sum(0))


DEPTHWISE_SOURCE = SOURCE.with_name("include") / "qops_depthwise_sse2.h"
WARNINGS = ("-Wall", "-Werror", "-Wno-unused-function", "-Wno-unused-parameter")


def depthwise_source():
    """The C of the SSE2 depthwise kernel (its header), with an exported
    entry to its row widening."""
    return DEPTHWISE_SOURCE.read_text() + """
void widen(const uint8_t* x, ptrdiff_t count, int is_signed, int16_t* line) {
    qops_depthwise_widen_run_sse2(x, count, is_signed, line);
}
int built_with_sse2(void) {
#if defined(__SSE2__)
    return 1;
#else
    return 0;
#endif
}
"""


@pytest.mark.parametrize("mode", ["sse2", "plain"])
def test_the_depthwise_kernel_builds_with_and_without_sse2(mode, tmp_path):
    """Without SSE2 the portable variant keeps the row kernel, but the pair
    kernel's C must still compile (its names are declared to Cython); with
    SSE2, its row widening matches NumPy's for every run length, either
    signedness, writing nothing past the run."""
    if COMPILER is None:
        pytest.skip("no C compiler")
    built = build(depthwise_source(), tmp_path, mode, WARNINGS)
    if mode == "plain":
        assert not built.built_with_sse2()
        return
    if not built.built_with_sse2():
        pytest.skip("the compiler targets no SSE2 (not x86-64): the row kernel runs instead")
    widen = built.widen
    rng = np.random.default_rng(5)
    for count in range(0, 50):
        x = rng.integers(0, 256, count + 16).astype(np.uint8)
        for is_signed in (0, 1):
            line = np.full(count + 16, 7777, np.int16)
            widen(address(x), ctypes.c_ssize_t(count), ctypes.c_int(is_signed), address(line))
            values = (x.view(np.int8) if is_signed else x)[:count].astype(np.int16)
            assert np.array_equal(line[:count], values) and np.all(line[count:] == 7777)


@pytest.mark.parametrize("mode", ["sse2", "plain"])
def test_pairs_spread_in_place_to_four_copies(mode, tmp_path):
    """The driver's spreading of a packed row of A (A_SPREAD 4), both builds:
    for every count of pairs up to 40, in place, each pair four times in
    order, nothing written past the spread row."""
    if COMPILER is None:
        pytest.skip("no C compiler")
    code = (KERNEL_SOURCE.with_name("qops_gemm_pack_a.h").read_text()
            .replace("static void qops_spread_pairs", "void qops_spread_pairs"))
    spread_pairs = build(code, tmp_path, mode,
                         WARNINGS).qops_spread_pairs
    rng = np.random.default_rng(4)
    for pairs in range(41):
        values = rng.integers(-32768, 32768, 2 * pairs).astype(np.int16)
        row = np.full(8 * pairs + 16, 12345, np.int16)
        row[:2 * pairs] = values
        spread_pairs(address(row), ctypes.c_ssize_t(pairs))
        assert np.array_equal(row[:8 * pairs], spread(values[None])[0]), pairs
        assert np.all(row[8 * pairs:] == 12345), pairs


@pytest.mark.parametrize("mode", ["sse2", "plain"])
def test_the_transposed_store_writes_each_column_as_a_run(mode, tmp_path):
    """The GEMM driver's 16 x 16 byte transpose (a channels-first output's
    store, the channels-last copy of an image), both builds: every height
    and column count up to 16, each byte xor flip, column c's bytes at
    target + c * stride, nothing written past a run or a column; and nothing
    read past `readable` bytes from the source, which here end where an
    unreadable page begins."""
    if COMPILER is None:
        pytest.skip("no C compiler")
    code = KERNEL_SOURCE.with_name("qops_gemm_epilogues.h").read_text()
    code = code.replace("static inline void qops_transpose_block16", "void qops_transpose_block16")
    transpose = build(code, tmp_path, mode, WARNINGS).qops_transpose_block16
    rng = np.random.default_rng(16)
    pitch, stride = 40, 23
    for flip in (0, 0x80):
        for height in range(1, 17):
            for columns in range(1, 17):
                source = rng.integers(0, 256, (16, pitch)).astype(np.uint8)
                # The rows' last byte ends a readable page: a 16-byte read
                # of the last row's `columns` bytes would fault.
                readable = (height - 1) * pitch + columns
                ending = at_page_end(source.reshape(-1)[:readable])
                at = address(source) if ending is None else address(ending)
                target = np.full(16 * stride + 16, 77, np.uint8)
                transpose(at, ctypes.c_ssize_t(pitch), ctypes.c_ssize_t(height),
                          ctypes.c_ssize_t(columns), address(target), ctypes.c_ssize_t(stride),
                          ctypes.c_uint8(flip), ctypes.c_ssize_t(readable))
                expected = np.full_like(target, 77)
                for c in range(columns):
                    expected[c * stride:c * stride + height] = source[:height, c] ^ flip
                assert np.array_equal(target, expected), (flip, height, columns)
                # With every row readable whole, the same bytes.
                whole = np.full_like(target, 77)
                transpose(address(source), ctypes.c_ssize_t(pitch), ctypes.c_ssize_t(height),
                          ctypes.c_ssize_t(columns), address(whole), ctypes.c_ssize_t(stride),
                          ctypes.c_uint8(flip), ctypes.c_ssize_t(source.size))
                assert np.array_equal(whole, expected), (flip, height, columns)
