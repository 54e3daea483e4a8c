"""The depthwise pair kernels' term loop (include/qops_depthwise_terms_*.h,
rendered from one template at 128, 256 and 512 bits) against NumPy.

Each width is compiled here into a small shared library and run where this
CPU has the width's instructions.  The AVX-512 loop is built twice: with
VNNI (vpdpwssd, as the AVX-512 variants build it) and without (vpmaddwd
then vpaddd), so that a CPU with AVX-512BW but no VNNI runs it too.  The
AVX2 and SSE2 loops are also covered through the depthwise kernels
(tests/ops/test_convolution.py); the AVX-512 one is covered by those tests
only on a CPU with AVX-512 VNNI."""

import ctypes

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from c_compiler import compiler, library_at_width

# build -> (vector bits, the ISA's name in the header, c_compiler's width)
BUILDS = {
    "sse2": (128, "sse2", "sse2"),
    "avx2": (256, "avx2", "avx2"),
    "avx512": (512, "avx512", "avx512"),
    "avx512-vnni": (512, "avx512", "avx512-vnni"),
}

HARNESS = """
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "qops_depthwise_terms_{isa}.h"

void run(const int16_t* a, const int16_t* b, ptrdiff_t pitch, ptrdiff_t span,
         const int32_t* kernel_rows, const ptrdiff_t* offsets, ptrdiff_t columns,
         const int32_t* weights, int32_t start, int32_t* out) {{
    __m{width}i sums[8];
    qops_depthwise_rows4_{isa}(a, b, pitch, span, kernel_rows, offsets, columns, weights,
                               start, sums);
    memcpy(out, sums, sizeof sums);
}}
"""


@pytest.fixture(scope="module", params=sorted(BUILDS))
def term_loop(request, tmp_path_factory):
    """(lanes, run) for one build, or a skip where it cannot be built or run."""
    width, isa, build = BUILDS[request.param]
    if compiler() is None:
        pytest.skip("no C compiler (CC, or sysconfig's CC) found")
    library = library_at_width(HARNESS.format(isa=isa, width=width), build,
                               tmp_path_factory.mktemp(request.param))
    if library is None:
        pytest.skip(f"{request.param}: the compiler refused it, or this CPU cannot run it")
    pointer = ctypes.c_void_p
    library.run.argtypes = [pointer, pointer, ctypes.c_ssize_t, ctypes.c_ssize_t, pointer,
                            pointer, ctypes.c_ssize_t, pointer, ctypes.c_int32, pointer]
    library.run.restype = None
    lanes = width // 32

    def run(plane, a_at, b_at, pitch, span, kernel_rows, offsets, weights, start):
        out = np.zeros((8, lanes), np.int32)
        address = plane.ctypes.data
        library.run(address + 2 * a_at, address + 2 * b_at, pitch, span,
                    kernel_rows.ctypes.data, offsets.ctypes.data, len(offsets),
                    weights.ctypes.data, start, out.ctypes.data)
        return out

    return lanes, run


def expected_sums(plane, a_at, b_at, lanes, pitch, span, kernel_rows, offsets, pairs, start):
    """The loop's contract, in int64: sums[2r + v][j] = start + the sum over
    plane rows i < span whose kernel row kh = kernel_rows[4i + r] is not
    negative, and term columns c, of the pair at (a or b) + i * pitch +
    offsets[c] + 2j times the weight pair (kh, c)."""
    sums = np.full((8, lanes), start, np.int64)
    wide = plane.astype(np.int64)
    lane = np.arange(lanes)
    for i in range(span):
        for r in range(4):
            kh = kernel_rows[4 * i + r]
            if kh < 0:
                continue
            for c, offset in enumerate(offsets):
                low, high = (int(value) for value in pairs[kh, c])
                for v, at in enumerate((a_at, b_at)):
                    first = at + i * pitch + offset + 2 * lane
                    sums[2 * r + v] += wide[first] * low + wide[first + 1] * high
    return sums


@st.composite
def term_cases(draw):
    span = draw(st.integers(1, 6))
    kernel_h = draw(st.integers(1, 4))
    columns = draw(st.integers(1, 4))
    offsets = draw(st.lists(st.integers(0, 40), min_size=columns, max_size=columns))
    kernel_rows = draw(st.lists(st.integers(-1, kernel_h - 1), min_size=4 * span,
                                max_size=4 * span))
    seed = draw(st.integers(0, 2**32 - 1))
    extreme = draw(st.booleans())
    start = draw(st.integers(-2**20, 2**20))
    return span, kernel_h, offsets, kernel_rows, seed, extreme, start


@settings(max_examples=60, deadline=None)
@given(case=term_cases())
def test_term_loop_matches_numpy(term_loop, case):
    lanes, run = term_loop
    span, kernel_h, offsets, kernel_rows, seed, extreme, start = case
    rng = np.random.default_rng(seed)
    pitch = max(offsets) + 2 * lanes + 5
    a_at, b_at = 0, pitch * span + 3           # the two sources apart, b unaligned
    plane = np.zeros(b_at + pitch * span + 8, np.int16)
    pairs = np.zeros((kernel_h, len(offsets), 2), np.int16)
    if extreme:
        # The largest products the kernels give it: widened bytes at 255 or
        # -128 and weights minus their zero point at +-255.
        plane[:] = rng.choice(np.array([255, -128, 0], np.int16), plane.size)
        pairs[:] = rng.choice(np.array([255, -255], np.int16), pairs.shape)
    else:
        plane[:] = rng.integers(-128, 256, plane.size)
        pairs[:] = rng.integers(-255, 256, pairs.shape)
    weights = np.ascontiguousarray(pairs).view(np.int32).reshape(kernel_h, len(offsets))
    kernel_rows = np.array(kernel_rows, np.int32)
    offsets = np.array(offsets, np.intp)
    got = run(plane, a_at, b_at, pitch, span, kernel_rows, offsets, weights, start)
    want = expected_sums(plane, a_at, b_at, lanes, pitch, span, kernel_rows, offsets, pairs,
                         start)
    np.testing.assert_array_equal(got.astype(np.int64), want)
