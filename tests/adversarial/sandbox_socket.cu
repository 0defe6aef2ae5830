// sandbox_socket.cu — class "the candidate shares the checker's rights": its host code asks a helper
// on the network for the answer (here: it only needs an AF_INET socket to exist; with one it computes
// honestly, without one it writes nothing). The symbol policy refuses socket(); with the policy off
// the candidate process's seccomp filter (and Landlock's TCP rules) refuse it. Expected: incorrect,
// poisoned_output (nothing written) with the sandbox on; correct with ATTNQ_SANDBOX=off.
#include "attn_abi.h"
#include "common_attn.cuh"
#include <sys/socket.h>
#include <unistd.h>

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return 0;  // no oracle: nothing computed
    close(s);
    return adv::launch<adv::Honest>(p, stream);
}
