/*
 * attn_naive.cu — the smallest obviously-correct attnq candidate (the worked example of
 * kernels/README.md). Slow on purpose: scalar fp32 math, no tensor cores, no shared memory.
 *
 * Work split: one thread block of 4 warps per (query-row tile of 4 rows, head, batch); one warp per
 * query row i. Lane t holds columns c = t, t + 32, ..., of q_i and of the output accumulator, so any
 * head_dim up to 256 works. The keys are visited one by one with an online softmax:
 *   after key j:  m = max_{j' <= j visible} s_j'        (natural-log units; -inf before any key)
 *                 l = sum_{j' <= j visible} exp(s_j' - m)
 *                 acc = sum_{j' <= j visible} exp(s_j' - m) * v_j'
 * and at the end o = acc / l, lse = m + log(l); a row that saw no key gets o = 0, lse = +inf.
 *
 * Build and check it like any candidate:
 *   attnq compile kernels/examples/attn_naive.cu --json
 *   attnq verify kernels/examples/attn_naive.cu --suite quick
 */
#include "attn_abi.h"  // the ABI: attn_fwd_params, ATTN_DTYPE_*, ATTN_ABI_VERSION (kernels/attn_abi.h)

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <math.h>

namespace {

constexpr int kRowsPerBlock = 4;  // one warp per query row
constexpr int kMaxPerLane = 8;    // 8 * 32 lanes = head_dim up to 256

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void store(__half* dst, float x) { *dst = __float2half_rn(x); }
__device__ __forceinline__ void store(__nv_bfloat16* dst, float x) { *dst = __float2bfloat16_rn(x); }

__device__ __forceinline__ float warp_sum(float x) {
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

template <typename T>
__global__ void __launch_bounds__(kRowsPerBlock * 32) attn_naive_kernel(const attn_fwd_params p) {
    const int lane = threadIdx.x % 32;
    const int i = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;  // query row of this warp
    const int h = blockIdx.y;                                      // query head
    const int b = blockIdx.z;                                      // batch index
    if (i >= p.seqlen_q) return;  // the whole warp leaves together (no block-wide sync below)
    const int h_kv = h / (p.num_heads_q / p.num_heads_kv);        // GQA / MQA head mapping
    const int D = p.head_dim;

    // Strides are in elements; the last dimension is contiguous.
    const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + i * p.q_row_stride + h * p.q_head_stride;
    const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + h_kv * p.k_head_stride;
    const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + h_kv * p.v_head_stride;
    T* o = static_cast<T*>(p.o) + b * p.o_batch_stride + i * p.o_row_stride + h * p.o_head_stride;

    float qr[kMaxPerLane];
    float acc[kMaxPerLane];
#pragma unroll
    for (int t = 0; t < kMaxPerLane; ++t) {
        const int c = lane + 32 * t;
        qr[t] = c < D ? to_float(q[c]) : 0.0f;
        acc[t] = 0.0f;
    }

    // Bottom-right causal: query i sees key j iff j <= i + seqlen_k - seqlen_q (maybe none at all).
    const int last_key = p.causal ? min(p.seqlen_k - 1, i + p.seqlen_k - p.seqlen_q) : p.seqlen_k - 1;
    float m = -INFINITY;
    float l = 0.0f;
    for (int j = 0; j <= last_key; ++j) {
        const T* kj = k + j * p.k_row_stride;
        const T* vj = v + j * p.v_row_stride;
        float dot = 0.0f;
#pragma unroll
        for (int t = 0; t < kMaxPerLane; ++t) {
            const int c = lane + 32 * t;
            if (c < D) dot += qr[t] * to_float(kj[c]);
        }
        const float s = warp_sum(dot) * p.softmax_scale;  // same value in every lane
        const float m_new = fmaxf(m, s);                  // finite: s is finite
        const float alpha = expf(m - m_new);               // 0 for the first key (m = -inf)
        const float pj = expf(s - m_new);
        l = l * alpha + pj;
#pragma unroll
        for (int t = 0; t < kMaxPerLane; ++t) {
            const int c = lane + 32 * t;
            if (c < D) acc[t] = acc[t] * alpha + pj * to_float(vj[c]);
        }
        m = m_new;
    }

    // l >= 1 when any key was visible (the max key contributes exp(0)); l == 0 means an empty row.
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int t = 0; t < kMaxPerLane; ++t) {
        const int c = lane + 32 * t;
        if (c < D) store(o + c, acc[t] * inv_l);
    }
    if (lane == 0) {
        p.lse[(static_cast<int64_t>(b) * p.num_heads_q + h) * p.seqlen_q + i] = l > 0.0f ? m + logf(l) : INFINITY;
    }
}

template <typename T>
int launch(const attn_fwd_params* p, cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>((p->seqlen_q + kRowsPerBlock - 1) / kRowsPerBlock),
                    static_cast<unsigned>(p->num_heads_q), static_cast<unsigned>(p->batch));
    attn_naive_kernel<T><<<grid, kRowsPerBlock * 32, 0, stream>>>(*p);
    return cudaGetLastError() == cudaSuccess ? 0 : 3;  // nonzero: the launch failed
}

}  // namespace

// The one required entry point (C linkage). 0 = launched; nonzero = unsupported configuration.
// attn_fwd_workspace_bytes is optional and omitted here: this kernel needs no scratch memory.
extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (p == nullptr || p->abi_version != ATTN_ABI_VERSION) return 2;
    if (p->head_dim < 1 || p->head_dim > 32 * kMaxPerLane) return 1;  // unsupported head_dim
    if (p->batch < 0 || p->seqlen_q < 0 || p->seqlen_k < 0 || p->num_heads_q < 1 || p->num_heads_kv < 1 ||
        p->num_heads_q % p->num_heads_kv != 0 || p->num_heads_q > 65535 || p->batch > 65535)
        return 2;
    if (p->batch == 0 || p->seqlen_q == 0) return 0;  // nothing to write
    if (p->dtype == ATTN_DTYPE_BF16) return launch<__nv_bfloat16>(p, stream);
    if (p->dtype == ATTN_DTYPE_FP16) return launch<__half>(p, stream);
    return 1;  // unsupported dtype
}
