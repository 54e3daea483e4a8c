/* The peak probes: each kernel variant's multiply-add instructions in a
   register-resident loop, whose rate is the variant's arithmetic ceiling
   (the bench's "% peak").  Inline assembly, which assembles whatever the
   compiler targets: one module holds every variant's loop, and each runs
   only where the CPU has its instructions. */
#ifndef QOPS_PEAK_PROBES_H
#define QOPS_PEAK_PROBES_H

#include <stdint.h>
#include <string.h>

/* Where a probe's loop lies: a register-resident loop of a few dozen bytes
   runs at a rate that depends on its place in the 64-byte lines the front
   end fetches, and nothing in a build fixes the place the linker gives a
   function.  So each probe is compiled at four places, 8, 24, 40 and 56
   bytes into a line, and the timing takes the fastest: no loop length
   straddles badly at all four.  Each variant writes its loop once as a
   macro DEFINE(name, at) that defines `static long long name(long long
   rounds)` with the asm string `at` before the loop's label;
   QOPS_PROBE_PLACED makes the four and `name(rounds, placement)`, which
   runs one of them. */
#define QOPS_PROBE_AT(skip) ".p2align 6\n\t.skip " #skip ", 0x90\n\t"
#define QOPS_PROBE_PLACEMENTS 4
#define QOPS_PROBE_PLACED(name, DEFINE) \
    DEFINE(name##_8, QOPS_PROBE_AT(8)) \
    DEFINE(name##_24, QOPS_PROBE_AT(24)) \
    DEFINE(name##_40, QOPS_PROBE_AT(40)) \
    DEFINE(name##_56, QOPS_PROBE_AT(56)) \
    static long long name(long long rounds, int placement) { \
        switch (placement) { \
        case 1: return name##_24(rounds); \
        case 2: return name##_40(rounds); \
        case 3: return name##_56(rounds); \
        default: return name##_8(rounds); \
        } \
    }

/* The end of the VNNI probes' asm, whose loops run twelve vpdpbusd chains in
   registers 0-11 of one width (r: "ymm" or "zmm"), with the round count in
   %[rounds], eax and registers 12-13 for the operands: the chains summed into
   lane 0 of register 0, that lane into %[sink], and the operands and clobbers
   of the asm statement. */
#define QOPS_PROBE_SUM_TWELVE(r) \
    "vpaddd %%" r "1, %%" r "0, %%" r "0\n\t" \
    "vpaddd %%" r "3, %%" r "2, %%" r "2\n\t" \
    "vpaddd %%" r "5, %%" r "4, %%" r "4\n\t" \
    "vpaddd %%" r "7, %%" r "6, %%" r "6\n\t" \
    "vpaddd %%" r "9, %%" r "8, %%" r "8\n\t" \
    "vpaddd %%" r "11, %%" r "10, %%" r "10\n\t" \
    "vpaddd %%" r "2, %%" r "0, %%" r "0\n\t" \
    "vpaddd %%" r "6, %%" r "4, %%" r "4\n\t" \
    "vpaddd %%" r "10, %%" r "8, %%" r "8\n\t" \
    "vpaddd %%" r "4, %%" r "0, %%" r "0\n\t" \
    "vpaddd %%" r "8, %%" r "0, %%" r "0\n\t" \
    "vmovd %%xmm0, %[sink]\n\t" \
    "vzeroupper\n\t"
#define QOPS_PROBE_TWELVE_OPERANDS \
    : [rounds] "+r"(rounds), [sink] "=r"(sink) \
    : \
    : "eax", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", \
      "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "cc"

/* The peak probe (peak_gops): what the baseline instruction set offers for
   exact 16-bit products, SSE2's pmaddwd + paddd on x86-64 (six chains, in
   assembly and placed as the AVX2 probe), else plain int32 multiply-adds. */
#if defined(__SSE2__) && defined(__GNUC__) && defined(__x86_64__)
#define QOPS_PROBE_LANES 8
#define QOPS_PROBE_RESULT 12
#define QOPS_PROBE_SSE2(name, at) \
static long long name(long long rounds) { \
    int sink = 0; \
    if (rounds <= 0) return 0; \
    __asm__ volatile( \
        "pxor %%xmm0, %%xmm0\n\t" \
        "pxor %%xmm1, %%xmm1\n\t" \
        "pxor %%xmm2, %%xmm2\n\t" \
        "pxor %%xmm3, %%xmm3\n\t" \
        "pxor %%xmm4, %%xmm4\n\t" \
        "pxor %%xmm5, %%xmm5\n\t" \
        "pcmpeqd %%xmm6, %%xmm6\n\t" \
        "pcmpeqd %%xmm7, %%xmm7\n\t" \
        at "1:\n\t" \
        "movdqa %%xmm6, %%xmm8\n\t" \
        "pmaddwd %%xmm7, %%xmm8\n\t" \
        "paddd %%xmm8, %%xmm0\n\t" \
        "movdqa %%xmm6, %%xmm9\n\t" \
        "pmaddwd %%xmm7, %%xmm9\n\t" \
        "paddd %%xmm9, %%xmm1\n\t" \
        "movdqa %%xmm6, %%xmm10\n\t" \
        "pmaddwd %%xmm7, %%xmm10\n\t" \
        "paddd %%xmm10, %%xmm2\n\t" \
        "movdqa %%xmm6, %%xmm11\n\t" \
        "pmaddwd %%xmm7, %%xmm11\n\t" \
        "paddd %%xmm11, %%xmm3\n\t" \
        "movdqa %%xmm6, %%xmm12\n\t" \
        "pmaddwd %%xmm7, %%xmm12\n\t" \
        "paddd %%xmm12, %%xmm4\n\t" \
        "movdqa %%xmm6, %%xmm13\n\t" \
        "pmaddwd %%xmm7, %%xmm13\n\t" \
        "paddd %%xmm13, %%xmm5\n\t" \
        "dec %[rounds]\n\t" \
        "jnz 1b\n\t" \
        "paddd %%xmm1, %%xmm0\n\t" \
        "paddd %%xmm3, %%xmm2\n\t" \
        "paddd %%xmm5, %%xmm4\n\t" \
        "paddd %%xmm2, %%xmm0\n\t" \
        "paddd %%xmm4, %%xmm0\n\t" \
        "movd %%xmm0, %[sink]\n\t" \
        : [rounds] "+r"(rounds), [sink] "=r"(sink) \
        : \
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", \
          "xmm10", "xmm11", "xmm12", "xmm13", "cc"); \
    return sink; \
}
QOPS_PROBE_PLACED(qops_probe_portable, QOPS_PROBE_SSE2)
#else
#define QOPS_PROBE_LANES 1
#define QOPS_PROBE_RESULT 63
static long long qops_probe_portable(long long rounds, int placement) {
    volatile int a = 3;
    (void)placement;  /* compiled C: the compiler places its loop */
    int c0 = 0, c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0;
    for (long long i = 0; i < rounds; i++) {
        int x = a;
        c0 += x * 1; c1 += x * 2; c2 += x * 3; c3 += x * 4; c4 += x * 5; c5 += x * 6;
    }
    return c0 + c1 + c2 + c3 + c4 + c5;
}
#endif

/* The SIMD variants' probes are x86-64 assembly; elsewhere they are
   stubs, never run (no such variant is selected there). */
#if defined(__GNUC__) && defined(__x86_64__)
/* The peak probe (peak_gops): six independent vpmaddwd + vpaddd chains on
   register-resident int16 operands, the micro-kernel's own arithmetic without
   its loads.  Written in assembly with fixed registers: compiled from
   intrinsics, the loop had accumulators spilled to the stack and timed store
   forwarding instead of the multiplier.  At four places in a line
   (QOPS_PROBE_PLACED). */
/* What both probes share: six int32 chains (ymm0-5) zeroed and operands
   of all ones bits (ymm6, ymm7) before the loop; after it, the round
   counted down and the chains summed into the result. */
#define QOPS_PROBE_START \
    "vpxor %%xmm0, %%xmm0, %%xmm0\n\t" "vpxor %%xmm1, %%xmm1, %%xmm1\n\t" \
    "vpxor %%xmm2, %%xmm2, %%xmm2\n\t" "vpxor %%xmm3, %%xmm3, %%xmm3\n\t" \
    "vpxor %%xmm4, %%xmm4, %%xmm4\n\t" "vpxor %%xmm5, %%xmm5, %%xmm5\n\t" \
    "vpcmpeqd %%ymm6, %%ymm6, %%ymm6\n\t" "vpcmpeqd %%ymm7, %%ymm7, %%ymm7\n\t"
#define QOPS_PROBE_END \
    "dec %[rounds]\n\t" "jnz 1b\n\t" \
    "vpaddd %%ymm1, %%ymm0, %%ymm0\n\t" "vpaddd %%ymm3, %%ymm2, %%ymm2\n\t" \
    "vpaddd %%ymm5, %%ymm4, %%ymm4\n\t" "vpaddd %%ymm2, %%ymm0, %%ymm0\n\t" \
    "vpaddd %%ymm4, %%ymm0, %%ymm0\n\t" "vmovd %%xmm0, %[sink]\n\t" "vzeroupper\n\t"
#define QOPS_PROBE_CLOBBERS \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", \
    "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "cc"
#define QOPS_PROBE_AVX2(name, at) \
static long long name(long long rounds) { \
    int sink = 0; \
    if (rounds <= 0) return 0; \
    __asm__ volatile( \
        QOPS_PROBE_START \
        at "1:\n\t" \
        "vpmaddwd %%ymm7, %%ymm6, %%ymm8\n\t" "vpaddd %%ymm8, %%ymm0, %%ymm0\n\t" \
        "vpmaddwd %%ymm7, %%ymm6, %%ymm9\n\t" "vpaddd %%ymm9, %%ymm1, %%ymm1\n\t" \
        "vpmaddwd %%ymm7, %%ymm6, %%ymm10\n\t" "vpaddd %%ymm10, %%ymm2, %%ymm2\n\t" \
        "vpmaddwd %%ymm7, %%ymm6, %%ymm11\n\t" "vpaddd %%ymm11, %%ymm3, %%ymm3\n\t" \
        "vpmaddwd %%ymm7, %%ymm6, %%ymm12\n\t" "vpaddd %%ymm12, %%ymm4, %%ymm4\n\t" \
        "vpmaddwd %%ymm7, %%ymm6, %%ymm13\n\t" "vpaddd %%ymm13, %%ymm5, %%ymm5\n\t" \
        QOPS_PROBE_END \
        : [rounds] "+r"(rounds), [sink] "=r"(sink) : : QOPS_PROBE_CLOBBERS); \
    return sink; \
}
QOPS_PROBE_PLACED(qops_probe_avx2, QOPS_PROBE_AVX2)

/* onnxruntime's AVX2 step for u8 x s8 (where the CPU has no 8-bit dot
   product): vpmaddubsw adds pairs of byte products into int16, saturating,
   vpmaddwd by ones widens them, vpaddd accumulates; 32 multiply-adds in three
   instructions against the exact step's 16 in two.  Its ceiling beside the
   exact one (benchmarks: the peer's ceiling) tells how much of a comparison on
   an AVX2 CPU is the idiom rather than the kernel (the two steps' ceilings
   differ from core to core: docs/benchmarks.rst).  Six
   chains on register operands, like the exact probe. */
#define QOPS_PEER_PROBE_AVX2(name, at) \
static long long name(long long rounds) { \
    int sink = 0; \
    if (rounds <= 0) return 0; \
    __asm__ volatile( \
        QOPS_PROBE_START \
        "vpcmpeqd %%ymm14, %%ymm14, %%ymm14\n\t" \
        "vpsrlw $15, %%ymm14, %%ymm14\n\t" \
        at "1:\n\t" \
        "vpmaddubsw %%ymm7, %%ymm6, %%ymm8\n\t" "vpmaddwd %%ymm14, %%ymm8, %%ymm8\n\t" \
        "vpaddd %%ymm8, %%ymm0, %%ymm0\n\t" \
        "vpmaddubsw %%ymm7, %%ymm6, %%ymm9\n\t" "vpmaddwd %%ymm14, %%ymm9, %%ymm9\n\t" \
        "vpaddd %%ymm9, %%ymm1, %%ymm1\n\t" \
        "vpmaddubsw %%ymm7, %%ymm6, %%ymm10\n\t" "vpmaddwd %%ymm14, %%ymm10, %%ymm10\n\t" \
        "vpaddd %%ymm10, %%ymm2, %%ymm2\n\t" \
        "vpmaddubsw %%ymm7, %%ymm6, %%ymm11\n\t" "vpmaddwd %%ymm14, %%ymm11, %%ymm11\n\t" \
        "vpaddd %%ymm11, %%ymm3, %%ymm3\n\t" \
        "vpmaddubsw %%ymm7, %%ymm6, %%ymm12\n\t" "vpmaddwd %%ymm14, %%ymm12, %%ymm12\n\t" \
        "vpaddd %%ymm12, %%ymm4, %%ymm4\n\t" \
        "vpmaddubsw %%ymm7, %%ymm6, %%ymm13\n\t" "vpmaddwd %%ymm14, %%ymm13, %%ymm13\n\t" \
        "vpaddd %%ymm13, %%ymm5, %%ymm5\n\t" \
        QOPS_PROBE_END \
        : [rounds] "+r"(rounds), [sink] "=r"(sink) : : QOPS_PROBE_CLOBBERS); \
    return sink; \
}
QOPS_PROBE_PLACED(qops_peer_probe_avx2, QOPS_PEER_PROBE_AVX2)

/* The peak probe (peak_gops): twelve independent vpdpbusd chains on register-
   resident operands, in assembly with fixed registers as the other probes, at
   four places in a line (QOPS_PROBE_PLACED).  The prefix {vex} (written
   %{vex%} in an asm string) asks the assembler for the VEX encoding, which a
   CPU without AVX-512 runs: the bare mnemonic on ymm may be given the EVEX one
   of AVX512-VNNI with VL. */
#define QOPS_PROBE_AVXVNNI(name, at) \
static long long name(long long rounds) { \
    int sink = 0; \
    if (rounds <= 0) return 0; \
    __asm__ volatile( \
        "mov $0x01010101, %%eax\n\t" \
        "vmovd %%eax, %%xmm12\n\t" \
        "vpbroadcastd %%xmm12, %%ymm12\n\t" \
        "vmovdqa %%ymm12, %%ymm13\n\t" \
        "vpxor %%xmm0, %%xmm0, %%xmm0\n\t" \
        "vpxor %%xmm1, %%xmm1, %%xmm1\n\t" \
        "vpxor %%xmm2, %%xmm2, %%xmm2\n\t" \
        "vpxor %%xmm3, %%xmm3, %%xmm3\n\t" \
        "vpxor %%xmm4, %%xmm4, %%xmm4\n\t" \
        "vpxor %%xmm5, %%xmm5, %%xmm5\n\t" \
        "vpxor %%xmm6, %%xmm6, %%xmm6\n\t" \
        "vpxor %%xmm7, %%xmm7, %%xmm7\n\t" \
        "vpxor %%xmm8, %%xmm8, %%xmm8\n\t" \
        "vpxor %%xmm9, %%xmm9, %%xmm9\n\t" \
        "vpxor %%xmm10, %%xmm10, %%xmm10\n\t" \
        "vpxor %%xmm11, %%xmm11, %%xmm11\n\t" \
        at "1:\n\t" \
        "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm0\n\t" \
        "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm1\n\t" \
        "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm2\n\t" \
        "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm3\n\t" \
        "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm4\n\t" \
        "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm5\n\t" \
        "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm6\n\t" \
        "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm7\n\t" \
        "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm8\n\t" \
        "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm9\n\t" \
        "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm10\n\t" \
        "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm11\n\t" \
        "dec %[rounds]\n\t" \
        "jnz 1b\n\t" \
        QOPS_PROBE_SUM_TWELVE("ymm") \
        QOPS_PROBE_TWELVE_OPERANDS); \
    return sink; \
}
QOPS_PROBE_PLACED(qops_probe_avxvnni, QOPS_PROBE_AVXVNNI)

/* The peak probe (peak_gops): twelve independent vpdpbusd chains, enough to
   cover the instruction's latency at full throughput, on register-resident
   operands (bytes of 1: each lane gains 4 a round).  In assembly with fixed
   registers: from intrinsics the compiler merged the twelve identical chains
   into one.  At four places in a line (QOPS_PROBE_PLACED). */
#define QOPS_PROBE_AVX512VNNI(name, at) \
static long long name(long long rounds) { \
    int sink = 0; \
    if (rounds <= 0) return 0; \
    __asm__ volatile( \
        "mov $0x01010101, %%eax\n\t" \
        "vpbroadcastd %%eax, %%zmm12\n\t" \
        "vpbroadcastd %%eax, %%zmm13\n\t" \
        "vpxord %%zmm0, %%zmm0, %%zmm0\n\t" \
        "vpxord %%zmm1, %%zmm1, %%zmm1\n\t" \
        "vpxord %%zmm2, %%zmm2, %%zmm2\n\t" \
        "vpxord %%zmm3, %%zmm3, %%zmm3\n\t" \
        "vpxord %%zmm4, %%zmm4, %%zmm4\n\t" \
        "vpxord %%zmm5, %%zmm5, %%zmm5\n\t" \
        "vpxord %%zmm6, %%zmm6, %%zmm6\n\t" \
        "vpxord %%zmm7, %%zmm7, %%zmm7\n\t" \
        "vpxord %%zmm8, %%zmm8, %%zmm8\n\t" \
        "vpxord %%zmm9, %%zmm9, %%zmm9\n\t" \
        "vpxord %%zmm10, %%zmm10, %%zmm10\n\t" \
        "vpxord %%zmm11, %%zmm11, %%zmm11\n\t" \
        at "1:\n\t" \
        "vpdpbusd %%zmm13, %%zmm12, %%zmm0\n\t" \
        "vpdpbusd %%zmm13, %%zmm12, %%zmm1\n\t" \
        "vpdpbusd %%zmm13, %%zmm12, %%zmm2\n\t" \
        "vpdpbusd %%zmm13, %%zmm12, %%zmm3\n\t" \
        "vpdpbusd %%zmm13, %%zmm12, %%zmm4\n\t" \
        "vpdpbusd %%zmm13, %%zmm12, %%zmm5\n\t" \
        "vpdpbusd %%zmm13, %%zmm12, %%zmm6\n\t" \
        "vpdpbusd %%zmm13, %%zmm12, %%zmm7\n\t" \
        "vpdpbusd %%zmm13, %%zmm12, %%zmm8\n\t" \
        "vpdpbusd %%zmm13, %%zmm12, %%zmm9\n\t" \
        "vpdpbusd %%zmm13, %%zmm12, %%zmm10\n\t" \
        "vpdpbusd %%zmm13, %%zmm12, %%zmm11\n\t" \
        "dec %[rounds]\n\t" \
        "jnz 1b\n\t" \
        QOPS_PROBE_SUM_TWELVE("zmm") \
        QOPS_PROBE_TWELVE_OPERANDS); \
    return sink; \
}
QOPS_PROBE_PLACED(qops_probe_avx512vnni, QOPS_PROBE_AVX512VNNI)

#else
#define QOPS_PROBE_STUB(name) \
static long long name(long long rounds, int placement) { \
    (void)rounds; (void)placement; \
    return 0; \
}
QOPS_PROBE_STUB(qops_probe_avx2)
QOPS_PROBE_STUB(qops_peer_probe_avx2)
QOPS_PROBE_STUB(qops_probe_avxvnni)
QOPS_PROBE_STUB(qops_probe_avx512vnni)
#endif

/* AMX intrinsics need GCC 11 or Clang 12. */
#if defined(__x86_64__) && defined(__clang__) && __clang_major__ >= 12
#define QOPS_PROBE_AMX 1
#elif defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define QOPS_PROBE_AMX 1
#else
#define QOPS_PROBE_AMX 0
#endif
/* The AMX probe: the micro-kernel's four tdpbusd per block on tiles loaded
   once, from bytes of 1 (each element of a sum tile gains 64 a round); eight
   tiles of 16 rows x 64 bytes (palette 1).  The buffer is static and filled
   before the loads: a local one, written only for the tile loads, was
   dropped by the compiler as a dead store.  Each tdpbusd takes 16 cycles:
   the loop's placement does not matter.  The process must hold the AMX
   tile state (qops_request_amx, include/qops_amx.h), as the AMX variant
   does once it loads. */
#if QOPS_PROBE_AMX
#include <immintrin.h>
static unsigned char qops_probe_ones[16 * 64];
__attribute__((target("amx-tile,amx-int8")))
static long long qops_probe_amx(long long rounds, int placement) {
    unsigned char config[64];
    int32_t sums[16 * 16];
    long long i;
    int t;
    (void)placement;
    memset(qops_probe_ones, 1, sizeof(qops_probe_ones));
    memset(config, 0, sizeof(config));
    config[0] = 1;
    for (t = 0; t < 8; t++) {
        config[16 + 2 * t] = 64;  /* bytes per row */
        config[48 + t] = 16;      /* rows */
    }
    _tile_loadconfig(config);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, qops_probe_ones, 64);
    _tile_loadd(5, qops_probe_ones, 64);
    _tile_loadd(6, qops_probe_ones, 64);
    _tile_loadd(7, qops_probe_ones, 64);
    for (i = 0; i < rounds; i++) {
        _tile_dpbusd(0, 4, 6);
        _tile_dpbusd(1, 4, 7);
        _tile_dpbusd(2, 5, 6);
        _tile_dpbusd(3, 5, 7);
    }
    _tile_stored(0, sums, 64);
    _tile_release();
    return sums[0];
}
#else
static long long qops_probe_amx(long long rounds, int placement) {
    (void)rounds; (void)placement;
    return 0;
}
#endif

#endif /* QOPS_PEAK_PROBES_H */
