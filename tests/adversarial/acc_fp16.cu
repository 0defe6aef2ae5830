// acc_fp16.cu — the o accumulator and the softmax row sum kept in fp16 (HFMA2-style accumulation for
// speed). With thousands of keys the row sum stops growing (fp16 ulp at 256 is 0.25), so the output
// drifts far beyond bf16/fp16 rounding. Caught by: reference_tolerance (seqlen_k = 4096).
#include "attn_abi.h"
#include "common_attn.cuh"

struct AccFp16 : adv::Honest {
    static constexpr bool kAccFp16 = true;
};

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    return adv::launch<AccFp16>(p, stream);
}
