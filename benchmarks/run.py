"""Run the full benchmark: ``python benchmarks/run.py`` (same as ``python -m qops bench``).

Results go to benchmarks/results/bench.md and bench.png.
"""

import sys

from qops.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
