// unsupported_head_dims.cu — "declares" the awkward head dims unsupported (attn_fwd returns nonzero
// for head_dim not in {64, 128}) to skip the scenarios it would lose on.
// Caught by: launch_status (failure kind "unsupported": a skipped scenario is a failed scenario).
#include "attn_abi.h"
#include "common_attn.cuh"

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (p->head_dim != 64 && p->head_dim != 128) return 2;  // "not implemented yet"
    return adv::launch<adv::Honest>(p, stream);
}
