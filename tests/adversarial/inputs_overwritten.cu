// inputs_overwritten.cu — writes into q: pre-scales Q in place by softmax_scale once per q buffer
// ("saves a multiply per score"), casting away the const, then runs with softmax_scale = 1. A
// static host table remembers the scaled buffer so a second call on it does not scale twice, which
// keeps repeated calls bit-identical (it survives a determinism re-run). The harness's q is changed.
// Caught by: input_integrity (q, k, v must be bit-identical after the call).
#include "attn_abi.h"
#include "common_attn.cuh"

namespace {
const void* scaled_q = nullptr;

template <class T>
__global__ void scale_in_place(T* q, long long n, float s) {
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x)
        q[e] = adv::from_f<T>(adv::to_f(q[e]) * s);
}
}  // namespace

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (!adv::supported(p)) return 1;
    if (p->q != scaled_q) {  // q is contiguous [b, sq, hq, d] under the harness
        const long long n = (long long)p->batch * p->seqlen_q * p->num_heads_q * p->head_dim;
        const unsigned blocks = (unsigned)min((n + 255) / 256, 4096LL);
        if (blocks > 0) {
            if (p->dtype == ATTN_DTYPE_BF16)
                scale_in_place<<<blocks, 256, 0, stream>>>((__nv_bfloat16*)p->q, n, p->softmax_scale);
            else
                scale_in_place<<<blocks, 256, 0, stream>>>((__half*)p->q, n, p->softmax_scale);
        }
        scaled_q = p->q;
    }
    attn_fwd_params scaled = *p;
    scaled.softmax_scale = 1.0f;
    return adv::launch<adv::Honest>(&scaled, stream);
}
