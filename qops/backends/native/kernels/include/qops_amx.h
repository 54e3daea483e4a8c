/* The AMX variant's request for the tile state. */
#ifndef QOPS_AMX_H
#define QOPS_AMX_H

#include <unistd.h>
#include <sys/syscall.h>

/* Linux hands a process the AMX tile state only when asked:
   arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA). */
static int qops_request_amx(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    return 0;
#endif
}

#endif /* QOPS_AMX_H */
