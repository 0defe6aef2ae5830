// A tiny candidate with compile-time knobs, for the evolve tests (CPU: real nvcc builds, no GPU).
// TILE sets the static shared memory per block (4 * TILE bytes; above 227 KiB ptxas refuses it),
// UNROLL the unrolling of the copy loop, BLOCK the threads per block.
#include "attn_abi.h"

#define BLOCK 128
#define TILE 256
#define UNROLL 2

__global__ void __launch_bounds__(BLOCK) fill_kernel(float* o, int n, float v) {
    __shared__ float buf[TILE];
    for (int i = threadIdx.x; i < TILE; i += BLOCK) buf[i] = v * i;
    __syncthreads();
    int base = (blockIdx.x * BLOCK + threadIdx.x) * UNROLL;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        int i = base + u;
        if (i < n) o[i] = buf[i % TILE] + buf[(i * 7) % TILE];
    }
}

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    int n = p->batch * p->seqlen_q;
    int per_block = BLOCK * UNROLL;
    fill_kernel<<<(n + per_block - 1) / per_block, BLOCK, 0, stream>>>(static_cast<float*>(p->o), n,
                                                                       p->softmax_scale);
    return cudaPeekAtLastError() == cudaSuccess ? 0 : 1;
}
