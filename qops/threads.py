"""How many threads a kernel runs on.

A call's ``n_threads=`` if it gives one, else the default: the count set by
:func:`set_num_threads` (or by threadpoolctl, which sees the kernels' pool
as the ``qops`` library), else OpenMP's (``OMP_NUM_THREADS`` as the process
started, or the cores this process may run on).  With the kernels built the
default lives in the pool itself (:mod:`qops.backends.native.kernels._qops_pool`),
so every way of setting it sets the same number.  :func:`threads_in_context`
sets a count for the calls one thread (or task) makes inside a ``with``
block, such as the nodes of one run of a model session.
"""

from __future__ import annotations

import contextlib
import contextvars
import operator
import os

from qops.errors import ValidationError

__all__ = ["get_num_threads", "set_num_threads", "resolve_threads", "threads_in_context",
           "workers_kept_spinning", "MAX_THREADS"]

#: More threads than this is a mistake, not a machine (the pool uses at most
#: 255 workers; OpenMP takes an int).
MAX_THREADS = 4096

_POOL = []
#: The default set while the kernels are not built (the reference runs).
_unbuilt_setting = [None]
#: The count of the innermost threads_in_context block, per thread and task.
_context_setting = contextvars.ContextVar("qops_threads_in_context", default=None)


def _pool():
    """The kernels' pool, imported on first use so that importing qops (and
    its registry) loads nothing compiled; ``None`` in an unbuilt checkout."""
    if not _POOL:
        try:
            from qops.backends.native.kernels import _qops_pool
        except ImportError:
            _qops_pool = None
        _POOL.append(_qops_pool)
    return _POOL[0]


def _check(n, name):
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


def _unbuilt_default():
    value = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if value.isdigit() and int(value) >= 1:
        return int(value)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def get_num_threads() -> int:
    """The number of threads kernels use when a call gives no ``n_threads``.

    The count :func:`set_num_threads` (or a threadpoolctl limit) set, else
    OpenMP's team size: ``OMP_NUM_THREADS`` when it was set as the process
    started, else the cores this process may run on.
    """
    pool = _pool()
    if pool is not None:
        return pool.get_num_threads()
    return _unbuilt_setting[0] or _unbuilt_default()


def set_num_threads(n: int) -> None:
    """Set the default thread count of every kernel (``n >= 1``)."""
    n = _check(n, "n_threads")
    pool = _pool()
    if pool is not None:
        pool.set_num_threads(n)
    else:
        _unbuilt_setting[0] = n


def reset_num_threads() -> None:
    """Forget the count set: follow OpenMP's again (for tests and embedders)."""
    pool = _pool()
    if pool is not None:
        pool.set_num_threads(0)
    _unbuilt_setting[0] = None


def resolve_threads(n_threads=None) -> int:
    """A call's thread count: ``n_threads`` if given, else the default."""
    if type(n_threads) is int and 1 <= n_threads <= MAX_THREADS:
        return n_threads  # (every step of a session's run: checked at once)
    if n_threads is None:
        in_context = _context_setting.get()
        return get_num_threads() if in_context is None else in_context
    return _check(n_threads, "n_threads")


@contextlib.contextmanager
def threads_in_context(n_threads):
    """Calls in this block that give no ``n_threads`` run on ``n_threads``
    (``None``: the default).  The setting belongs to the calling thread (and
    asyncio task): other threads' calls keep theirs."""
    token = _context_setting.set(None if n_threads is None else _check(n_threads, "n_threads"))
    try:
        yield
    finally:
        _context_setting.reset(token)


@contextlib.contextmanager
def workers_kept_spinning(enabled=True):
    """Inside this block the kernels' idle workers spin for the next call
    instead of going to sleep after a tenth of a millisecond (for a run of
    many calls in a row, such as a model session's: a worker woken from its
    sleep joins a call late).  They keep a core busy meanwhile; blocks nest,
    and from any thread.  ``enabled=False`` (or an unbuilt checkout) does
    nothing."""
    pool = _pool() if enabled else None
    if pool is None:
        yield
        return
    pool.hold(1)
    try:
        yield
    finally:
        pool.hold(-1)
