/* attnq_libc_walk.h — resolve a libc function by walking libc's in-memory ELF from the address of an
 * allowed import (memcpy) back to libc's ELF header and reading its .dynsym: no dlsym, no forbidden import,
 * no syscall instruction in the library, so the static symbol policy sees nothing (red team of 2026-12-01).
 * The host kernels use it to show that the run-time rules (seccomp, Landlock, the thread check) hold
 * whatever the library imports. */
#include <elf.h>
#include <stdint.h>
#include <string.h>
static int rt_streq(const char* a, const char* b) { while (*a && *a == *b) { ++a; ++b; } return *a == *b; }
static void* rt_resolve(const char* want) {
    volatile void* (*anchor)(void*, const void*, size_t) = (volatile void* (*)(void*, const void*, size_t))memcpy;
    uintptr_t pg = (uintptr_t)anchor & ~(uintptr_t)4095;
    for (int n = 0; n < 100000; ++n, pg -= 4096) {
        const Elf64_Ehdr* eh = (const Elf64_Ehdr*)pg;
        if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_type != ET_DYN) continue;
        const Elf64_Phdr* ph = (const Elf64_Phdr*)(pg + eh->e_phoff);
        const Elf64_Dyn* dyn = NULL;
        for (int i = 0; i < eh->e_phnum; ++i) if (ph[i].p_type == PT_DYNAMIC) dyn = (const Elf64_Dyn*)(pg + ph[i].p_vaddr);
        if (!dyn) return NULL;
        const Elf64_Sym* sym = NULL; const char* str = NULL;
        for (; dyn->d_tag != DT_NULL; ++dyn) {
            uintptr_t v = dyn->d_un.d_ptr; if (v < pg) v += pg;
            if (dyn->d_tag == DT_SYMTAB) sym = (const Elf64_Sym*)v;
            if (dyn->d_tag == DT_STRTAB) str = (const char*)v;
        }
        if (!sym || !str) return NULL;
        for (const Elf64_Sym* s = sym; (const char*)s < str; ++s)
            if (s->st_value && rt_streq(str + s->st_name, want)) return (void*)(pg + s->st_value);
        return NULL;
    }
    return NULL;
}
