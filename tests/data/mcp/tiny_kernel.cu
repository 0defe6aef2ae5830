// A tiny valid attnq candidate for the MCP tests: it compiles fast, exports the ABI and declines every
// configuration (attn_fwd returns nonzero = unsupported). Its kernel only zeroes o.
#include "attn_abi.h"

__global__ void tiny_zero(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 0.0f;
}

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    (void)p;
    (void)stream;
    return 1;
}
