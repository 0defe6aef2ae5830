// impossible_smem.cu — a fault: a launch that cannot happen. The shared-memory plan is
// (64 query rows + 2 x 256 keys) x head_dim x 2 bytes: 144 KiB at head_dim 128 (fine on an H100/H200,
// opt-in up to 227 KiB) but 288 KiB at head_dim 256. The cudaFuncSetAttribute error is ignored and
// attn_fwd returns 0 ("launched"), so only the runtime's launch status tells.
// Caught by: launch_status (failure kind "launch_error"; the scenario fails, the run carries on).
#include "attn_abi.h"
#include "common_attn.cuh"

template <class T>
static int launch_planned(const attn_fwd_params* p, cudaStream_t stream) {
    const size_t smem = (size_t)(64 + 2 * 256) * p->head_dim * 2;
    cudaFuncSetAttribute((const void*)adv::attn_rows<T, adv::Honest>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         (int)smem);  // error ignored
    adv::attn_rows<T, adv::Honest><<<adv::row_blocks(p), adv::kWarpsPerBlock * 32, smem, stream>>>(*p);
    return 0;
}

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (!adv::supported(p)) return 1;
    if (adv::row_blocks(p) == 0) return 0;
    return p->dtype == ATTN_DTYPE_BF16 ? launch_planned<__nv_bfloat16>(p, stream) : launch_planned<__half>(p, stream);
}
