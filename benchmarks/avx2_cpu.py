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

Needs Linux on x86-64 and a C compiler; the libraries are built once, in
this folder's build folder.  Where the CPU and kernel offer CPUID faulting
(``arch_prctl(ARCH_SET_CPUID)``: Intel CPUs from Ivy Bridge on and their
virtual machines under KVM), every cpuid of the process is answered.  Where
they do not (AMD's cores), ``cpuid_audit.c`` is loaded as an LD_AUDIT
library instead: it puts a trapping instruction over each cpuid of
onnxruntime's, NumPy's (with the OpenBLAS beside it) and qops' own shared
objects as they load, at the addresses objdump's disassembly gives (kept
in the build folder), so binutils' objdump is needed too.  Only those then
see the lesser CPU, which covers everything the bench compares.
``--audit`` takes that way where faulting is offered too.  Exits with 77
where the machine can do neither, and with 1 where objdump fails or
``cpuid_audit.c`` does not build.  Test runs work too (``python benchmarks/avx2_cpu.py python -m
pytest tests/backends``): the one test that checks the variants against
``/proc/cpuinfo`` then only checks that none runs that the flags lack.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "avx2_cpu.c")
AUDIT_SOURCE = os.path.join(HERE, "cpuid_audit.c")
#: The exit status when this machine cannot hide its features (as the library's).
UNAVAILABLE = 77
#: The packages whose shared objects choose code by CPUID in a bench run.
CHOOSERS = ("onnxruntime", "numpy", "qops")


def _compiler():
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        compiler = shutil.which("cc") or shutil.which("gcc")
    return compiler


def _built(source, target):
    """``target`` compiled from ``source`` if older than it; None where it cannot be."""
    if (not os.path.exists(target)
            or os.path.getmtime(target) < os.path.getmtime(source)):
        compiler = _compiler()
        if compiler is None:
            return None
        built = subprocess.run([compiler, "-O2", "-shared", "-fPIC", source, "-o", target],
                               capture_output=True, text=True)
        if built.returncode != 0:
            sys.stderr.write(built.stderr)
            return None
    return target


def _folder(build_folder=None):
    folder = build_folder or os.path.join(HERE, "build")
    os.makedirs(folder, exist_ok=True)
    return folder


def library(build_folder=None):
    """The preloadable library's path, built if older than its source; None
    where there is no C compiler or the machine is not Linux on x86-64."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return None
    return _built(SOURCE, os.path.join(_folder(build_folder), "avx2_cpu.so"))


def faulting(path):
    """Whether this CPU and kernel offer CPUID faulting, as the preloaded
    library at ``path`` finds."""
    env = environment(path)
    return subprocess.run([sys.executable, "-c", ""], env=env,
                          stderr=subprocess.DEVNULL).returncode != UNAVAILABLE


# A line of objdump's listing whose instruction is cpuid: its address, and
# any prefix before the mnemonic (which cpuid_audit.c could not step over:
# it writes and steps two bytes).
_CPUID_LINE = re.compile(r"^\s*([0-9a-f]+):\s+(.*?)\bcpuid\s*$", re.MULTILINE)
#: Changes when the cache's contents change meaning.
_CACHE_FORMAT = 2


class SitesError(RuntimeError):
    """The cpuid instructions of the shared objects could not be listed."""


def _package_objects():
    """The shared objects of CHOOSERS and of the libraries bundled beside
    them (``numpy.libs``: OpenBLAS), as files, found without importing them."""
    roots = {os.path.join(os.path.dirname(HERE), "qops")}
    for name in CHOOSERS:
        spec = importlib.util.find_spec(name)
        for location in (spec.submodule_search_locations or ()) if spec else ():
            roots.update((location, location + ".libs"))
    found = set()
    for root in roots:
        for path in glob.glob(os.path.join(root, "**", "*.so*"), recursive=True):
            if os.path.isfile(path):
                found.add(os.path.realpath(path))
    return sorted(found)


def _listed_sites(objdump, path):
    """The addresses (hexadecimal) of ``path``'s cpuid instructions."""
    with open(path, "rb") as opened:
        if b"\x0f\xa2" not in opened.read():
            return []
    listing = subprocess.run([objdump, "-d", "--no-show-raw-insn", path], capture_output=True,
                             text=True, errors="replace")
    if listing.returncode != 0:
        raise SitesError(f"objdump failed on {path}: {listing.stderr.strip()}")
    sites = []
    for address, prefix in _CPUID_LINE.findall(listing.stdout):
        if prefix.strip():
            sys.stderr.write(f"avx2_cpu: {path}+{address} is a cpuid after '{prefix.strip()}'; "
                             "left as it is\n")
        else:
            sites.append(address)
    return sites


