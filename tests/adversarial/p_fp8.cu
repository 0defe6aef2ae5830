// p_fp8.cu — precision below what the dtype allows: P is rounded to fp8 e4m3 (3 mantissa bits,
// values under 2^-9 flushed) before P@V, as an FP8 attention would do without per-block scaling.
// The row sum still uses fp32 P, so nothing looks broken. Caught by: reference_tolerance
// (FlashAttention's rule: error <= 2 x the original's error + floor, plus the per-dtype relative bound).
#define ADV_WITH_FP8
#include "attn_abi.h"
#include "common_attn.cuh"

struct PFp8 : adv::Honest {
    static constexpr bool kPFp8 = true;
};

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    return adv::launch<PFp8>(p, stream);
}
