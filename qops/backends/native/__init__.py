"""The compiled implementations: variant selection (:mod:`.variants`), the
glue that turns a validated call into kernel arguments (:mod:`.gemm`,
:mod:`.quantize`), the lean per-call paths (``_lean``), the process's thread
pool as threadpoolctl sees it (:mod:`.pool`) and the kernels themselves
(:mod:`.kernels`).  Importing this package loads nothing compiled."""

from qops.backends.native import pool as _pool

_pool.register()
