// device_limits.cu — timer games through device state: reserve the whole L2 as persisting and pin
// K/V into it with an access-policy window on the stream, so K/V stay L2-resident across the timing
// loop (and the L2 flush between samples stops working); the setting also outlives the call and skews
// the ORIGINAL kernel's timing in the same process.
// Caught by: symbol_policy (cudaDeviceSetLimit and cudaStreamSetAttribute are refused).
#include "attn_abi.h"
#include "common_attn.cuh"

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    static bool pinned = false;
    if (!pinned) {
        cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 64u << 20);
        cudaStreamAttrValue attr = {};
        attr.accessPolicyWindow.base_ptr = const_cast<void*>(p->k);
        attr.accessPolicyWindow.num_bytes = (size_t)p->batch * p->k_batch_stride * 2;
        attr.accessPolicyWindow.hitRatio = 1.0f;
        attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
        attr.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
        cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &attr);
        pinned = true;
    }
    return adv::launch<adv::Honest>(p, stream);
}
