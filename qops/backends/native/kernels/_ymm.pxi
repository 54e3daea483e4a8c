# The 256-bit intrinsics and unaligned loads and stores that the variants on
# ymm registers (AVX2, AVX-VNNI) share; included at the top of each.

cdef extern from "<immintrin.h>" nogil:
    ctypedef struct __m128i:
        pass
    ctypedef struct __m256i:
        pass
    __m256i _mm256_setzero_si256()
    __m128i _mm_set1_epi8(char value)
    __m128i _mm_xor_si128(__m128i a, __m128i b)
    __m256i _mm256_set1_epi32(int value)
    __m256i _mm256_set1_epi16(short value)
    __m256i _mm256_cvtepi8_epi16(__m128i value)
    __m256i _mm256_unpacklo_epi16(__m256i a, __m256i b)
    __m256i _mm256_unpackhi_epi16(__m256i a, __m256i b)
    __m256i _mm256_permute2x128_si256(__m256i a, __m256i b, int control)
    __m256i _mm256_madd_epi16(__m256i a, __m256i b)
    __m256i _mm256_add_epi32(__m256i a, __m256i b)
    ctypedef struct __m256:
        pass
    __m256i _mm256_sub_epi32(__m256i a, __m256i b)
    __m256i _mm256_mullo_epi32(__m256i a, __m256i b)
    __m256 _mm256_cvtepi32_ps(__m256i a)
    __m256i _mm256_cvtps_epi32(__m256 a)
    __m256 _mm256_mul_ps(__m256 a, __m256 b)
    __m256 _mm256_max_ps(__m256 a, __m256 b)
    __m256 _mm256_min_ps(__m256 a, __m256 b)
    __m256 _mm256_set1_ps(float value)
    __m256i _mm256_packs_epi32(__m256i a, __m256i b)
    __m256i _mm256_adds_epi16(__m256i a, __m256i b)
    __m256i _mm256_packus_epi16(__m256i a, __m256i b)
    __m256i _mm256_permutevar8x32_epi32(__m256i a, __m256i index)
    __m256i _mm256_setr_epi32(int e0, int e1, int e2, int e3, int e4, int e5, int e6, int e7)
    __m256i _mm256_set1_epi8(char value)
    __m256i _mm256_add_epi8(__m256i a, __m256i b)
    __m128i _mm256_castsi256_si128(__m256i a)
    __m128i _mm256_extracti128_si256(__m256i a, int index)
    void _mm_prefetch(const char* p, int hint)
    int _MM_HINT_T0

cdef extern from "qops_ymm.h":
    __m128i _mm_loadu_si128 "qops_load_128"(const void* p) nogil
    __m256i _mm256_loadu_si256 "qops_load_256"(const void* p) nogil
    void _mm256_storeu_si256 "qops_store_256"(void* p, __m256i value) nogil
    __m256i multiply_add_epi16 "qops_multiply_add_epi16"(__m256i sums, __m256i pairs,
                                                         __m256i panel) nogil
    void _mm_storeu_si128 "qops_store_128"(void* p, __m128i value) nogil
    __m256 _mm256_loadu_ps "qops_load_ps"(const void* p) nogil
