"""Every compiler-flag decision of the build, in one place.

``setup.py`` asks this module for the flags of each extension:

* OpenMP: probed by compiling and linking a small program with the flag the
  compiler family uses; off when the probe fails or ``QOPS_DISABLE_OPENMP=1``.
* ``QOPS_DEBUG=1``: Cython's bounds and wraparound checks back on, ``-O0 -g``.
* Otherwise: ``-O3`` and Cython checks off (the Python layer validates every
  index before a kernel runs).
* ``QOPS_BUILD_JOBS``: processes for cythonizing and compiling (default: one
  per core).
* SIMD variants: each GEMM variant is its own extension compiled with its
  own instruction-set flags (``SIMD_VARIANTS``) plus ``ROUNDING_FLAGS``; a
  variant whose flags the compiler rejects is left out, and the portable one
  is always built.  Which one runs is decided at import from the CPU's
  features.  The quantize / dequantize kernels are built for the same
  variants (but AMX, which adds nothing to them), plus ``QUANTIZE_FLAGS``.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap

_TRUE = {"1", "true", "yes", "on"}


def env_flag(name):
    return os.environ.get(name, "").strip().lower() in _TRUE


def debug_build():
    return env_flag("QOPS_DEBUG")


def _compiler_command():
    compiler = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return compiler.split()


def _openmp_flags():
    if sys.platform == "win32":
        return ["/openmp"], []
    if sys.platform == "darwin":
        return ["-Xpreprocessor", "-fopenmp"], ["-lomp"]
    return ["-fopenmp"], ["-fopenmp"]


_PROBE = textwrap.dedent(
    """
    #include <omp.h>
    #include <stdio.h>
    int main(void) {
        int threads = 0;
        #pragma omp parallel
        {
            #pragma omp atomic
            threads += 1;
        }
        printf("%d\\n", threads > 0);
        return threads > 0 ? 0 : 1;
    }
    """
)


#: Probe results of earlier runs of setup.py in this checkout: pip runs it
#: three times per install (requirements, metadata, build), and each probe
#: compiles a program.
_PROBE_CACHE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "build", "qops-probes.json")


def _probe_key(kind, flags):
    """What a probe's answer depends on: the compiler (its command and the
    file it runs, by path and time of change), the flags, the platform."""
    command = _compiler_command()
    found = shutil.which(command[0])
    stamp = os.stat(found).st_mtime_ns if found else None
    return json.dumps([kind, command, found, stamp, list(flags), sys.platform])


def _known_probes():
    """The cached answers, by key (none when there is no readable cache)."""
    try:
        with open(_PROBE_CACHE) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def _keep_probes(known):
    try:
        os.makedirs(os.path.dirname(_PROBE_CACHE), exist_ok=True)
        with open(_PROBE_CACHE, "w") as handle:
            json.dump(known, handle)
    except OSError:
        pass  # a read-only checkout probes every time


def _cached_probe(kind, flags, probe):
    """``probe()``'s answer, from the cache when this compiler and these flags
    were probed before (answers are JSON: booleans, lists, None)."""
    key = _probe_key(kind, flags)
    known = _known_probes()
    if key in known:
        return known[key]
    answer = probe()
    known[key] = answer
    _keep_probes(known)
    return answer


def warm_probes(flag_sets, jobs):
    """Run the compiler probes setup.py will ask for (``compiler_accepts`` of
    each of ``flag_sets``, and OpenMP's) on ``jobs`` threads at once, each
    answer then cached for the calls that follow."""
    from concurrent.futures import ThreadPoolExecutor

    probes = [("openmp", _openmp_flags()[0], _openmp_probe)] if not env_flag(
        "QOPS_DISABLE_OPENMP") else []
    probes += [("accepts", flags, functools.partial(_compiler_accepts, flags))
               for flags in flag_sets if flags]
    known = _known_probes()
    missing = {_probe_key(kind, flags): probe for kind, flags, probe in probes}
    missing = {key: probe for key, probe in missing.items() if key not in known}
    if not missing:
        return
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        answers = dict(zip(missing, pool.map(lambda probe: probe(), missing.values())))
    known.update(answers)
    _keep_probes(known)


def openmp_probe():
    """(compile flags, link flags) for OpenMP, or ``None`` when unavailable."""
    if env_flag("QOPS_DISABLE_OPENMP"):
        return None
    answer = _cached_probe("openmp", _openmp_flags()[0], _openmp_probe)
    return None if answer is None else (list(answer[0]), list(answer[1]))


def _openmp_probe():
    compile_flags, link_flags = _openmp_flags()
    command = _compiler_command()
    if sys.platform == "win32" or shutil.which(command[0]) is None:
        return None
    with tempfile.TemporaryDirectory() as directory:
        source = os.path.join(directory, "probe.c")
        binary = os.path.join(directory, "probe")
        with open(source, "w") as handle:
            handle.write(_PROBE)
        try:
            subprocess.run(command + compile_flags + [source, "-o", binary] + link_flags,
                           check=True, capture_output=True, timeout=120)
            subprocess.run([binary], check=True, capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
    return compile_flags, link_flags


# FMA with them: every AVX-512 CPU has it, and the 256-bit paths the AVX-512
# builds share with AVX2 (MatMulNBits' level 4) are written with it.
_AVX512 = ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni", "-mfma"]

#: GEMM variants and the flags each is compiled with (GCC / Clang spelling).
SIMD_VARIANTS = {
    "portable": [],
    "avx2": ["-mavx2", "-mfma"],
    "avxvnni": ["-mavx2", "-mfma", "-mavxvnni"],
    "avx512vnni": _AVX512,
    "amx": _AVX512 + ["-mamx-tile", "-mamx-int8"],
}


#: Extra flags of every kernel that computes in floats (the GEMM variants'
#: epilogues, the quantize kernels): ``-ffp-contract=off`` keeps every product
#: and sum rounded on its own, as the rules and NumPy have them (no fused
#: multiply-add, which GCC otherwise forms wherever -mfma allows).
ROUNDING_FLAGS = ["-ffp-contract=off"]

#: Extra flags of the quantize / dequantize kernels.  ``-fno-trapping-math``
#: lets the compiler turn their float selects (clamps, NaN tests) into vector
#: blends; no kernel reads the floating-point exception flags, and results do
#: not change.
QUANTIZE_FLAGS = ["-fno-trapping-math"] + ROUNDING_FLAGS

#: The variants the quantize kernels are built for.
QUANTIZE_VARIANTS = ("portable", "avx2", "avx512vnni")


def compiler_accepts(flags):
    """Whether the C compiler builds an object file with ``flags``."""
    if not flags:
        return True
    return _cached_probe("accepts", flags, lambda: _compiler_accepts(flags))


def _compiler_accepts(flags):
    command = _compiler_command()
    if sys.platform == "win32" or shutil.which(command[0]) is None:
        return False
    with tempfile.TemporaryDirectory() as directory:
        source = os.path.join(directory, "probe.c")
        with open(source, "w") as handle:
            handle.write("#include <immintrin.h>\nint probe(void) { return 0; }\n")
        try:
            subprocess.run(command + flags + ["-c", source, "-o", os.path.join(directory, "p.o")],
                           check=True, capture_output=True, timeout=120)
        except (OSError, subprocess.SubprocessError):
            return False
    return True


def extension_options():
    """Keyword arguments for every ``setuptools.Extension`` of qops."""
    compile_args, link_args, macros = [], [], []
    if sys.platform != "win32":
        compile_args += ["-O0", "-g"] if debug_build() else ["-O3"]
    openmp = openmp_probe()
    if openmp is not None:
        compile_args += openmp[0]
        link_args += openmp[1]
    if debug_build():
        macros.append(("QOPS_DEBUG", "1"))
    macros.append(("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"))
    return {"extra_compile_args": compile_args, "extra_link_args": link_args,
            "define_macros": macros}, openmp is not None


def cython_directives():
    checks = debug_build()
    return {
        "language_level": 3,
        "boundscheck": checks,
        "wraparound": checks,
        "initializedcheck": checks,
        "cdivision": not checks,
        "embedsignature": True,
    }


def build_jobs():
    """Processes for cythonizing and compiling: ``QOPS_BUILD_JOBS`` if set,
    else one per core this process may run on."""
    given = os.environ.get("QOPS_BUILD_JOBS", "").strip()
    if given:
        return max(1, int(given))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def forks():
    """Whether multiprocessing starts workers by fork, so that Cython's pool
    does not run setup.py again in each worker."""
    import multiprocessing

    return multiprocessing.get_start_method(allow_none=False) == "fork"
