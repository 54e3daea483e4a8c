"""Which compiled GEMM variant runs: the best the CPU supports, or the one
``QOPS_SIMD`` names (it may only lower the choice).  The quantize /
dequantize kernels follow the same choice (:func:`quantize_module`)."""

from __future__ import annotations

import importlib
import os
import warnings

#: Best first.
VARIANTS = ("amx", "avx512vnni", "avxvnni", "avx2", "portable")

_modules = {}


def _cpu_features():
    from qops.backends.native.kernels import _platform

    return _platform.cpu_features()


_available = None


def available() -> tuple:
    """Variants that were built and that this CPU can run, best first."""
    global _available
    if _available is None:
        _available = _probe()
    return _available


def _probe() -> tuple:
    features = _cpu_features()
    names = []
    for name in VARIANTS:
        if not features.get(name):
            continue
        try:
            _modules[name] = importlib.import_module(f"qops.backends.native.kernels._qgemm_{name}")
        except ImportError:
            continue
        names.append(name)
    return tuple(names)


_selected = None


def selected() -> str:
    """The variant calls use: ``QOPS_SIMD`` if set and runnable, else the best.

    Decided once per process, at the first call."""
    global _selected
    if _selected is None:
        _selected = _choose()
    return _selected


def _choose() -> str:
    names = available()
    if not names:
        raise ImportError("no compiled GEMM kernels: rebuild qops (pip install -e .)")
    wanted = os.environ.get("QOPS_SIMD", "").strip().lower()
    if not wanted:
        return names[0]
    if wanted not in VARIANTS:
        warnings.warn(f"QOPS_SIMD={wanted!r} is not one of {', '.join(VARIANTS)}; using {names[0]}")
        return names[0]
    if wanted in names:
        return wanted
    lower = [n for n in names if VARIANTS.index(n) > VARIANTS.index(wanted)]
    choice = lower[0] if lower else names[-1]
    warnings.warn(f"QOPS_SIMD={wanted} cannot run here; using {choice}")
    return choice


def module(name=None):
    """The extension module of variant ``name`` (default: the selected one)."""
    name = name or selected()
    if name not in _modules:
        available()
    return _modules[name]


#: The quantize kernels' build of each GEMM variant (AMX adds nothing to
#: them, nor AVX-VNNI to AVX2's).
_QUANTIZE_BUILD = {"amx": "avx512vnni", "avxvnni": "avx2"}
_quantize_modules = {}


def quantize_variants() -> tuple:
    """The quantize kernels' variants this CPU runs, best first."""
    names = []
    for name in available():
        name = _QUANTIZE_BUILD.get(name, name)
        if name not in names and _quantize_module_of(name) is not None:
            names.append(name)
    return tuple(names)


def _quantize_module_of(name):
    if name not in _quantize_modules:
        try:
            _quantize_modules[name] = importlib.import_module(f"qops.backends.native.kernels._quantize_{name}")
        except ImportError:
            _quantize_modules[name] = None
    return _quantize_modules[name]


def quantize_module(name=None):
    """The quantize kernels for variant ``name`` (default: the selected
    one's), or the best built one below it."""
    name = _QUANTIZE_BUILD.get(name or selected(), name or selected())
    module = _quantize_module_of(name)
    if module is None:
        lower = [n for n in quantize_variants() if VARIANTS.index(n) > VARIANTS.index(name)]
        if not lower:
            raise ImportError("no compiled quantize kernels: rebuild qops (pip install -e .)")
        module = _quantize_module_of(lower[0])
    return module
