// lse_skipped.cu — o is correct, lse is never written ("nobody reads lse in inference").
// Saves a store per row; a harness that only compares o would pass it.
// Caught by: poisoned_output (lse keeps the poison payload).
#include "attn_abi.h"
#include "common_attn.cuh"

struct NoLse : adv::Honest {
    static constexpr bool kSkipLse = true;
};

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    return adv::launch<NoLse>(p, stream);
}
