"""Compiled kernels (Cython).  Nothing here validates: :mod:`qops.ops` does."""
