/* The AVX2 variants' unaligned 256-bit loads and stores on any pointer. */
#ifndef QOPS_YMM_H
#define QOPS_YMM_H

/* The unaligned loads and the store on any pointer (their C declarations take
   __m256i pointers). */
#include <immintrin.h>
#define qops_load_128(p) _mm_loadu_si128((const __m128i*)(p))
#define qops_load_256(p) _mm256_loadu_si256((const __m256i*)(p))
#define qops_store_256(p, value) _mm256_storeu_si256((__m256i*)(p), (value))
#define qops_store_128(p, value) _mm_storeu_si128((__m128i*)(p), (value))
#define qops_load_ps(p) _mm256_loadu_ps((const float*)(p))

/* sums + x in int32 or int16 lanes, added into sums' own register.  Written
   as the intrinsic, GCC may add into the other operand's register and move
   the sum back, or, where a loop is unrolled, add two steps' terms first
   and then to the sums (a reassociation it may make of integers), which
   needs more registers than a micro-tile leaves: every sum spilled. */
#if defined(__GNUC__)
#define QOPS_ADD_IN_PLACE(name, instruction, intrinsic)                     \
    static inline __m256i name(__m256i sums, __m256i x) {                   \
        __asm__(instruction " %1, %0, %0" : "+x"(sums) : "x"(x));           \
        return sums;                                                        \
    }
#else
#define QOPS_ADD_IN_PLACE(name, instruction, intrinsic)                     \
    static inline __m256i name(__m256i sums, __m256i x) { return intrinsic(sums, x); }
#endif
QOPS_ADD_IN_PLACE(qops_add_epi32_in_place, "vpaddd", _mm256_add_epi32)
QOPS_ADD_IN_PLACE(qops_add_epi16_in_place, "vpaddw", _mm256_add_epi16)

/* sums + the int32 pair sums of pairs * panel (vpmaddwd), in place. */
static inline __m256i qops_multiply_add_epi16(__m256i sums, __m256i pairs, __m256i panel) {
    return qops_add_epi32_in_place(sums, _mm256_madd_epi16(pairs, panel));
}

#endif /* QOPS_YMM_H */
