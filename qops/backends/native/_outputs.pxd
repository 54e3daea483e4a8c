cimport numpy as cnp

cdef enum:
    # Outputs of this many bytes or more come from empty_array (the value
    # of qops.backends.contract.ALIGNED_OUTPUT_BYTES, which a test checks).
    LARGE_OUTPUT_BYTES = 4096

# A new C-contiguous array of nd dimensions over a reused, 64-byte aligned
# buffer (see _outputs.pyx).
cdef cnp.ndarray empty_array(int nd, cnp.npy_intp* dims, cnp.dtype descr)
