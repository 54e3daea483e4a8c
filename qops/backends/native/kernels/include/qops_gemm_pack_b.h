/* The GEMM's packing of B: the column tiles' packing state, shared by a run's threads. */
#ifndef QOPS_GEMM_PACK_B_H
#define QOPS_GEMM_PACK_B_H

/* A column tile's packing state, shared by the threads of a run: one
   thread claims it (compare-and-swap), packs it and publishes it with a
   release store that the others' acquire loads pair with.  Without GCC
   or Clang builtins the pool has no threads (it needs pthreads and
   OpenMP), so plain accesses are enough. */
#if defined(__GNUC__)
static inline int qops_state_load(const int* state) {
    return __atomic_load_n(state, __ATOMIC_ACQUIRE);
}
static inline void qops_state_store(int* state, int value) {
    __atomic_store_n(state, value, __ATOMIC_RELEASE);
}
static inline int qops_state_claim(int* state, int from, int to) {
    return __atomic_compare_exchange_n(state, &from, to, 0, __ATOMIC_ACQUIRE,
                                       __ATOMIC_ACQUIRE);
}
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define qops_state_pause() _mm_pause()
#else
#define qops_state_pause() ((void)0)
#endif
#else
static int qops_state_load(const int* state) { return *state; }
static void qops_state_store(int* state, int value) { *state = value; }
static int qops_state_claim(int* state, int from, int to) {
    if (*state != from) return 0;
    *state = to;
    return 1;
}
#define qops_state_pause() ((void)0)
#endif
#include <sched.h>

#endif /* QOPS_GEMM_PACK_B_H */
