"""The C compiler the tests that build the kernels' headers use, and where
the headers are (qops/backends/native/kernels/include)."""

import os
import shlex
import shutil
import sysconfig
from pathlib import Path

import qops.backends.native.kernels as kernels

INCLUDE = Path(kernels.__file__).parent / "include"


def compiler():
    """The command of the C compiler (CC, else the one Python was built
    with), as a list of words, or None where it is not installed."""
    command = os.environ.get("CC") or sysconfig.get_config_var("CC")
    if not command:
        return None
    words = shlex.split(command)
    return words if shutil.which(words[0]) else None
