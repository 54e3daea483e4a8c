"""Per-operator front ends: NumPy arguments in, a validated call out.

Each module normalizes its operator's arguments (shorthand scales and zero
points, dtypes), runs the registry-driven checks of :mod:`qops.ops.validation`
and the operator's own shape rules, and returns a :class:`~qops.ops.arguments.Call`
for the dispatch point.  Nothing here loops over elements.
"""
