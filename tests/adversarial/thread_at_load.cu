// thread_at_load.cu — class "work outside the timed call", after return: a static constructor starts a
// worker thread (pthread_create through libc_walk.cuh) when the library loads; each attn_fwd launches
// half the rows and posts the other half as a job that the worker launches after the call returned.
// Defense: the library is loaded under the launcher's seccomp filter (no clone), so the worker never
// starts; without seccomp the thread check refuses the library at load (the verification ends with a
// VerifyError naming the thread). Expected: poisoned_output with the sandbox.
#include "after_return.cuh"

namespace {
later::usleep_fn nap;
int worker_started = 0;
void* worker(void*) {
    for (;;) {
        while (!__atomic_load_n(&later::pending, __ATOMIC_ACQUIRE)) nap(50);
        nap(100);
        later::second_half();
    }
    return nullptr;
}
__attribute__((constructor)) void start_worker() {
    later::create_fn create = walk::libc<later::create_fn>("pthread_create");
    nap = walk::libc<later::usleep_fn>("usleep");
    unsigned long t;
    worker_started = create != nullptr && nap != nullptr && create(&t, nullptr, worker, nullptr) == 0;
}
}  // namespace

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (!adv::supported(p)) return 1;
    later::first_half(p, stream);
    if (worker_started) __atomic_store_n(&later::pending, 1, __ATOMIC_RELEASE);
    return 0;
}
