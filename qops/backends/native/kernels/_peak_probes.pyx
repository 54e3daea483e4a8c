# cython: language_level=3
"""The peak probes: each kernel variant's arithmetic ceiling, in GOPS.

A probe is a register-resident loop of the variant's own multiply-add
instructions (include/qops_peak_probes.h), run on the process's pool at
each of its placements in the front end's lines; a kernel's share of it is
the '% peak' of ``python -m qops bench``.  The probes live here, apart from
the kernels, and a variant's probe runs only where the CPU runs the variant
(the callers ask :mod:`qops.backends.native.variants` first)."""

from qops.backends.native.kernels._qops_pool cimport run_tasks

cdef extern from "qops_peak_probes.h":
    int PROBE_PLACEMENTS "QOPS_PROBE_PLACEMENTS"
    int PORTABLE_LANES "QOPS_PROBE_LANES"
    int PORTABLE_RESULT "QOPS_PROBE_RESULT"
    long long probe_portable "qops_probe_portable"(long long rounds, int placement) noexcept nogil
    long long probe_avx2 "qops_probe_avx2"(long long rounds, int placement) noexcept nogil
    long long peer_probe_avx2 "qops_peer_probe_avx2"(long long rounds,
                                                      int placement) noexcept nogil
    long long probe_avxvnni "qops_probe_avxvnni"(long long rounds, int placement) noexcept nogil
    long long probe_avx512vnni "qops_probe_avx512vnni"(long long rounds,
                                                        int placement) noexcept nogil
    long long probe_amx "qops_probe_amx"(long long rounds, int placement) noexcept nogil


ctypedef long long (*ProbeLoop)(long long rounds, int placement) noexcept nogil

cdef enum:
    # Probe tasks per thread: a thread that starts late still takes its
    # share, so the time is the threads' throughput, not the latest start.
    PROBE_TASKS = 16


cdef struct ProbeRun:
    ProbeLoop loop
    long long rounds                 # per task
    int placement


cdef void probe_task(void* context, Py_ssize_t index, int slot) noexcept nogil:
    cdef const ProbeRun* run = <const ProbeRun*>context
    run.loop(run.rounds, run.placement)


