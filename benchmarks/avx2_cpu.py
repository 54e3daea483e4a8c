"""Run a command on this machine as if its CPU had AVX2 and no more.

    python benchmarks/avx2_cpu.py python -m qops bench --out /tmp/avx2
    python benchmarks/avx2_cpu.py python -c "import qops; qops.show_config()"

On a CPU with VNNI, ``QOPS_SIMD=avx2`` lowers qops' kernels but not
onnxruntime's, whose exact VNNI kernels stay the peer: the comparison an
AVX2-only CPU makes (with onnxruntime's saturating u8 x s8 step) cannot be
made that way.  This runs the command with ``avx2_cpu.c`` preloaded, which
hides AVX-512, VNNI and AMX from CPUID in that process, so that qops,
onnxruntime and NumPy each choose their AVX2 code by themselves.  The
arithmetic units stay the machine's: the saturating step is faster than the
exact one on some cores (the bench's header gives both ceilings) and not on
others.

``--sse4`` first hides AVX, AVX2, FMA and F16C as well: a CPU of SSE4.2
and no more, where qops runs its portable variant (SSE2's pmaddwd) and the
peers their SSE code, the comparison of that tier:

    python benchmarks/avx2_cpu.py --sse4 python -m qops bench --out /tmp/sse4

``--avxvnni`` keeps AVX-VNNI (the VEX vpdpbusd) shown: a CPU with AVX2 and
AVX-VNNI and no AVX-512, as Intel's client cores since Alder Lake, where
qops runs its AVX-VNNI variant and onnxruntime its AVX-VNNI kernels, exact
both:

    python benchmarks/avx2_cpu.py --avxvnni python -m qops bench --out /tmp/avxvnni

Needs Linux on x86-64 with CPUID faulting (``arch_prctl(ARCH_SET_CPUID)``:
Intel CPUs from Ivy Bridge on and their virtual machines under KVM), and a
C compiler; the library is built once, beside this file's build folder.
Exits with 77 where the machine cannot do it.  Test runs work too
(``python benchmarks/avx2_cpu.py python -m pytest tests/backends``): the one
test that checks the variants against ``/proc/cpuinfo`` then only checks
that none runs that the flags lack.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "avx2_cpu.c")
#: The exit status when this machine cannot hide its features (as the library's).
UNAVAILABLE = 77


def library(build_folder=None):
    """The preloadable library's path, built if older than its source; None
    where there is no C compiler or the machine is not Linux on x86-64."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return None
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        compiler = shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            return None
    folder = build_folder or os.path.join(HERE, "build")
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, "avx2_cpu.so")
    if (not os.path.exists(target)
            or os.path.getmtime(target) < os.path.getmtime(SOURCE)):
        built = subprocess.run([compiler, "-O2", "-shared", "-fPIC", SOURCE, "-o", target],
                               capture_output=True, text=True)
        if built.returncode != 0:
            sys.stderr.write(built.stderr)
            return None
    return target


def environment(path, base=None, shown="avx2"):
    """``base`` (the process's environment) with the library preloaded,
    showing ``shown`` (``"avx2"``, ``"sse4"`` or ``"avxvnni"``)."""
    env = dict(os.environ if base is None else base)
    env["QOPS_SHOWN_CPU"] = shown
    preloaded = env.get("LD_PRELOAD", "").split()
    if path not in preloaded:
        env["LD_PRELOAD"] = " ".join([path] + preloaded)
    return env


def main(argv):
    shown = "avx2"
    if argv[:1] in (["--sse4"], ["--avxvnni"]):
        shown, argv = argv[0][2:], argv[1:]
    if not argv:
        sys.stderr.write(__doc__)
        return 2
    path = library()
    if path is None:
        sys.stderr.write("avx2_cpu: needs Linux on x86-64 and a C compiler\n")
        return UNAVAILABLE
    return subprocess.run(argv, env=environment(path, shown=shown)).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
