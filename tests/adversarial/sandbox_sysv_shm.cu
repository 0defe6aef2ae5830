// sandbox_sysv_shm.cu — class "the candidate shares the checker's rights" (red team rt9): host code
// needs a SysV shared-memory segment (which outlives the process and any user process can attach: a
// channel out of the sandbox and between the candidate's two processes), found through libc_walk.cuh.
// Defense: seccomp refuses shmget/shmat, msgget, semget and POSIX message queues.
// Expected: incorrect, poisoned_output with the sandbox on; correct with ATTNQ_SANDBOX=off.
#include "attn_abi.h"
#include "common_attn.cuh"
#include "libc_walk.cuh"

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    typedef int (*shmget_fn)(int, size_t, int);
    typedef int (*shmctl_fn)(int, int, void*);
    static int ok = -1;
    if (ok < 0) {
        shmget_fn get = walk::libc<shmget_fn>("shmget");
        shmctl_fn ctl = walk::libc<shmctl_fn>("shmctl");
        const int id = get ? get(0 /* IPC_PRIVATE */, 4096, 01000 /* IPC_CREAT */ | 0600) : -1;
        ok = id >= 0;
        if (id >= 0 && ctl) ctl(id, 0 /* IPC_RMID */, nullptr);
    }
    return ok ? adv::launch<adv::Honest>(p, stream) : 0;
}
