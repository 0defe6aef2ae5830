/* libc_walk.cuh — a libc function found by walking libc's in-memory ELF from the address of an allowed
 * import (memcpy) back to its ELF header and reading .dynsym: no dlsym, no forbidden header or import,
 * no syscall instruction, so the static policy (source_policy, symbol_policy) sees nothing. The red team
 * of 2026-12-01 reached pthread_create, setitimer, open, shmget and sendto this way; the corpus files that
 * include it show that the run-time rules (seccomp, Landlock, the thread check) hold whatever the
 * library imports. Host code only. */
#pragma once
#include <elf.h>
#include <stdint.h>
#include <string.h>

namespace walk {
inline bool same(const char* a, const char* b) {
    while (*a && *a == *b) { ++a; ++b; }
    return *a == *b;
}

template <class F>
inline F libc(const char* name) {
    void* (*volatile anchor)(void*, const void*, size_t) = memcpy;
    uintptr_t pg = (uintptr_t)anchor & ~(uintptr_t)4095;
    for (int n = 0; n < 100000; ++n, pg -= 4096) {
        const Elf64_Ehdr* eh = (const Elf64_Ehdr*)pg;
        if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_type != ET_DYN) continue;
        const Elf64_Phdr* ph = (const Elf64_Phdr*)(pg + eh->e_phoff);
        const Elf64_Dyn* dyn = nullptr;
        for (int i = 0; i < eh->e_phnum; ++i)
            if (ph[i].p_type == PT_DYNAMIC) dyn = (const Elf64_Dyn*)(pg + ph[i].p_vaddr);
        if (!dyn) return nullptr;
        const Elf64_Sym* sym = nullptr;
        const char* str = nullptr;
        for (; dyn->d_tag != DT_NULL; ++dyn) {
            uintptr_t v = dyn->d_un.d_ptr;
            if (v < pg) v += pg;
            if (dyn->d_tag == DT_SYMTAB) sym = (const Elf64_Sym*)v;
            if (dyn->d_tag == DT_STRTAB) str = (const char*)v;
        }
        if (!sym || !str) return nullptr;
        for (const Elf64_Sym* s = sym; (const char*)s < str; ++s)
            if (s->st_value && same(str + s->st_name, name)) return (F)(pg + s->st_value);
        return nullptr;
    }
    return nullptr;
}
}  // namespace walk