cdef void probe_on_threads(ProbeLoop loop, int placement, long long rounds,
                           int n_threads) noexcept nogil:
    """n_threads * rounds rounds of a probe loop, on n_threads threads of the pool."""
    cdef ProbeRun run
    run.loop = loop
    run.rounds = max(1, rounds // PROBE_TASKS)
    run.placement = placement
    run_tasks(probe_task, &run, n_threads * PROBE_TASKS, n_threads)


cdef object probe_gops(ProbeLoop loop, long long multiply_adds, int n_threads, double seconds):
    """GOPS of a probe loop doing multiply_adds per round: the fastest of its
    placements, each the best of three runs on n_threads threads at once,
    all in about ``seconds``."""
    import time

    cdef long long rounds = 1024
    cdef double elapsed = 0.0
    cdef int placement
    if n_threads < 1:
        raise ValueError("n_threads must be at least 1")
    while True:  # calibrate on one thread: runs long enough to time
        start = time.perf_counter()
        with nogil:
            probe_on_threads(loop, 0, rounds, 1)
        elapsed = time.perf_counter() - start
        if elapsed > 0.005 or rounds > (1 << 40):
            break
        rounds = rounds * 4
    rounds = <long long>(rounds * (seconds / (3.0 * PROBE_PLACEMENTS)) / max(elapsed, 1e-9))
    rounds = max(PROBE_TASKS, rounds - rounds % PROBE_TASKS)
    best = float("inf")
    for placement in range(PROBE_PLACEMENTS):
        for _ in range(3):
            start = time.perf_counter()
            with nogil:
                probe_on_threads(loop, placement, rounds, n_threads)
            best = min(best, time.perf_counter() - start)
    return 2.0 * multiply_adds * rounds * n_threads / best / 1e9


cdef class Probe:
    """One probe loop: its instructions (``mix``), its multiply-adds per
    round and what one round adds to its result."""
    cdef ProbeLoop loop
    cdef readonly str mix
    cdef readonly long long multiply_adds
    cdef readonly long long result_per_round

    def peak_gops(self, int n_threads=1, double seconds=0.2):
        """The loop's rate in GOPS (two operations per multiply-add) on
        ``n_threads`` threads at once, the best run of all its placements,
        in about ``seconds``."""
        return probe_gops(self.loop, self.multiply_adds, n_threads, seconds)

    def result(self, long long rounds, int placement=0):
        """The loop's own result after ``rounds`` rounds on one thread at
        placement ``placement``: ``rounds * result_per_round`` (as int32)
        when every chain of every round ran, the check that the loop timed
        is the loop counted."""
        cdef long long value
        if not 0 <= placement < PROBE_PLACEMENTS:
            raise ValueError(f"placement must be 0 to {PROBE_PLACEMENTS - 1}, not {placement}")
        with nogil:
            value = self.loop(rounds, placement)
        return value


cdef Probe make_probe(ProbeLoop loop, str mix, long long multiply_adds, long long result_per_round):
    cdef Probe probe = Probe.__new__(Probe)
    probe.loop = loop
    probe.mix = mix
    probe.multiply_adds = multiply_adds
    probe.result_per_round = result_per_round
    return probe


#: Each variant's probe: its micro-kernel's multiply-add instructions.
PROBES = {
    # Six chains of SSE2's pmaddwd + paddd on x86-64, else plain int32
    # multiply-adds; (-1)(-1) * 2 a lane each per round (sums 63 in C).
    "portable": make_probe(
        probe_portable,
        "pmaddwd + paddd (SSE2, int16 pairs, exact)" if PORTABLE_LANES > 1
        else "int32 multiply-add (plain C, exact)",
        6 * PORTABLE_LANES, PORTABLE_RESULT),
    # Six vpmaddwd of 16 int16 products; six chains of (-1)(-1) * 2.
    "avx2": make_probe(probe_avx2, "vpmaddwd + vpaddd (int16 pairs, exact)", 6 * 16, 6 * 2),
    # Twelve vpdpbusd of 32 (ymm) or 64 (zmm) byte products; 4 a lane each.
    "avxvnni": make_probe(probe_avxvnni, "vpdpbusd on ymm (AVX-VNNI, u8 x s8 quads, exact)",
                          12 * 32, 12 * 4),
    "avx512vnni": make_probe(probe_avx512vnni, "vpdpbusd (u8 x s8 quads, exact)", 12 * 64, 12 * 4),
    # Four tdpbusd of 16 x 16 x 64 byte products; 64 per element of tile 0.
    "amx": make_probe(probe_amx, "tdpbusd (AMX-INT8 tiles, exact)", 4 * 16 * 16 * 64, 64),
}

#: onnxruntime's AVX2 u8 x s8 step where the CPU has no 8-bit dot product
#: (vpmaddubsw adds pairs of byte products into int16, saturating; vpmaddwd
#: by ones widens them): its ceiling beside the exact one tells how much of
#: a comparison on an AVX2 CPU is the idiom rather than the kernel.  Six
#: vpmaddubsw of 32 byte products a round; each chain gains two words of
#: two (255 x -1) products a lane.
PEER_PROBES = {
    "avx2": make_probe(peer_probe_avx2,
                       "vpmaddubsw + vpmaddwd + vpaddd (u8 x s8 pairs, saturating int16)",
                       6 * 32, 6 * -1020),
}


def probe(str variant):
    """The probe of kernel variant ``variant`` (run it only where the CPU
    runs the variant)."""
    return PROBES[variant]


def peer_probe(str variant):
    """The peer's probe for ``variant``, or None where there is none."""
    return PEER_PROBES.get(variant)
