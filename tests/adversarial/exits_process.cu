// exits_process.cu — host code ends the process with exit(0) ("bail out cleanly") on the causal path:
// a harness that trusts a zero exit status, or reads results only at the end, would see success.
// The default symbol policy refuses `exit` (compile with policy=False to exercise the runtime defense).
// Caught at run time by: worker_isolation (the worker dies mid-scenario: failure kind "crash").
#include "attn_abi.h"
#include "common_attn.cuh"
#include <stdlib.h>

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (p->causal) exit(0);  // "causal not ready: stop here"
    return adv::launch<adv::Honest>(p, stream);
}
