// abort_on_head_dim.cu — a fault: host code aborts the process. A host-side assert on the tiling
// assumption (head_dim a multiple of 64) fires at head_dim 96 and calls abort() inside the worker.
// abort/__assert_fail pass the symbol policy on purpose (a crash is a fault the verifier survives).
// Caught by: worker_isolation (failure kind "crash"; a fresh worker runs the next scenario).
#include "attn_abi.h"
#include "common_attn.cuh"
#include <assert.h>

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    assert(p->head_dim % 64 == 0 && "tiles assume head_dim is a multiple of 64");
    return adv::launch<adv::Honest>(p, stream);
}
