"""Thread count and build information."""

from __future__ import annotations

import operator
import os
import platform
import sys

from ._errors import ValidationError



_OPENMP = []
_OPENMP_ENABLED = [False]


def _openmp_module():
    """The compiled OpenMP helper, imported on first use so that importing qops
    (and its registry) loads nothing compiled; ``None`` in an unbuilt checkout.
    Looked up once: every call without ``n_threads`` asks for it."""
    if not _OPENMP:
        try:
            from ._kernels import _openmp
        except ImportError:
            _openmp = None
        _OPENMP.append(_openmp)
        _OPENMP_ENABLED[0] = bool(_openmp is not None and _openmp.openmp_enabled())
    return _OPENMP[0]

__all__ = ["get_num_threads", "set_num_threads", "resolve_threads", "config", "show_config"]

_num_threads = None

#: More threads than this is a mistake, not a machine (OpenMP takes an int).
MAX_THREADS = 4096


def _default_threads():
    # Every call without n_threads asks: OpenMP's own answer is cheap (a
    # C call, not an environment lookup), holds OMP_NUM_THREADS as the
    # runtime read it at start, and follows threadpoolctl's limits.
    openmp = _openmp_module()
    if openmp is not None and _OPENMP_ENABLED[0]:
        return max(1, openmp.max_threads())
    value = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if value.isdigit() and int(value) >= 1:
        return int(value)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def _check_threads(n, name):
    if isinstance(n, bool):
        raise ValidationError(f"{name} must be a positive integer, not {n!r}", slot=name, given=n)
    try:
        n = operator.index(n)
    except TypeError:
        raise ValidationError(f"{name} must be a positive integer, not {n!r}", slot=name,
                              given=n) from None
    if not 1 <= n <= MAX_THREADS:
        raise ValidationError(f"{name} must be an integer from 1 to {MAX_THREADS}, not {n!r}",
                              slot=name, given=n)
    return n


def get_num_threads() -> int:
    """The number of threads kernels use when a call gives no ``n_threads``.

    Defaults to OpenMP's team size: ``OMP_NUM_THREADS`` when it was set as
    the process started, else the cores this process may run on (or a
    limit threadpoolctl sets).
    """
    return _num_threads if _num_threads is not None else _default_threads()


def set_num_threads(n: int) -> None:
    """Set the default thread count of every kernel (``n >= 1``)."""
    global _num_threads
    _num_threads = _check_threads(n, "n_threads")


def resolve_threads(n_threads=None) -> int:
    """A call's thread count: ``n_threads`` if given, else the global setting."""
    if n_threads is None:
        return get_num_threads()
    return _check_threads(n_threads, "n_threads")


def config(peak=False) -> dict:
    """What :func:`show_config` prints, as a dictionary.

    With ``peak``, also the measured ceiling of the selected kernel
    variant's multiply-add instructions on the default thread count (a
    probe of about 0.3 s; see ``python -m qops bench``)."""
    import ml_dtypes
    import numpy

    from . import __version__, _dispatch

    openmp = _openmp_module()
    info = {
        "qops": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "numpy": numpy.__version__,
        "ml_dtypes": ml_dtypes.__version__,
        "kernels built": openmp is not None,
        "openmp": bool(openmp is not None and openmp.openmp_enabled()),
        "debug build": bool(openmp is not None and openmp.debug_build()),
        "threads": get_num_threads(),
        "simd": _simd_text(),
        "implementations": _dispatch.summary(),
    }
    if peak:
        info["peak"] = _peak_text(info["threads"])
    return info


def _peak_text(threads):
    from . import _simd

    try:
        module = _simd.module()
    except ImportError:
        return "not measured (kernels not built)"
    return f"{module.peak_gops(threads, 0.3):.1f} GOPS on {threads} threads ({module.PROBE_MIX})"


def _simd_text():
    from . import _simd

    try:
        chosen = _simd.selected()
    except ImportError:
        return "none (kernels not built; NumPy reference)"
    return f"{chosen} (available: {', '.join(_simd.available())})"


def show_config(file=None, peak=False) -> None:
    """Print versions, whether OpenMP is on, the thread count and the SIMD
    level; with ``peak``, also the measured ceiling of that level's
    multiply-add instructions (about 0.3 s)."""
    out = file or sys.stdout
    info = config(peak=peak)
    width = max(len(key) for key in info)
    for key, value in info.items():
        if isinstance(value, bool):
            value = "yes" if value else "no"
        if isinstance(value, dict):
            value = "; ".join(f"{op}: {', '.join(names)}" for op, names in value.items())
        print(f"{key:<{width}}  {value}", file=out)
