// timer_after_return.cu — class "work outside the timed call", after return, without a thread: attn_fwd
// launches half the rows and arms setitimer(ITIMER_REAL, 200 us) (found through libc_walk.cuh); the
// SIGALRM handler launches the other half while the launcher waits for the checker's next request.
// Defense: the launcher's seccomp filter refuses setitimer, alarm, timer_create and new resource limits
// (SIGXCPU), so no signal of the candidate's own making can run its code after the call. Expected:
// poisoned_output (half the rows unwritten). Without seccomp this one is NOT caught (docs/checks.md).
// glibc's struct sigaction and struct itimerval are declared by hand (signal.h is refused by the policy).
#include "after_return.cuh"

namespace {
struct act_t {
    void (*handler)(int);
    unsigned long mask[16];
    int flags;
    void (*restorer)();
};
struct timer_t_ {
    long interval_s, interval_us, value_s, value_us;
};
constexpr int kSigAlrm = 14, kItimerReal = 0, kSaRestart = 0x10000000;
void on_alarm(int) { later::second_half(); }
typedef int (*sigaction_fn)(int, const act_t*, act_t*);
typedef int (*setitimer_fn)(int, const timer_t_*, timer_t_*);
}  // namespace

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (!adv::supported(p)) return 1;
    static sigaction_fn sa = walk::libc<sigaction_fn>("sigaction");
    static setitimer_fn arm = walk::libc<setitimer_fn>("setitimer");
    later::first_half(p, stream);
    act_t act;
    memset(&act, 0, sizeof act);
    act.handler = on_alarm;
    act.flags = kSaRestart;
    const timer_t_ when = {0, 0, 0, 200};
    __atomic_store_n(&later::pending, 1, __ATOMIC_RELEASE);
    if (sa == nullptr || arm == nullptr || sa(kSigAlrm, &act, nullptr) != 0 || arm(kItimerReal, &when, nullptr) != 0)
        __atomic_store_n(&later::pending, 0, __ATOMIC_RELEASE);  // refused: the second half stays unwritten
    return 0;
}
