/* Shown to a process by LD_PRELOAD (benchmarks/avx2_cpu.py): an x86-64 CPU
   with AVX2 and no AVX-512, no VNNI (AVX-512 or AVX-VNNI) and no AMX; or,
   with QOPS_SHOWN_CPU=sse4, one without AVX of any width; or, with
   QOPS_SHOWN_CPU=avxvnni, one with AVX2 and AVX-VNNI and no AVX-512 (an
   Intel client core since Alder Lake).

   Linux's CPUID faulting (arch_prctl ARCH_SET_CPUID) makes each cpuid
   instruction of the process raise SIGSEGV; the handler runs the real
   cpuid with faulting lifted for that one instruction, clears the feature
   bits above and steps past the instruction.  Everything that asks CPUID
   after the library loads (qops' variant choice, onnxruntime's MLAS,
   NumPy's dispatch) then picks its AVX2 code.  The C library has chosen its
   own routines by then; they are not under comparison.

   Where there is no CPUID faulting (AMD's cores, or a kernel without it),
   QOPS_CPUID_TRAP=1 says that cpuid_audit.c has replaced each cpuid
   instruction of the shared objects that choose code (onnxruntime's, NumPy's,
   qops') with UD0 (0f ff) as they loaded: the handler then answers SIGILL at
   a UD0 in the same way, with the real cpuid run here.

   The setting passes to threads and forked children, and ends at exec,
   where LD_PRELOAD sets it again.  A handler of the trapped signal that the
   process installs itself (Python's faulthandler, a compiler's crash
   report) is kept aside by the sigaction and signal below and called for
   every fault that is not a trapped cpuid. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>
#include <asm/prctl.h>
#include <sys/syscall.h>

/* The status with which the process stops where CPUID faulting is not
   available (benchmarks/avx2_cpu.py reports it). */
#define NO_CPUID_FAULTING 77

static void real_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t r[4]) {
    __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3])
                     : "a"(leaf), "c"(subleaf));
}

#define BIT(n) (1u << (n))

/* QOPS_SHOWN_CPU=sse4 (avx2_cpu.py --sse4) hides AVX, AVX2, FMA and F16C
   too: a CPU of SSE4.2 and no more, on which the peers run their SSE code
   and qops its portable variant. */
static int hide_avx;
/* QOPS_SHOWN_CPU=avxvnni (avx2_cpu.py --avxvnni) keeps AVX-VNNI. */
static int keep_avx_vnni;

static void mask(uint32_t leaf, uint32_t subleaf, uint32_t r[4]) {
    if (hide_avx && leaf == 1) {
        /* ECX: FMA, AVX, F16C */
        r[2] &= ~(BIT(12) | BIT(28) | BIT(29));
    }
    if (hide_avx && leaf == 7 && subleaf == 0) {
        /* EBX: AVX2 */
        r[1] &= ~BIT(5);
    }
    if (leaf == 7 && subleaf == 0) {
        /* EBX: AVX512F, DQ, IFMA, PF, ER, CD, BW, VL */
        r[1] &= ~(BIT(16) | BIT(17) | BIT(21) | BIT(26) | BIT(27) | BIT(28) | BIT(30) | BIT(31));
        /* ECX: AVX512_VBMI, VBMI2, VNNI, BITALG, VPOPCNTDQ */
        r[2] &= ~(BIT(1) | BIT(6) | BIT(11) | BIT(12) | BIT(14));
        /* EDX: AVX512_4VNNIW, 4FMAPS, VP2INTERSECT, AMX-BF16, AVX512_FP16, AMX-TILE, AMX-INT8 */
        r[3] &= ~(BIT(2) | BIT(3) | BIT(8) | BIT(22) | BIT(23) | BIT(24) | BIT(25));
    } else if (leaf == 7 && subleaf == 1) {
        /* EAX: AVX-VNNI, AVX512_BF16, AVX-IFMA; EDX: AVX-VNNI-INT8, AVX-NE-CONVERT */
        r[0] &= ~((keep_avx_vnni ? 0 : BIT(4)) | BIT(5) | BIT(23));
        r[3] &= ~(BIT(4) | BIT(5));
    }
}

