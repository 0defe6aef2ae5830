/* libc_walk.cuh — a libc function found by walking libc's in-memory ELF from the address of an allowed
 * import (memcpy) back to its ELF header and reading .dynsym: no dlsym, no forbidden header or import,
 * no syscall instruction, so the static policy (source_policy, symbol_policy) sees nothing. The red team
 * of 2026-12-01 reached pthread_create, setitimer, open, shmget and sendto this way; the corpus files that
 * include it show that the run-time rules (seccomp, Landlock, the thread check) hold whatever the
 * library imports. Host code only. */
#pragma once
#include "attnq_libc_walk.h"  // rt_resolve: the one copy of the walk (next to the corpus: the policy refuses
                               // a header outside the candidate's folder and kernels/)

namespace walk {
template <class F>
inline F libc(const char* name) {
    return (F)rt_resolve(name);
}
}  // namespace walk
