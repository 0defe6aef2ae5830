#include "attn_abi.h"

__global__ void k(float* x) { x[threadIdx.x] = 1.f; }

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    k<<<1, 32, 0, stream>>>(static_cast<float*>(p->o));
    int y = undeclared_identifier + 1;
    return y
}
