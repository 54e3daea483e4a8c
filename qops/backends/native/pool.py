"""The kernels' thread pool as threadpoolctl sees it.

threadpoolctl finds the native libraries a process has loaded by file name
and sets their thread counts through their own C functions.  The pool is one
extension, ``_qops_pool``, exporting ``qops_pool_get_num_threads`` (the
default thread count), ``qops_pool_configured_threads`` and
``qops_pool_configure`` (the setting behind it: a count, or 0 to follow
OpenMP's); :func:`register` hands threadpoolctl a controller for it, so
``threadpool_info()`` lists it (user and internal API ``"qops"``) and
``threadpool_limits(n)`` sets qops' default thread count, the one
:func:`qops.set_num_threads` sets.  Leaving the limit restores the setting
it found, a count or "follow OpenMP", not merely the number it read.
"""

from __future__ import annotations

__all__ = ["register"]

_REGISTERED = []


def register():
    """Register the pool's controller with threadpoolctl, once; ``False``
    when threadpoolctl is not installed."""
    if _REGISTERED:
        return _REGISTERED[0]
    try:
        import threadpoolctl
    except ImportError:
        _REGISTERED.append(False)
        return False

    class QopsPoolController(threadpoolctl.LibController):
        user_api = "qops"
        internal_api = "qops"
        filename_prefixes = ("_qops_pool",)
        check_symbols = ("qops_pool_get_num_threads", "qops_pool_configured_threads",
                         "qops_pool_configure")

        def get_num_threads(self):
            count = self.dynlib.qops_pool_get_num_threads()
            # threadpoolctl restores a limit by setting the count it read:
            # remember the setting that count stood for.
            self._settings = getattr(self, "_settings", {})
            self._settings[count] = self.dynlib.qops_pool_configured_threads()
            return count

        def set_num_threads(self, num_threads):
            num_threads = int(num_threads)
            setting = getattr(self, "_settings", {}).get(num_threads, num_threads)
            self.dynlib.qops_pool_configure(setting)

        def get_version(self):
            from qops.version import __version__

            return __version__

    threadpoolctl.register(QopsPoolController)
    _REGISTERED.append(True)
    return True
