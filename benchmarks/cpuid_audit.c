/* An LD_AUDIT library for benchmarks/avx2_cpu.py on machines without CPUID
   faulting (AMD's cores; kernels without ARCH_SET_CPUID).

   QOPS_CPUID_SITES names a file of lines "path<TAB>address address ...":
   each path a shared object that asks CPUID to choose its code (onnxruntime,
   NumPy, qops), each address (hexadecimal, as objdump gives it) the start of
   one cpuid instruction in it.  As each such object is mapped, before its
   relocations and constructors run, la_objopen writes UD0 (0f ff) over those
   two bytes.  avx2_cpu.c, preloaded with QOPS_CPUID_TRAP=1, answers the
   SIGILL of each UD0 with the real cpuid, its feature bits masked.

   The addresses come from a disassembly, not a scan for the bytes 0f a2,
   which also occur inside other instructions and in data; a site whose
   bytes are not 0f a2 is left alone and reported. */
#define _GNU_SOURCE
#include <link.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

unsigned int la_version(unsigned int version) {
    return version < LAV_CURRENT ? version : LAV_CURRENT;
}

static void patch(uintptr_t base, const char* addresses, const char* name) {
    long page = sysconf(_SC_PAGESIZE);
    const char* at = addresses;
    char* end;
    for (;;) {
        unsigned long long offset = strtoull(at, &end, 16);
        uint8_t* site;
        uintptr_t first;
        if (end == at)
            break;
        at = end;
        site = (uint8_t*)(base + offset);
        if (site[0] != 0x0f || site[1] != 0xa2) {
            fprintf(stderr, "cpuid_audit: %s+%llx is not a cpuid; left alone\n", name, offset);
            continue;
        }
        /* Text is mapped read and execute; the two bytes may cross a page. */
        first = (uintptr_t)site & ~(uintptr_t)(page - 1);
        if (mprotect((void*)first, (uintptr_t)site + 2 - first, PROT_READ | PROT_WRITE | PROT_EXEC)
                != 0) {
            perror("cpuid_audit: mprotect");
            continue;
        }
        site[1] = 0xff;
        mprotect((void*)first, (uintptr_t)site + 2 - first, PROT_READ | PROT_EXEC);
    }
}

unsigned int la_objopen(struct link_map* map, Lmid_t lmid, uintptr_t* cookie) {
    const char* sites = getenv("QOPS_CPUID_SITES");
    char resolved[PATH_MAX], line[1 << 16];
    FILE* file;
    (void)lmid;
    (void)cookie;
    if (sites == NULL || map->l_name == NULL || map->l_name[0] == '\0'
            || realpath(map->l_name, resolved) == NULL)
        return 0;
    file = fopen(sites, "r");
    if (file == NULL)
        return 0;
    while (fgets(line, sizeof line, file) != NULL) {
        char* tab = strchr(line, '\t');
        if (tab == NULL)
            continue;
        *tab = '\0';
        if (strcmp(line, resolved) == 0) {
            patch(map->l_addr, tab + 1, resolved);
            break;
        }
    }
    fclose(file);
    return 0;
}
