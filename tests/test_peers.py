"""The comparison rule (tests/peers.py), fed the results of a saturating peer.

These hold on every CPU: the peer's results here are built from the model of
``vpmaddubsw`` in tests/oracles.py, not asked of onnxruntime.
"""

import numpy as np
import oracles
import peers
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest_plugins = ["pytester"]


@pytest.fixture
def ledger():
    """A ledger of its own, so that what these tests record stays out of the run's."""
    own = peers.Ledger()
    peers._LEDGERS.append(own)
    yield own
    peers._LEDGERS.remove(own)


def saturating_case(k=4):
    """255 against -128 in every term: each pair sum, -65280, leaves int16."""
    a = np.full((1, k), 255, np.uint8)
    b = np.full((k, 2), -128, np.int8)
    exact = a.astype(np.int64) @ b.astype(np.int64)
    m = oracles.multiplier(1.0, 1.0, 2.0**10)
    oracle = oracles.requantize(exact, m, np.uint8(128), np.uint8)
    peer = oracles.requantize(oracles.saturating_u8s8_sums(a, b), m, np.uint8(128), np.uint8)
    return oracle, peer


def test_the_saturation_model_is_off_where_a_pair_leaves_int16():
    oracle, peer = saturating_case()
    assert oracle.tolist() == [[0, 0]]            # -130560 / 1024 = -127.5 -> -128 + 128
    assert peer.tolist() == [[64, 64]]            # two pairs at -32768: -64 + 128


@given(k=st.integers(1, 40), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=30, deadline=None)
def test_the_saturation_model_is_exact_while_every_pair_fits(k, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (3, k)).astype(np.uint8)
    b = rng.integers(-64, 64, (k, 2)).astype(np.int8)   # |pair| <= 2 * 255 * 64 < 32768
    assert np.array_equal(oracles.saturating_u8s8_sums(a, b),
                          a.astype(np.int64) @ b.astype(np.int64))


def test_a_saturated_peer_is_recorded_and_the_test_goes_on(ledger):
    oracle, peer = saturating_case()
    peers.judge(oracle.copy(), oracle, peer=peer, context="saturated")
    (test,) = ledger.tests
    assert ledger.misses(test) == {"onnxruntime": (1, 1)}
    assert ledger.tests[test].worst["onnxruntime"] == 64
    assert "differs from the exact result in 1 of 1" in ledger.reason(test)


def test_a_peer_that_agrees_with_a_wrong_result_does_not_save_it(ledger):
    oracle, peer = saturating_case()
    with pytest.raises(AssertionError, match="differ in their bits"):
        peers.judge(peer, oracle, peer=peer)
    assert not ledger.tests, "the peer is not even asked when qops is wrong"


def test_an_exact_peer_is_counted(ledger):
    oracle, _ = saturating_case()
    peers.judge(oracle.copy(), oracle, peer=lambda: oracle.copy())
    totals, missed = ledger.totals()
    assert totals == {"onnxruntime": {"agreed": 1, "differed": 0, "unavailable": 0}}
    assert missed == []


def test_a_peer_without_a_kernel_is_recorded_not_skipped(ledger):
    oracle, _ = saturating_case()

    def no_kernel():
        pytest.skip("onnxruntime has no kernel for this type combination")

    peers.judge(oracle.copy(), oracle, peer=no_kernel)
    totals, _ = ledger.totals()
    assert totals["onnxruntime"]["unavailable"] == 1


def test_a_peer_of_another_shape_is_a_miss(ledger):
    oracle, _ = saturating_case()
    peers.judge(oracle.copy(), oracle, peer=oracle.ravel())
    (test,) = ledger.tests
    assert ledger.misses(test) == {"onnxruntime": (1, 1)}


def test_a_peer_that_fails_is_recorded_not_failed(ledger):
    oracle, _ = saturating_case()

    def broken():
        raise RuntimeError("[ONNXRuntimeError] INVALID_ARGUMENT")

    peers.judge(oracle.copy(), oracle, peer=broken)
    (test,) = ledger.tests
    assert ledger.totals()[0]["onnxruntime"]["unavailable"] == 1
    assert "RuntimeError" in ledger.tests[test].notes[0]


INNER_CONFTEST = """
from peers import (pytest_runtest_call, pytest_runtest_makereport, pytest_sessionfinish,
                   pytest_sessionstart, pytest_terminal_summary)
"""

INNER_TESTS = """
import numpy as np
import peers
from test_peers import saturating_case

def test_saturated_peer():
    oracle, peer = saturating_case()
    peers.judge(oracle.copy(), oracle, peer=peer)

def test_exact_peer():
    oracle, _ = saturating_case()
    peers.judge(oracle.copy(), oracle, peer=oracle.copy())

def test_wrong_qops():
    oracle, peer = saturating_case()
    peers.judge(peer, oracle, peer=peer)
"""


def test_a_session_reports_misses_as_xfailed_and_counts_them(pytester):
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_inner=INNER_TESTS)
    result = pytester.runpytest("-ra", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, xfailed=1, failed=1)
    # The outer test's id is its own again once the inner session is over.
    assert peers._current_test().endswith("test_a_session_reports_misses_as_xfailed_and_counts_them")
    result.stdout.fnmatch_lines([
        "*peer comparisons*",
        "onnxruntime: 1 comparisons equal to the exact result, 1 differed from it*",
        "*missed in test_inner.py::test_saturated_peer*",
        "*XFAIL test_inner.py::test_saturated_peer*onnxruntime differs from the exact result in "
        "1 of 1 comparisons, by up to 64*",
        "*FAILED test_inner.py::test_wrong_qops - AssertionError*",
    ])
