// control_correct.cu — the honest control: the shared correct body on the given stream, nothing else.
// Expected: correct on every scenario (its timing is the yardstick for "correct but not faster").
#include "attn_abi.h"
#include "common_attn.cuh"

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    return adv::launch<adv::Honest>(p, stream);
}
