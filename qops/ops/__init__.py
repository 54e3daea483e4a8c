"""The operators' front ends: what a call means.

One module per operator family holds its public function, its validation
(``prepare``: NumPy arguments in, a validated
:class:`~qops.backends.dispatch.Call` out, nothing run before every check has
passed) and its plan cache: :mod:`.convolution`, :mod:`.matmul`,
:mod:`.integer`, :mod:`.quantize`.  They share :mod:`.arguments` (turning
arguments into arrays and descriptions), :mod:`.validation` (the checks that
read the registry), :mod:`.geometry`, :mod:`.common` (requantization's value
checks) and :mod:`.plans`.  :mod:`.validate` checks a call without running
it, :mod:`.compiled` binds constant operands.  Nothing here loops over
elements.
"""
