"""The differential tests with many more Hypothesis examples: a long run by hand.

    python benchmarks/long_tests.py                 # every module, profile "long"
    python benchmarks/long_tests.py tests/ops/test_quantize.py -x

Each Hypothesis test without its own example count draws 1000 examples
(``tests/conftest.py``, profile ``long``) instead of the default run's 40:
about nine minutes for the whole suite on two cores.  Arguments are pytest's.
"""

import os
import sys

import pytest

if __name__ == "__main__":
    os.environ["HYPOTHESIS_PROFILE"] = "long"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *(sys.argv[1:] or
                                                            [os.path.join(root, "tests")])]))