def cpuid_sites(build_folder=None):
    """The path of a file that lists, for each shared object of CHOOSERS
    that has any, the addresses of its cpuid instructions (cpuid_audit.c's
    QOPS_CPUID_SITES); None without objdump.  Disassemblies are kept in the
    build folder, by path, size, time and objdump's version; the list is
    named by its contents, so a run never rewrites another's."""
    objdump = shutil.which("objdump")
    if objdump is None:
        return None
    version = subprocess.run([objdump, "--version"], capture_output=True,
                             text=True).stdout.partition("\n")[0]
    folder = _folder(build_folder)
    cache_path = os.path.join(folder, "cpuid_sites.json")
    try:
        with open(cache_path) as cache_file:
            cache = json.load(cache_file)
    except (OSError, ValueError):
        cache = {}
    lines = []
    for path in _package_objects():
        stat = os.stat(path)
        key = f"{_CACHE_FORMAT} {version} {path} {stat.st_size} {stat.st_mtime_ns}"
        if key not in cache:
            cache[key] = _listed_sites(objdump, path)
        if cache[key]:
            lines.append(path + "\t" + " ".join(cache[key]) + "\n")
    text = "".join(lines)
    _replace(cache_path, json.dumps(cache))
    name = hashlib.sha256(text.encode()).hexdigest()[:16]
    sites_path = os.path.join(folder, f"cpuid_sites-{name}.txt")
    if not os.path.exists(sites_path):
        _replace(sites_path, text)
    return sites_path


def _replace(path, text):
    """Write ``path`` whole or not at all (runs may share the build folder)."""
    temporary = f"{path}.{os.getpid()}"
    with open(temporary, "w") as opened:
        opened.write(text)
    os.replace(temporary, path)


def auditing(base, build_folder=None):
    """``base`` (an environment) with cpuid_audit.c's library and the sites
    of CHOOSERS, for a machine without CPUID faulting; None where objdump is
    missing.  Raises SitesError where the library does not build or objdump
    fails."""
    audit = _built(AUDIT_SOURCE, os.path.join(_folder(build_folder), "cpuid_audit.so"))
    if audit is None:
        raise SitesError("cpuid_audit.c did not build")
    sites = cpuid_sites(build_folder)
    if sites is None:
        return None
    env = dict(base)
    audited = [p for p in env.get("LD_AUDIT", "").split(":") if p and p != audit]
    env["LD_AUDIT"] = ":".join([audit] + audited)
    env["QOPS_CPUID_SITES"] = sites
    env["QOPS_CPUID_TRAP"] = "1"
    return env


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
    shown, by_audit = "avx2", False
    while argv[:1] in (["--sse4"], ["--avxvnni"], ["--audit"]):
        if argv[0] == "--audit":
            by_audit = True
        else:
            shown = argv[0][2:]
        argv = argv[1:]
    if not argv:
        sys.stderr.write(__doc__)
        return 2
    path = library()
    if path is None:
        sys.stderr.write("avx2_cpu: needs Linux on x86-64 and a C compiler\n")
        return UNAVAILABLE
    env = environment(path, shown=shown)
    if by_audit or not faulting(path):
        try:
            env = auditing(env)
        except SitesError as error:
            sys.stderr.write(f"avx2_cpu: {error}\n")
            return 1
        if env is None:
            sys.stderr.write("avx2_cpu: no CPUID faulting here, and no objdump to find the "
                             "cpuid instructions of onnxruntime, NumPy and qops instead\n")
            return UNAVAILABLE
    return subprocess.run(argv, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
