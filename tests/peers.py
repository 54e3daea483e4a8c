"""The one rule of every bit-exact comparison with another implementation.

qops is judged against an exact oracle: :mod:`qops.reference`, or an exact
statement of the contract written in the test.  A peer (onnxruntime) is a
second opinion, never the judge: without AVX-512 VNNI its u8 x s8 kernels
saturate int16 pair sums (``vpmaddubsw``) and are off by up to 255, so a
test that treated it as the oracle would fail exactly where qops is right.

:func:`judge` applies the rule::

    judge(qops_result, oracle_result, peer=lambda: run_ort(...), context="...")

1. qops must equal the oracle bit for bit; otherwise the test fails, whatever
   the peer says (a peer that agrees with a wrong qops saves nothing).
2. The peer runs on the same input.  Where its output equals the oracle's,
   qops equals it too, and the comparison counts as one the peer passed.
   Where it differs, the miss is recorded with its size and the test goes
   on: a test whose own assertions all pass but that recorded a miss is
   reported as xfailed, with the reason, by :func:`pytest_runtest_makereport`.
   A peer without a kernel for the input (onnxruntime's NOT_IMPLEMENTED,
   raised by the callable as ``pytest.skip``), or one that fails with an
   error of its own, is recorded as not run and does not end the test.
3. The run's summary (:func:`pytest_terminal_summary`) counts, per peer, the
   comparisons it passed, the ones it missed and the ones it could not run,
   and names the tests with misses.

``tests/conftest.py`` imports the hooks; the rule's own tests are
``tests/test_peers.py``.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from bitwise import assert_bits_equal, bits, is_nan

__all__ = ["judge", "Ledger", "current_ledger", "pytest_sessionstart", "pytest_sessionfinish",
           "pytest_runtest_call", "pytest_runtest_makereport", "pytest_terminal_summary"]

AGREED, DIFFERED, UNAVAILABLE = "agreed", "differed", "unavailable"


@dataclasses.dataclass
class _TestRecord:
    counts: dict = dataclasses.field(default_factory=dict)   # (peer, outcome) -> count
    worst: dict = dataclasses.field(default_factory=dict)    # peer -> largest difference
    notes: list = dataclasses.field(default_factory=list)    # a few details, for the reason


class Ledger:
    """What the peers did in one pytest session, by test."""

    def __init__(self):
        self.tests = {}

    def record(self, test, peer, outcome, difference=None, note=None):
        entry = self.tests.setdefault(test, _TestRecord())
        entry.counts[(peer, outcome)] = entry.counts.get((peer, outcome), 0) + 1
        if difference is not None:
            entry.worst[peer] = max(entry.worst.get(peer, 0), difference)
        if note and len(entry.notes) < 3 and note not in entry.notes:
            entry.notes.append(note)

    def misses(self, test):
        """``{peer: (missed, compared)}`` of the peers that differed in ``test``."""
        entry = self.tests.get(test)
        if entry is None:
            return {}
        found = {}
        for (peer, outcome), count in entry.counts.items():
            if outcome == DIFFERED:
                compared = count + entry.counts.get((peer, AGREED), 0)
                found[peer] = (count, compared)
        return found

    def reason(self, test):
        """The xfail reason of a test whose peers missed."""
        entry = self.tests[test]
        parts = []
        for peer, (missed, compared) in sorted(self.misses(test).items()):
            worst = entry.worst.get(peer)
            size = f", by up to {worst:g}" if worst else ""
            parts.append(f"{peer} differs from the exact result in {missed} of {compared} "
                         f"comparisons{size}")
        return "; ".join(parts) + "; qops equals the exact result in every one"

    def totals(self):
        """``{peer: {outcome: count}}`` over the session, and the tests with misses."""
        totals = {}
        missed_tests = []
        for test, entry in self.tests.items():
            for (peer, outcome), count in entry.counts.items():
                per_peer = totals.setdefault(peer, {AGREED: 0, DIFFERED: 0, UNAVAILABLE: 0})
                per_peer[outcome] += count
            if self.misses(test):
                missed_tests.append(test)
        return totals, missed_tests


# One ledger per session; a stack because pytester may run a session inside one.
_LEDGERS = [Ledger()]


def current_ledger():
    return _LEDGERS[-1]


#: The node ids of the tests running now (a stack: pytester runs tests inside a test).
_RUNNING = []


def _current_test():
    if _RUNNING:
        return _RUNNING[-1]
    # "tests/test_x.py::test_y[id] (call)": the node id before the stage.
    running = os.environ.get("PYTEST_CURRENT_TEST", "")
    return running.rsplit(" (", 1)[0] if running else "<outside a test>"


def difference(peer_result, oracle):
    """The largest absolute difference of two arrays of one shape (as float),
    or ``None`` when they do not even have one shape and dtype."""
    peer_result, oracle = np.asarray(peer_result), np.asarray(oracle)
    if peer_result.shape != oracle.shape or peer_result.dtype != oracle.dtype:
        return None
    if oracle.dtype.kind in "iub":
        return float(np.abs(peer_result.astype(np.int64) - oracle.astype(np.int64)).max(initial=0))
    with np.errstate(invalid="ignore"):
        gap = np.abs(peer_result.astype(np.float64) - oracle.astype(np.float64))
    gap = np.where(np.isnan(gap), np.inf, gap)
    return float(gap.max(initial=0))


def _same_bits(left, right):
    left, right = np.asarray(left), np.asarray(right)
    if left.shape != right.shape or left.dtype != right.dtype:
        return False
    nan_left, nan_right = is_nan(left), is_nan(right)
    return bool(np.array_equal(nan_left, nan_right)
                and ((bits(left) == bits(right)) | (nan_left & nan_right)).all())


def judge(actual, oracle, *, peer=None, peer_name="onnxruntime", context=""):
    """qops' ``actual`` against the exact ``oracle``, and ``peer`` where it is exact.

    ``peer`` is the peer's result on the same input, or a callable returning
    it (called after qops has passed, so that a peer that cannot run, raising
    ``pytest.skip`` or any error of its own, is recorded rather than ending
    the test).
    """
    assert_bits_equal(actual, oracle, context or "qops against the exact oracle")
    if peer is None:
        return
    test = _current_test()
    ledger = current_ledger()
    try:
        result = peer() if callable(peer) else peer
    except pytest.skip.Exception as reason:
        ledger.record(test, peer_name, UNAVAILABLE, note=str(reason))
        return
    except Exception as error:  # noqa: BLE001 - the peer's failure is not qops'
        ledger.record(test, peer_name, UNAVAILABLE,
                      note=f"{peer_name} raised {type(error).__name__}: {error}")
        return
    if _same_bits(result, oracle):
        ledger.record(test, peer_name, AGREED)
        return
    gap = difference(result, oracle)
    if gap is not None:
        count = int((bits(np.asarray(result)) != bits(np.asarray(oracle))).sum())
        what = f"{count} element{'s differ' if count != 1 else ' differs'}"
    else:
        what = (f"shape/dtype {np.shape(result)} {np.asarray(result).dtype}, the oracle's "
                f"{np.shape(oracle)} {np.asarray(oracle).dtype}")
    note = f"{context}: {what}" if context else what
    ledger.record(test, peer_name, DIFFERED, difference=gap, note=note)


# -- pytest hooks (imported into tests/conftest.py) --------------------------------------------

_SESSION_LEDGER = pytest.StashKey[Ledger]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    _RUNNING.append(item.nodeid)
    try:
        return (yield)
    finally:
        _RUNNING.pop()


def pytest_sessionstart(session):
    ledger = Ledger()
    session.config.stash[_SESSION_LEDGER] = ledger
    _LEDGERS.append(ledger)


def pytest_sessionfinish(session, exitstatus):
    ledger = session.config.stash.get(_SESSION_LEDGER, None)
    if ledger in _LEDGERS:
        _LEDGERS.remove(ledger)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    ledger = item.config.stash.get(_SESSION_LEDGER, None)
    if ledger is not None and report.when == "call" and report.passed and ledger.misses(item.nodeid):
        report.outcome = "skipped"
        report.wasxfail = ledger.reason(item.nodeid)
    return report


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    ledger = config.stash.get(_SESSION_LEDGER, None)
    if ledger is None:
        return
    totals, missed_tests = ledger.totals()
    if not totals:
        return
    terminalreporter.section("peer comparisons")
    for peer, counts in sorted(totals.items()):
        terminalreporter.line(
            f"{peer}: {counts[AGREED]} comparisons equal to the exact result, "
            f"{counts[DIFFERED]} differed from it (recorded; qops is exact in all), "
            f"{counts[UNAVAILABLE]} not run (no kernel)")
    for test in missed_tests:
        entry = ledger.tests[test]
        detail = "; ".join(entry.notes)
        terminalreporter.line(f"  missed in {test}: {ledger.reason(test)}"
                              + (f" [{detail}]" if detail else ""))
