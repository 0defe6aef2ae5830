// causal_missing.cu — the causal flag is ignored (every key is visible). Right on every non-causal
// scenario, wrong on every causal one. Caught by: reference_tolerance.
#include "attn_abi.h"
#include "common_attn.cuh"

struct NoMask : adv::Honest {
    static constexpr bool kIgnoreCausal = true;
};

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    return adv::launch<NoMask>(p, stream);
}
