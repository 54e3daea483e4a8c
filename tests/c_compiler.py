"""The C compiler the tests that build the kernels' headers use, and where
the headers are (qops/backends/native/kernels/include)."""

import os
import shlex
import shutil
import sysconfig
from pathlib import Path

import qops.backends.native.kernels as kernels

INCLUDE = Path(kernels.__file__).parent / "include"


def compiler():
    """The command of the C compiler (CC, else the one Python was built
    with), as a list of words, or None where it is not installed."""
    command = os.environ.get("CC") or sysconfig.get_config_var("CC")
    if not command:
        return None
    words = shlex.split(command)
    return words if shutil.which(words[0]) else None


#: The widths a header's kernels are built at: the flags that select each
#: and the CPU features __builtin_cpu_supports must find to run it (the
#: AVX-512 one runs wherever the CPU has AVX-512F and BW, VNNI or not; FMA
#: with both, as the AVX-512 modules are built).
WIDTHS = {"scalar": ([], []),
          "sse2": ([], ["sse2"]),
          "avx2": (["-mavx2", "-mfma"], ["avx2", "fma"]),
          "avx512": (["-mavx512f", "-mavx512bw", "-mavx512vl", "-mfma"],
                     ["avx512f", "avx512bw", "fma"]),
          "avx512-vnni": (["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni", "-mfma"],
                          ["avx512f", "avx512bw", "avx512vnni", "fma"])}


def library_at_width(harness, width, folder):
    """``harness`` (C source including a kernel header) built at ``width`` in
    ``folder`` as a shared library, loaded with ctypes; None where no C
    compiler is installed, it refuses the width's flags, or this CPU cannot
    run the width (test_c_headers builds every header at its widths with
    -Werror, so a refusal here is the compiler's, not the header's)."""
    import ctypes
    import subprocess

    cc = compiler()
    if cc is None:
        return None
    flags, features = WIDTHS[width]
    condition = " && ".join(f'__builtin_cpu_supports("{name}")' for name in features) or "1"
    (folder / "check.c").write_text(f"int supported(void) {{ __builtin_cpu_init(); "
                                    f"return {condition}; }}\n")
    (folder / "kernel.c").write_text(harness)
    objects = []
    for name, extra in (("kernel", flags), ("check", [])):
        built = subprocess.run([*cc, "-O2", "-fPIC", "-std=gnu11", "-ffp-contract=off", *extra,
                                f"-I{INCLUDE}", "-c", str(folder / f"{name}.c"), "-o",
                                str(folder / f"{name}.o")], capture_output=True)
        if built.returncode:
            return None
        objects.append(str(folder / f"{name}.o"))
    subprocess.run([*cc, "-shared", *objects, "-o", str(folder / "kernel.so"), "-lm"],
                   check=True, capture_output=True)
    library = ctypes.CDLL(str(folder / "kernel.so"))
    return library if library.supported() else None
