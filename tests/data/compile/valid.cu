// A small valid candidate: one kernel with static shared memory, one with a local array.
#include "attn_abi.h"
#include <cuda_bf16.h>
#include <cub/block/block_reduce.cuh>  // CUB is allowed

__global__ void scale_kernel(const float* __restrict__ in, float* __restrict__ out, int n, float s) {
    __shared__ float tile[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? in[i] : 0.f;
    __syncthreads();
    if (i < n) out[i] = expf(tile[threadIdx.x] * s);
}

// A runtime-indexed local array lives on the stack (ptxas reports a stack frame).
template <int N>
__global__ void local_array_kernel(float* x, int stride, int idx) {
    float loc[N];
    for (int i = 0; i < N; ++i) loc[i] = x[i * stride + threadIdx.x];
    for (int i = 0; i < N; ++i) loc[(i * idx) % N] += loc[i];
    x[threadIdx.x] = loc[idx % N];
}

// 64 live values under a 32-register cap (1024 threads x 2 blocks): ptxas spills.
__global__ void __launch_bounds__(1024, 2) spill_kernel(const float* __restrict__ x, float* __restrict__ y) {
    float v[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) v[i] = x[i * 1024 + threadIdx.x];
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < 64; ++i) acc = acc * v[63 - i] + v[i];
#pragma unroll
    for (int i = 0; i < 64; ++i) y[i * 1024 + threadIdx.x] = v[i] * acc;
}

// Block-wide sum through CUB.
__global__ void block_sum_kernel(const float* x, float* out) {
    using Reduce = cub::BlockReduce<float, 128>;
    __shared__ typename Reduce::TempStorage tmp;
    float s = Reduce(tmp).Sum(x[blockIdx.x * 128 + threadIdx.x]);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    cudaFuncSetAttribute(scale_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 0);
    int n = p->batch * p->seqlen_q;
    scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(static_cast<const float*>(p->q), static_cast<float*>(p->o), n,
                                                      p->softmax_scale);
    local_array_kernel<64><<<1, 32, 0, stream>>>(static_cast<float*>(p->o), p->head_dim, p->num_heads_q);
    spill_kernel<<<1, 1024, 0, stream>>>(static_cast<const float*>(p->k), static_cast<float*>(p->o));
    block_sum_kernel<<<1, 128, 0, stream>>>(static_cast<const float*>(p->v), p->lse);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" size_t attn_fwd_workspace_bytes(const attn_fwd_params*) { return 0; }
