# cython: language_level=3
"""Output arrays whose memory the next output of the same size reuses.

A new array of a few hundred kilobytes from np.empty is a fresh memory
mapping whenever glibc's malloc decides to map it (from 128 KiB, a
threshold the process's own earlier frees move), and its pages then fault
in on the kernel's first writes, call after call: a call's time then
depends on what the process allocated and freed before.

An output made here is a NumPy array over an :class:`OutputBuffer` (its
``base``): 64-byte aligned, so that no cache line is shared by two threads'
blocks of it.  When the array and its last view are gone the buffer's
memory goes to a short free list, and the next output of the same rounded
size takes it with its pages already mapped, as an inference runtime's
arena does.  The list keeps at most KEPT buffers and KEPT_BYTES bytes; the
oldest goes back to the system first.  It is touched only with the GIL
held (allocation here, release in the buffer's deallocation).
"""

cimport numpy as cnp
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from libc.stdlib cimport free
from libc.string cimport memmove, memset

import numpy as np

cnp.import_array()

cdef extern from "<stdlib.h>" nogil:
    int posix_memalign(void** pointer, size_t alignment, size_t size)

cdef extern from "numpy/arrayobject.h":
    PyTypeObject PyArray_Type
    # Steals the reference to descr.
    object array_from_descr "PyArray_NewFromDescr"(
        PyTypeObject* subtype, cnp.dtype descr, int nd, cnp.npy_intp* dims,
        cnp.npy_intp* strides, void* data, int flags, PyObject* obj)

cdef enum:
    # Idle buffers kept: enough for a few operators' outputs alive in turn.
    KEPT = 8
    # Sizes round up to whole pages, so that outputs of nearly the same size
    # share buffers.
    PAGE = 4096
    ALIGNMENT = 64

#: The most bytes the free list keeps idle.
KEPT_BYTES = 64 << 20
# The same, for give_back: a buffer may be freed while the interpreter tears
# this module's globals down (an output that outlived everything else).
cdef size_t kept_bytes = KEPT_BYTES
#: The smallest output the lean paths (_lean.pyx) take from here.
SMALLEST_OUTPUT_BYTES = LARGE_OUTPUT_BYTES

cdef void* idle_memory[KEPT]
cdef size_t idle_size[KEPT]
cdef int idle_count = 0
cdef size_t idle_bytes = 0


cdef void* take(size_t size):
    """Memory of `size` bytes (a multiple of PAGE), 64-byte aligned: an idle
    buffer of that size, else new."""
    global idle_count, idle_bytes
    cdef int i
    cdef void* memory = NULL
    for i in range(idle_count - 1, -1, -1):
        if idle_size[i] == size:
            memory = idle_memory[i]
            memmove(&idle_memory[i], &idle_memory[i + 1], (idle_count - i - 1) * sizeof(void*))
            memmove(&idle_size[i], &idle_size[i + 1], (idle_count - i - 1) * sizeof(size_t))
            idle_count -= 1
            idle_bytes -= size
            return memory
    if posix_memalign(&memory, ALIGNMENT, size) != 0:
        return NULL
    return memory


cdef void give_back(void* memory, size_t size):
    """Keep `memory` for a later output, the oldest idle buffers freed to
    make room; a buffer larger than the whole allowance is freed at once."""
    global idle_count, idle_bytes
    if size > kept_bytes:
        free(memory)
        return
    while idle_count == KEPT or idle_bytes + size > kept_bytes:
        free(idle_memory[0])
        idle_bytes -= idle_size[0]
        idle_count -= 1
        memmove(&idle_memory[0], &idle_memory[1], idle_count * sizeof(void*))
        memmove(&idle_size[0], &idle_size[1], idle_count * sizeof(size_t))
    idle_memory[idle_count] = memory
    idle_size[idle_count] = size
    idle_count += 1
    idle_bytes += size


cdef class OutputBuffer:
    """The memory under one output array (its ``base``); returned to the
    free list when the last array over it is gone."""
    cdef void* memory
    cdef size_t size

    def __dealloc__(self):
        if self.memory != NULL:
            give_back(self.memory, self.size)

    @property
    def nbytes(self):
        return self.size


def empty(shape, dtype):
    """A new C-contiguous array of `shape` and `dtype` (any NumPy dtype of
    fixed size) over an :class:`OutputBuffer`."""
    cdef cnp.npy_intp dims[cnp.NPY_MAXDIMS]
    cdef int nd = len(shape), i
    if nd > cnp.NPY_MAXDIMS:
        raise ValueError(f"empty: {nd} dimensions; NumPy allows {cnp.NPY_MAXDIMS}")
    for i in range(nd):
        dims[i] = shape[i]
        if dims[i] < 0:
            raise ValueError(f"empty: dimension {i} is {dims[i]}")
    return empty_array(nd, dims, np.dtype(dtype))


cdef cnp.ndarray empty_array(int nd, cnp.npy_intp* dims, cnp.dtype descr):
    cdef size_t count = 1
    cdef int i
    for i in range(nd):
        count *= <size_t>dims[i]
    cdef OutputBuffer buffer = OutputBuffer.__new__(OutputBuffer)
    buffer.size = max(<size_t>PAGE, (count * <size_t>descr.itemsize + PAGE - 1) // PAGE * PAGE)
    buffer.memory = take(buffer.size)
    if buffer.memory == NULL:
        raise MemoryError()
    Py_INCREF(descr)
    cdef cnp.ndarray array = array_from_descr(&PyArray_Type, descr, nd, dims, NULL,
                                              buffer.memory, cnp.NPY_ARRAY_CARRAY, NULL)
    cnp.set_array_base(array, buffer)
    return array


def idle():
    """(buffers, bytes) the free list holds now."""
    return idle_count, idle_bytes


def fill_idle(int byte):
    """Fill every idle buffer with ``byte``: the next outputs then start
    over it, so that an operator which leaves an output byte unwritten
    shows it (the tests' use)."""
    cdef int i
    for i in range(idle_count):
        memset(idle_memory[i], byte, idle_size[i])
