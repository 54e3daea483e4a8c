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
#: and what the CPU needs to run it (the AVX-512 one runs wherever the CPU
#: has AVX-512F and BW, VNNI or not).
WIDTHS = {"scalar": ([], "1"),
          "avx2": (["-mavx2", "-mfma"],
                   '__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")'),
          "avx512": (["-mavx512f", "-mavx512bw", "-mavx512vl"],
                     '__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")')}


def library_at_width(harness, width, folder):
    """``harness`` (C source including a kernel header) built at ``width`` in
    ``folder`` as a shared library, loaded with ctypes; None where no C
    compiler is installed or this CPU cannot run the width."""
    import ctypes
    import subprocess

    cc = compiler()
    if cc is None:
        return None
    flags, condition = WIDTHS[width]
    (folder / "check.c").write_text(f"int supported(void) {{ __builtin_cpu_init(); "
                                    f"return {condition}; }}\n")
    (folder / "kernel.c").write_text(harness)
    objects = []
    for name, extra in (("kernel", flags), ("check", [])):
        subprocess.run([*cc, "-O2", "-fPIC", "-std=c11", "-ffp-contract=off", *extra,
                        f"-I{INCLUDE}", "-c", str(folder / f"{name}.c"), "-o",
                        str(folder / f"{name}.o")], check=True, capture_output=True)
        objects.append(str(folder / f"{name}.o"))
    subprocess.run([*cc, "-shared", *objects, "-o", str(folder / "kernel.so"), "-lm"],
                   check=True, capture_output=True)
    library = ctypes.CDLL(str(folder / "kernel.so"))
    return library if library.supported() else None
