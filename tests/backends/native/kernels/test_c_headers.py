"""The kernels' C headers (qops/backends/native/kernels/include) compile
cleanly on their own: each in a translation unit of its own, with what it
needs before it, under -Wall -Wextra -Werror -std=c11, so that a warning
in the moved C fails here rather than hides in Cython's output."""

import subprocess

import pytest
from c_compiler import INCLUDE, compiler
HEADERS = sorted(path.name for path in INCLUDE.glob("*.h"))

# What each header needs beyond itself: the lines before its #include (what
# Python.h or an earlier Cython block provides in the build) and the flags
# its extension compiles it with.
POSIX = "#define _POSIX_C_SOURCE 200809L"  # as Python.h (clock_gettime, pthreads)
NEEDS = {
    "qops_pool.h": ([POSIX, "#include <omp.h>"], ["-fopenmp"]),
    "qops_depthwise_avx2.h": ([], ["-mavx2", "-mfma"]),
    "qops_amx.h": (["#define _GNU_SOURCE"], []),  # as Python.h (syscall)
    "qops_ymm.h": ([], ["-mavx2", "-mfma"]),
    "qops_pack_avx2.h": ([], ["-mavx2", "-mfma"]),
    "qops_depthwise_terms_avx2.h": ([], ["-mavx2", "-mfma"]),
    "qops_depthwise_terms_avx512.h": ([], ["-mavx512f", "-mavx512bw", "-mavx512vl",
                                           "-mavx512dq", "-mavx512vnni"]),
    "qops_depthwise_pairs.h": ([], []),
    "qops_openmp.h": ([], ["-fopenmp"]),
}
# What the Cython module uses of a header beyond its functions (statics the
# C never reads in some build): the unit uses them as well.
USES = {
    "qops_peak_probes.h": ["long long qops_probes_used(void);",
                           "long long qops_probes_used(void) {",
                           "    return qops_probe_portable(1, 0) + qops_probe_avx2(1, 0)",
                           "           + qops_peer_probe_avx2(1, 0) + qops_probe_avxvnni(1, 0)",
                           "           + qops_probe_avx512vnni(1, 0) + qops_probe_amx(1, 0);",
                           "}"],
    "qops_pool.h": ["long qops_pool_counters(void);",
                    "long qops_pool_counters(void) {",
                    "    return qops_pool_workers + qops_pool_jobs + qops_pool_worker_tasks;",
                    "}"],
}
# Without OpenMP the pool runs every job on its caller and
# _openmp_helpers.pxd supplies a one-thread omp_get_max_threads: that build too.
VARIANTS = [pytest.param(name, *NEEDS.get(name, ([], [])), id=name) for name in HEADERS]
VARIANTS.append(pytest.param(
    "qops_pool.h", [POSIX, "static int omp_get_max_threads(void) { return 1; }"], [],
    id="qops_pool.h-without-openmp"))
# The GEMM's helpers as the AVX2 variants compile them (their AVX2 branches).
for name in ("qops_gemm_pack_a.h", "qops_gemm_units.h"):
    VARIANTS.append(pytest.param(name, [], ["-mavx2", "-mfma"], id=f"{name}-avx2"))
# The quantize kernels' helpers as their AVX2 and AVX-512 modules compile them.
for name in ("qops_quantized_add.h", "qops_quantize_linear.h", "qops_average_pooling.h",
             "qops_max_pool.h", "qops_softmax.h"):
    VARIANTS.append(pytest.param(name, [], ["-mavx2", "-mfma"], id=f"{name}-avx2"))
    VARIANTS.append(pytest.param(name, [], ["-mavx512f", "-mavx512bw", "-mavx512vl",
                                            "-mavx512dq"], id=f"{name}-avx512"))
# The AVX-512 term loop without VNNI (its vpmaddwd branch).
VARIANTS.append(pytest.param("qops_depthwise_terms_avx512.h", [],
                             ["-mavx512f", "-mavx512bw"], id="qops_depthwise_terms_avx512.h-no-vnni"))
# MatMulNBits' kernels at each of their widths.
VARIANTS.append(pytest.param("qops_matmul_n_bits.h", [], ["-mavx2", "-mfma"],
                             id="qops_matmul_n_bits.h-avx2"))
VARIANTS.append(pytest.param("qops_matmul_n_bits.h", [], ["-mavx512f", "-mfma"],
                             id="qops_matmul_n_bits.h-avx512"))
VARIANTS.append(pytest.param("qops_matmul_n_bits.h", [],
                             ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni", "-mfma"],
                             id="qops_matmul_n_bits.h-avx512-vnni"))
# Without FMA: the plain statement of the level-4 prefill kernel.
VARIANTS.append(pytest.param("qops_matmul_n_bits.h", [], ["-mavx512f"],
                             id="qops_matmul_n_bits.h-avx512-no-fma"))
# The channels-last depthwise pixel at each of its widths.
VARIANTS.append(pytest.param("qops_depthwise_channels_last.h", [], ["-mavx2", "-mfma"],
                             id="qops_depthwise_channels_last.h-avx2"))
VARIANTS.append(pytest.param("qops_depthwise_channels_last.h", [],
                             ["-mavx512f", "-mavx512bw", "-mavx512vl"],
                             id="qops_depthwise_channels_last.h-avx512"))
# The OpenMP shim where the build has no OpenMP.
VARIANTS.append(pytest.param("qops_openmp.h", [], [], id="qops_openmp.h-without-openmp"))
# Where the target has no SSE2 the depthwise pair kernel is stubs (which
# must compile, the driver being built either way).
VARIANTS.append(pytest.param("qops_depthwise_sse2.h", [], ["-U__SSE2__"],
                             id="qops_depthwise_sse2.h-without-sse2"))
VARIANTS.append(pytest.param("qops_portable.h", [], ["-U__SSE2__"],
                             id="qops_portable.h-without-sse2"))
for name in ("qops_gemm_pack_a.h", "qops_gemm_epilogues.h", "qops_gemm_units.h",
             "qops_quantized_add.h", "qops_quantize_linear.h", "qops_average_pooling.h"):
    VARIANTS.append(pytest.param(name, [], ["-U__SSE2__"], id=f"{name}-without-sse2"))

# A header of static functions that a test unit includes without calling
# them: "defined but not used" is the only warning allowed.
FLAGS = ["-Wall", "-Wextra", "-Werror", "-std=c11", "-Wno-unused-function", "-c"]


def test_every_header_is_checked():
    assert {"qops_pool.h", "qops_pool_limits.h", "qops_depthwise_sse2.h",
            "qops_depthwise_avx2.h", "qops_portable.h"} <= set(HEADERS)
    assert set(NEEDS) | set(USES) <= set(HEADERS)


@pytest.mark.parametrize(("header", "prelude", "flags"), VARIANTS)
def test_header_compiles_without_warnings(tmp_path, header, prelude, flags):
    cc = compiler()
    if cc is None:
        pytest.skip("no C compiler (CC, or sysconfig's CC) found")
    source = tmp_path / "unit.c"
    source.write_text("\n".join([*prelude, "#include <stdint.h>", "#include <stddef.h>",
                                 f'#include "{header}"', *USES.get(header, []), ""]))
    result = subprocess.run([*cc, *FLAGS, *flags, f"-I{INCLUDE}", str(source),
                             "-o", str(tmp_path / "unit.o")],
                            capture_output=True, text=True)
    assert result.returncode == 0 and not result.stderr, result.stderr
