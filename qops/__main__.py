"""``python -m qops``: the command line (:mod:`qops.cli.main`)."""

import sys

from qops.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
