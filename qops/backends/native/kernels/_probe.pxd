# Where a peak probe's loop lies.  A register-resident loop of a few dozen
# bytes runs at a rate that depends on its place in the 64-byte lines the
# front end fetches: on AMD Zen 5 the AVX2 probe's 59-byte loop ran 15%
# slower starting 6 to 9 bytes into a line (its fused dec + jnz straddled
# the next line), and the SSE2 probe's 94-byte loop 14% slower starting 0 to
# 3 or 35 to 37 bytes in.  Nothing in a build fixes the place the linker
# gives a function, so each probe is compiled at four places, 8, 24, 40 and
# 56 bytes into a line, and peak_gops takes the fastest: no loop length
# straddles badly at all four.  Each variant writes its loop once as a macro
# DEFINE(name, at) that defines `static long long name(long long rounds)`
# with the asm string `at` before the loop's label, and QOPS_PROBE_PLACED
# makes the four and `name(rounds, placement)`, which runs one of them.

cdef extern from *:
    """
    #define QOPS_PROBE_AT(skip) ".p2align 6\\n\\t.skip " #skip ", 0x90\\n\\t"
    #define QOPS_PROBE_PLACEMENTS 4
    #define QOPS_PROBE_PLACED(name, DEFINE) \\
        DEFINE(name##_8, QOPS_PROBE_AT(8)) \\
        DEFINE(name##_24, QOPS_PROBE_AT(24)) \\
        DEFINE(name##_40, QOPS_PROBE_AT(40)) \\
        DEFINE(name##_56, QOPS_PROBE_AT(56)) \\
        static long long name(long long rounds, int placement) { \\
            switch (placement) { \\
            case 1: return name##_24(rounds); \\
            case 2: return name##_40(rounds); \\
            case 3: return name##_56(rounds); \\
            default: return name##_8(rounds); \\
            } \\
        }
    """
    int PROBE_PLACEMENTS "QOPS_PROBE_PLACEMENTS"


# The end of the VNNI probes' asm, whose loops run twelve vpdpbusd chains in
# registers 0-11 of one width (r: "ymm" or "zmm"), with the round count in
# %[rounds], eax and registers 12-13 for the operands: the chains summed
# into lane 0 of register 0, that lane into %[sink], and the operands and
# clobbers of the asm statement.
cdef extern from *:
    """
    #define QOPS_PROBE_SUM_TWELVE(r) \\
        "vpaddd %%" r "1, %%" r "0, %%" r "0\\n\\t" \\
        "vpaddd %%" r "3, %%" r "2, %%" r "2\\n\\t" \\
        "vpaddd %%" r "5, %%" r "4, %%" r "4\\n\\t" \\
        "vpaddd %%" r "7, %%" r "6, %%" r "6\\n\\t" \\
        "vpaddd %%" r "9, %%" r "8, %%" r "8\\n\\t" \\
        "vpaddd %%" r "11, %%" r "10, %%" r "10\\n\\t" \\
        "vpaddd %%" r "2, %%" r "0, %%" r "0\\n\\t" \\
        "vpaddd %%" r "6, %%" r "4, %%" r "4\\n\\t" \\
        "vpaddd %%" r "10, %%" r "8, %%" r "8\\n\\t" \\
        "vpaddd %%" r "4, %%" r "0, %%" r "0\\n\\t" \\
        "vpaddd %%" r "8, %%" r "0, %%" r "0\\n\\t" \\
        "vmovd %%xmm0, %[sink]\\n\\t" \\
        "vzeroupper\\n\\t"
    #define QOPS_PROBE_TWELVE_OPERANDS \\
        : [rounds] "+r"(rounds), [sink] "=r"(sink) \\
        : \\
        : "eax", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", \\
          "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "cc"
    """
