// sandbox_spawn.cu — class "the candidate shares the checker's rights": its host code starts a process
// (the answer would come from another program; here fork + exit stands in for it). The symbol policy
// refuses fork(); with the policy off the candidate process's seccomp filter refuses it. Expected:
// incorrect, poisoned_output with the sandbox on; correct with ATTNQ_SANDBOX=off.
#include "attn_abi.h"
#include "common_attn.cuh"
#include <sys/wait.h>
#include <unistd.h>

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    const pid_t pid = fork();
    if (pid < 0) return 0;  // no helper process: nothing computed
    if (pid == 0) _exit(0);
    waitpid(pid, nullptr, 0);
    return adv::launch<adv::Honest>(p, stream);
}
