// ghost_thread.cu: the honest body, plus a host thread started through pthread_create found by walking
// libc's in-memory ELF (no forbidden import, no forbidden header, no syscall instruction). The thread is
// where a cheat would keep working after attn_fwd returned; here it only shows the policy lets it through.
#include "attn_abi.h"
#include "../common_attn.cuh"
#include "resolve.h"

typedef int (*create_fn)(unsigned long*, const void*, void* (*)(void*), void*);
static volatile int ghost_ran = 0;
static void* ghost(void*) { ghost_ran = 1; return nullptr; }

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    static create_fn cr = (create_fn)rt_resolve("pthread_create");
    static unsigned long th;
    if (cr) cr(&th, nullptr, ghost, nullptr);
    return adv::launch<adv::Honest>(p, stream);
}
