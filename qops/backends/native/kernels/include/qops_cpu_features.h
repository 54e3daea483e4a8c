/* What the CPU runs: the instruction sets the kernel variants need, as the
   CPU and the operating system report them. */
#ifndef QOPS_CPU_FEATURES_H
#define QOPS_CPU_FEATURES_H

static int qops_cpu_supports_avx2(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}
static int qops_cpu_supports_avx512vnni(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")
        && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}
#if defined(__GNUC__) && defined(__x86_64__)
#include <cpuid.h>
#endif
/* AMX-TILE and AMX-INT8 (CPUID leaf 7, EDX bits 24 and 25); whether the
   operating system grants the tile state is asked when the AMX kernels load. */
static int qops_cpu_supports_amx(void) {
#if defined(__GNUC__) && defined(__x86_64__)
    unsigned int a, b, c, d;
    if (!qops_cpu_supports_avx512vnni() || !__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    return ((d >> 24) & 1) && ((d >> 25) & 1);
#else
    return 0;
#endif
}
/* AVX-VNNI, the VEX-encoded vpdpbusd on xmm and ymm (CPUID leaf 7
   subleaf 1, EAX bit 4), with AVX2 and the operating system's ymm state. */
static int qops_cpu_supports_avxvnni(void) {
#if defined(__GNUC__) && defined(__x86_64__)
    unsigned int a, b, c, d;
    if (!qops_cpu_supports_avx2() || !__get_cpuid_count(7, 1, &a, &b, &c, &d))
        return 0;
    return (a >> 4) & 1;
#else
    return 0;
#endif
}
/* An exact 8-bit dot product: AVX-512 VNNI, or AVX-VNNI; -1 off x86-64,
   where the question has no answer here. */
static int qops_cpu_has_dot_product(void) {
#if defined(__GNUC__) && defined(__x86_64__)
    return qops_cpu_supports_avx512vnni() || qops_cpu_supports_avxvnni();
#else
    return -1;
#endif
}

#endif /* QOPS_CPU_FEATURES_H */
