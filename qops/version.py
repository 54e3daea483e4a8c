"""qops' version: its one home (the package metadata reads it from here)."""

__version__ = "0.1.0"
