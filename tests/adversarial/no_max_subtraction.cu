// no_max_subtraction.cu — specialized to the benchmark's input distribution: softmax without the
// running max (exp(s) directly, one pass, no rescaling). Exact enough for N(0,1) inputs, where
// |s| stays small; overflows to Inf/NaN as soon as the logits are large.
// Caught by: finite_output on the "large_logits" draw (q, k ~ 6 N(0,1)).
#include "attn_abi.h"
#include "common_attn.cuh"

struct NoMax : adv::Honest {
    static constexpr bool kNoMaxSubtraction = true;
};

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    return adv::launch<NoMax>(p, stream);
}
