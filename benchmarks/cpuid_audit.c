/* An LD_AUDIT library for benchmarks/avx2_cpu.py on machines without CPUID
   faulting (AMD's cores; kernels without ARCH_SET_CPUID).

   QOPS_CPUID_SITES names a file of lines "path<TAB>address address ...":
   each path a shared object that asks CPUID to choose its code (onnxruntime,
   NumPy and the libraries beside it, qops), each address (hexadecimal, as
   objdump gives it) the start of one cpuid instruction in it.  As each such
   object is mapped, before its relocations and constructors run, la_objopen
   writes UD0 (0f ff) over those two bytes.  avx2_cpu.c, preloaded with
   QOPS_CPUID_TRAP=1, answers the SIGILL of each UD0 with the real cpuid,
   its feature bits masked.

   The addresses come from a disassembly, not a scan for the bytes 0f a2,
   which also occur inside other instructions and in data; a site outside
   the object's executable segments, or whose bytes are not 0f a2, is left
   alone and reported.  The file is read once, when the library loads: the
   tool may rewrite it for another run while this process still loads
   objects. */
#define _GNU_SOURCE
#include <elf.h>
#include <link.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The sites file, whole; NULL where there is none. */
static char* sites;

unsigned int la_version(unsigned int version) {
    const char* path = getenv("QOPS_CPUID_SITES");
    FILE* file = path ? fopen(path, "r") : NULL;
    if (file == NULL) {
        fprintf(stderr, "cpuid_audit: no sites file (QOPS_CPUID_SITES); nothing is hidden\n");
    } else {
        long size;
        fseek(file, 0, SEEK_END);
        size = ftell(file);
        fseek(file, 0, SEEK_SET);
        sites = size >= 0 ? malloc((size_t)size + 1) : NULL;
        if (sites != NULL)
            sites[fread(sites, 1, (size_t)size, file)] = '\0';
        fclose(file);
    }
    return version < LAV_CURRENT ? version : LAV_CURRENT;
}

/* Whether [site, site + 2) lies in one of the object's executable PT_LOAD
   segments, read from its program headers. */
static int in_text(const struct link_map* map, uintptr_t site) {
    const ElfW(Ehdr)* header = NULL;
    const ElfW(Phdr)* program;
    int i;
    /* The ELF header is mapped at the start of the first PT_LOAD, which is
       at address 0 of a shared object; a main program's is not looked for. */
    if (map->l_addr == 0)
        return 0;
    header = (const ElfW(Ehdr)*)map->l_addr;
    if (memcmp(header->e_ident, ELFMAG, SELFMAG) != 0)
        return 0;
    program = (const ElfW(Phdr)*)(map->l_addr + header->e_phoff);
    for (i = 0; i < header->e_phnum; i++) {
        uintptr_t start = map->l_addr + program[i].p_vaddr;
        if (program[i].p_type == PT_LOAD && (program[i].p_flags & PF_X)
                && site >= start && site + 2 <= start + program[i].p_filesz)
            return 1;
    }
    return 0;
}

static void patch(const struct link_map* map, const char* addresses, const char* end_of_line,
                  const char* name) {
    long page = sysconf(_SC_PAGESIZE);
    const char* at = addresses;
    char* end;
    while (at < end_of_line) {
        unsigned long long offset = strtoull(at, &end, 16);
        uint8_t* site;
        uintptr_t first;
        size_t length;
        if (end == at)
            break;
        at = end;
        site = (uint8_t*)(map->l_addr + offset);
        if (!in_text(map, (uintptr_t)site) || site[0] != 0x0f || site[1] != 0xa2) {
            fprintf(stderr, "cpuid_audit: %s+%llx is not a cpuid; left alone\n", name, offset);
            continue;
        }
        /* Text is mapped read and execute; nothing in the object runs yet,
           so its pages need not be executable while written.  The two
           bytes may cross a page. */
        first = (uintptr_t)site & ~(uintptr_t)(page - 1);
        length = (uintptr_t)site + 2 - first;
        if (mprotect((void*)first, length, PROT_READ | PROT_WRITE) != 0) {
            perror("cpuid_audit: mprotect");
            continue;
        }
        site[1] = 0xff;
        if (mprotect((void*)first, length, PROT_READ | PROT_EXEC) != 0) {
            perror("cpuid_audit: mprotect");
            abort();
        }
    }
}

unsigned int la_objopen(struct link_map* map, Lmid_t lmid, uintptr_t* cookie) {
    /* Static: ld.so holds its load lock here, and a thread's stack may be small. */
    static char resolved[PATH_MAX];
    const char* line;
    size_t length;
    (void)lmid;
    (void)cookie;
    if (sites == NULL || map->l_name == NULL || map->l_name[0] == '\0'
            || realpath(map->l_name, resolved) == NULL)
        return 0;
    length = strlen(resolved);
    for (line = sites; *line != '\0';) {
        const char* end_of_line = strchr(line, '\n');
        if (end_of_line == NULL)
            end_of_line = line + strlen(line);
        if ((size_t)(end_of_line - line) > length && strncmp(line, resolved, length) == 0
                && line[length] == '\t') {
            patch(map, line + length + 1, end_of_line, resolved);
            break;
        }
        line = *end_of_line ? end_of_line + 1 : end_of_line;
    }
    return 0;
}
