// thread_after_return.cu — class "work outside the timed call", after return (red team rt8): attn_fwd
// launches half the query rows and starts a thread (pthread_create found through libc's in-memory ELF:
// libc_walk.cuh, so no forbidden import) that launches the other half ~100 us after attn_fwd returned,
// while the checker times the original. Defense: the launcher loads the library under a seccomp filter
// that refuses clone (no thread, no process) after its own CUDA warm-up; where seccomp is missing, the
// launcher's /proc/self/task check after the call names the live thread (work_after_return).
// Expected: poisoned_output (half the rows unwritten) with the sandbox; work_after_return without it.
#include "after_return.cuh"

namespace {
later::usleep_fn nap;
void* after(void*) {
    nap(100);
    later::second_half();
    return nullptr;
}
}  // namespace

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (!adv::supported(p)) return 1;
    static later::create_fn create = walk::libc<later::create_fn>("pthread_create");
    nap = walk::libc<later::usleep_fn>("usleep");
    later::first_half(p, stream);
    unsigned long t;
    __atomic_store_n(&later::pending, 1, __ATOMIC_RELEASE);
    if (create == nullptr || nap == nullptr || create(&t, nullptr, after, nullptr) != 0)
        __atomic_store_n(&later::pending, 0, __ATOMIC_RELEASE);  // refused: the second half stays unwritten
    return 0;
}