typedef int (*sigaction_function)(int, const struct sigaction*, struct sigaction*);

static sigaction_function real_sigaction(void) {
    static sigaction_function found;
    if (!found)
        found = (sigaction_function)dlsym(RTLD_NEXT, "sigaction");
    return found;
}

/* SIGSEGV under CPUID faulting, SIGILL where cpuid_audit.c put UD0s. */
static int trapped_signal = SIGSEGV;
static int by_ud0;

/* The process's own action for trapped_signal, which the kernel never sees. */
static struct sigaction process_action;

static void pass_on(int signal_number, siginfo_t* info, void* context) {
    struct sigaction action = process_action;
    if (action.sa_flags & SA_SIGINFO) {
        action.sa_sigaction(signal_number, info, context);
    } else if (action.sa_handler == SIG_DFL || action.sa_handler == SIG_IGN) {
        /* The default action, when the instruction runs again (a fault
           cannot be ignored). */
        memset(&action, 0, sizeof action);
        action.sa_handler = SIG_DFL;
        real_sigaction()(signal_number, &action, NULL);
    } else {
        action.sa_handler(signal_number);
    }
}

static void on_fault(int signal_number, siginfo_t* info, void* context) {
    greg_t* registers = ((ucontext_t*)context)->uc_mcontext.gregs;
    const uint8_t* at = (const uint8_t*)registers[REG_RIP];
    uint32_t leaf, subleaf, r[4];
    int trapped = by_ud0 ? (info->si_code == ILL_ILLOPN || info->si_code == ILL_ILLOPC)
                               && at[0] == 0x0f && at[1] == 0xff
                         : info->si_code == SI_KERNEL && at[0] == 0x0f && at[1] == 0xa2;
    if (!trapped) {
        pass_on(signal_number, info, context);
        return;
    }
    leaf = (uint32_t)registers[REG_RAX];
    subleaf = (uint32_t)registers[REG_RCX];
    if (by_ud0) {
        real_cpuid(leaf, subleaf, r);
    } else {
        syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
        real_cpuid(leaf, subleaf, r);
        syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
    }
    mask(leaf, subleaf, r);
    registers[REG_RAX] = r[0];
    registers[REG_RBX] = r[1];
    registers[REG_RCX] = r[2];
    registers[REG_RDX] = r[3];
    registers[REG_RIP] += 2;
}

/* sigaction and signal as the process sees them: its action for the
   trapped signal is recorded, and the kernel keeps on_fault. */
int sigaction(int signal_number, const struct sigaction* action, struct sigaction* old) {
    if (signal_number != trapped_signal)
        return real_sigaction()(signal_number, action, old);
    if (old)
        *old = process_action;
    if (action)
        process_action = *action;
    return 0;
}

sighandler_t signal(int signal_number, sighandler_t handler) {
    struct sigaction action, old;
    memset(&action, 0, sizeof action);
    action.sa_handler = handler;
    action.sa_flags = SA_RESTART;
    if (sigaction(signal_number, &action, &old) != 0)
        return SIG_ERR;
    return old.sa_handler;
}

__attribute__((constructor)) static void start(void) {
    const char* shown = getenv("QOPS_SHOWN_CPU");
    struct sigaction action;
    hide_avx = shown != NULL && strcmp(shown, "sse4") == 0;
    keep_avx_vnni = shown != NULL && strcmp(shown, "avxvnni") == 0;
    by_ud0 = getenv("QOPS_CPUID_TRAP") != NULL && strcmp(getenv("QOPS_CPUID_TRAP"), "1") == 0;
    trapped_signal = by_ud0 ? SIGILL : SIGSEGV;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO;
    process_action.sa_handler = SIG_DFL;
    real_sigaction()(trapped_signal, &action, NULL);
    if (!by_ud0 && syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) != 0) {
        fprintf(stderr, "avx2_cpu: this kernel or CPU has no CPUID faulting\n");
        _exit(NO_CPUID_FAULTING);
    }
}
