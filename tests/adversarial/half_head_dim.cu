// half_head_dim.cu — precision/work dropped: q.k is computed over the first head_dim/2 dimensions only
// (half the QK^T FLOPs). Output stays finite and plausible. Caught by: reference_tolerance.
#include "attn_abi.h"
#include "common_attn.cuh"

struct HalfDims : adv::Honest {
    static constexpr bool kHalfHeadDimQK = true;
};

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    return adv::launch<HalfDims>(p, stream);
}
