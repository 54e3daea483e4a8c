"""What this build is and runs on: :func:`show_config`."""

from __future__ import annotations

import platform
import sys

from qops.threads import get_num_threads

__all__ = ["config", "show_config"]


def config(peak=False) -> dict:
    """What :func:`show_config` prints, as a dictionary.

    With ``peak``, also the measured ceiling of the selected kernel
    variant's multiply-add instructions on the default thread count (a
    probe of about 0.3 s; see ``python -m qops bench``)."""
    import ml_dtypes
    import numpy

    from qops.backends import dispatch as _dispatch
    from qops.version import __version__

    try:
        from qops.backends.native.kernels import _platform
    except ImportError:
        _platform = None
    openmp = _platform
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
    from qops.backends.native import variants as _simd

    try:
        from qops.backends.native.kernels import _peak_probes

        probe = _peak_probes.probe(_simd.selected())
    except ImportError:
        return "not measured (kernels not built)"
    return f"{probe.peak_gops(threads, 0.3):.1f} GOPS on {threads} threads ({probe.mix})"


def _simd_text():
    from qops.backends.native import variants as _simd

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
