/*
 * common_attn.cuh — one small, CORRECT attention forward body shared by the adversarial corpus.
 *
 * Each corpus file is a complete candidate (includes attn_abi.h, exports extern "C" attn_fwd); the
 * cheats that must be "correct otherwise" run this body for their honest work, and the fault/bug
 * kernels instantiate it with ONE flaw switched on (a Cfg struct of constexpr knobs), so the compiled
 * code is exactly the buggy kernel and nothing else differs from the honest control.
 *
 * Design: one warp per query row (b, h, i); lane l owns head dims l, l+32, ... (head_dim <= 256, any
 * multiple of 8); fp32 online softmax in the exp2 domain; keys in groups of 4 for ILP. Semantics are
 * kernels/attn_abi.h: bottom-right causal, GQA (kv head = h / (num_heads_q / num_heads_kv)), lse in
 * natural log, a row that sees no key has o = 0 and lse = +INFINITY. Slow (no tensor cores) but exact.
 */
#pragma once
#include "attn_abi.h"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#ifdef ADV_WITH_FP8
#include <cuda_fp8.h>
#endif
#include <math.h>

namespace adv {

/* The honest configuration; a corpus file derives from it and flips one knob. */
struct Honest {
    static constexpr bool kIgnoreCausal = false;  // mask never applied
    static constexpr bool kCausalTopLeft = false; // j <= i (same as bottom-right only when seqlen_q == seqlen_k)
    static constexpr int kDropPartialKeyTile = 0; // >0: keys past floor(seqlen_k / tile) * tile are skipped
    static constexpr bool kHalfHeadDimQK = false; // q.k over the first head_dim/2 dims only
    static constexpr bool kPFp8 = false;          // P rounded to e4m3 before P@V
    static constexpr bool kAccFp16 = false;       // o accumulator and row sum rounded to fp16 every step
    static constexpr bool kNoMaxSubtraction = false; // exp(s) without the running max
    static constexpr bool kEmptyRowDivides = false;  // o = acc / l without the l == 0 guard (0/0 = NaN)
    static constexpr bool kSkipLse = false;       // lse never written
};

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxPerLane = 8;  // head_dim <= 256
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <class T> __device__ __forceinline__ float to_f(T x);
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_f<__half>(__half x) { return __half2float(x); }
template <class T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half(x); }

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

/* Number of keys query row i sees, with the configured (possibly wrong) masking. */
template <class Cfg>
__device__ __forceinline__ int visible_keys(const attn_fwd_params& p, int i) {
    int n = p.seqlen_k;
    if (p.causal && !Cfg::kIgnoreCausal) {
        long long lim = Cfg::kCausalTopLeft ? (long long)i + 1 : (long long)i + p.seqlen_k - p.seqlen_q + 1;
        n = (int)max(0LL, min((long long)p.seqlen_k, lim));
    }
    if constexpr (Cfg::kDropPartialKeyTile > 0) {
        const int full = (p.seqlen_k / Cfg::kDropPartialKeyTile) * Cfg::kDropPartialKeyTile;
        n = min(n, full);
    }
    return n;
}

/* o and lse of one query row, computed by one whole warp (all 32 lanes call it with the same row).
 * row = (b * num_heads_q + h) * seqlen_q + i, the flat index of lse [batch, num_heads_q, seqlen_q]. */
template <class T, class Cfg>
__device__ __forceinline__ void row_attention(const attn_fwd_params& p, long long row, int lane) {
#ifndef ADV_WITH_FP8
    static_assert(!Cfg::kPFp8, "define ADV_WITH_FP8 before including common_attn.cuh");
#endif
    const int i = (int)(row % p.seqlen_q);
    const int h = (int)((row / p.seqlen_q) % p.num_heads_q);
    const int b = (int)(row / ((long long)p.seqlen_q * p.num_heads_q));
    const int hk = h / (p.num_heads_q / p.num_heads_kv);
    const int d = p.head_dim;
    const int d_qk = Cfg::kHalfHeadDimQK ? d / 2 : d;

    const T* q = (const T*)p.q + b * p.q_batch_stride + (long long)i * p.q_row_stride + h * p.q_head_stride;
    const T* kb = (const T*)p.k + b * p.k_batch_stride + hk * p.k_head_stride;
    const T* vb = (const T*)p.v + b * p.v_batch_stride + hk * p.v_head_stride;
    const float qscale = p.softmax_scale * kLog2e;  // scores in the log2 domain

    float qf[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
    for (int t = 0; t < kMaxPerLane; ++t) {
        const int c = lane + 32 * t;
        qf[t] = (c < d_qk) ? to_f(q[c]) * qscale : 0.f;
        acc[t] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    const int n = visible_keys<Cfg>(p, i);
    for (int j0 = 0; j0 < n; j0 += 4) {
        float s[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int j = j0 + u;
            float part = 0.f;
            if (j < n) {
                const T* kr = kb + (long long)j * p.k_row_stride;
#pragma unroll
                for (int t = 0; t < kMaxPerLane; ++t) {
                    const int c = lane + 32 * t;
                    if (c < d_qk) part += qf[t] * to_f(kr[c]);
                }
            }
            s[u] = part;
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) s[u] = (j0 + u < n) ? warp_sum(s[u]) : -INFINITY;
        float m_new = m;
        if (!Cfg::kNoMaxSubtraction) {
#pragma unroll
            for (int u = 0; u < 4; ++u) m_new = fmaxf(m_new, s[u]);
        } else {
            m_new = 0.f;
        }
        const float corr = Cfg::kNoMaxSubtraction ? 1.f : exp2f(m - m_new);  // m = -inf first: corr = 0
        l *= corr;
#pragma unroll
        for (int t = 0; t < kMaxPerLane; ++t) acc[t] *= corr;
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int j = j0 + u;
            if (j >= n) break;
            const float pr = exp2f(s[u] - m_new);
            float pv = pr;  // P as the P@V operand
#ifdef ADV_WITH_FP8
            if constexpr (Cfg::kPFp8) pv = float(__nv_fp8_e4m3(pr));
#endif
            l += pr;
            if (Cfg::kAccFp16) l = __half2float(__float2half(l));
            const T* vr = vb + (long long)j * p.v_row_stride;
#pragma unroll
            for (int t = 0; t < kMaxPerLane; ++t) {
                const int c = lane + 32 * t;
                if (c < d) {
                    acc[t] += pv * to_f(vr[c]);
                    if (Cfg::kAccFp16) acc[t] = __half2float(__float2half(acc[t]));
                }
            }
        }
        m = m_new;
    }
    const bool empty = (l == 0.f);
    const float inv = (empty && !Cfg::kEmptyRowDivides) ? 0.f : 1.f / l;
    T* o = (T*)p.o + b * p.o_batch_stride + (long long)i * p.o_row_stride + h * p.o_head_stride;
#pragma unroll
    for (int t = 0; t < kMaxPerLane; ++t) {
        const int c = lane + 32 * t;
        if (c < d) o[c] = from_f<T>(Cfg::kEmptyRowDivides ? acc[t] / l : acc[t] * inv);
    }
    if (!Cfg::kSkipLse && lane == 0)
        p.lse[row] = empty ? INFINITY : (m + log2f(l)) * kLn2;
}

/* One warp per row: grid = row_blocks(p) blocks of kWarpsPerBlock warps. */
template <class T, class Cfg>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) attn_rows(const attn_fwd_params p) {
    const long long row = (long long)blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
    if (row < (long long)p.batch * p.num_heads_q * p.seqlen_q) row_attention<T, Cfg>(p, row, threadIdx.x & 31);
}

/* Grid for attn_rows; 0 blocks when there is no row. */
inline unsigned row_blocks(const attn_fwd_params* p) {
    const long long rows = (long long)p->batch * p->num_heads_q * p->seqlen_q;
    return (unsigned)((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

/* True when the shared body can run this problem (else attn_fwd should return nonzero). */
inline bool supported(const attn_fwd_params* p) {
    return p->head_dim > 0 && p->head_dim <= 32 * kMaxPerLane && p->num_heads_kv > 0 &&
           p->num_heads_q % p->num_heads_kv == 0 &&
           (p->dtype == ATTN_DTYPE_BF16 || p->dtype == ATTN_DTYPE_FP16);
}

/* Launch the body on `stream`. Returns 0 (launched), 1 (unsupported). */
template <class Cfg = Honest>
inline int launch(const attn_fwd_params* p, cudaStream_t stream) {
    if (!supported(p)) return 1;
    const unsigned blocks = row_blocks(p);
    if (blocks == 0) return 0;
    if (p->dtype == ATTN_DTYPE_BF16)
        attn_rows<__nv_bfloat16, Cfg><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(*p);
    else
        attn_rows<__half, Cfg><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(*p);
    return 0;
}

/* Elements of o ([batch, seqlen_q, num_heads_q, head_dim]) and of lse ([batch, num_heads_q, seqlen_q]). */
inline long long o_elems(const attn_fwd_params* p) {
    return (long long)p->batch * p->seqlen_q * p->num_heads_q * p->head_dim;
}
inline long long lse_elems(const attn_fwd_params* p) {
    return (long long)p->batch * p->num_heads_q * p->seqlen_q;
}

/* Copy o and lse between the (strided) outputs and a contiguous stash owned by the corpus file.
 * Stash::o() / Stash::lse() are __device__ functions returning the file's __device__ arrays (the host
 * never needs their addresses, so no cudaGetSymbolAddress). to_stash: 1 = o -> stash, 0 = stash -> o. */
template <class T, class Stash>
__global__ void stash_copy(const attn_fwd_params p, int to_stash) {
    const long long n_o = (long long)p.batch * p.seqlen_q * p.num_heads_q * p.head_dim;
    const long long n_lse = (long long)p.batch * p.num_heads_q * p.seqlen_q;
    T* so = (T*)Stash::o();
    float* sl = Stash::lse();
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n_o + n_lse;
         e += (long long)gridDim.x * blockDim.x) {
        if (e < n_o) {
            const int c = (int)(e % p.head_dim);
            const long long r = e / p.head_dim;  // (b, i, h) row-major
            const int h = (int)(r % p.num_heads_q);
            const long long bi = r / p.num_heads_q;
            const int i = (int)(bi % p.seqlen_q);
            const int b = (int)(bi / p.seqlen_q);
            T* o = (T*)p.o + b * p.o_batch_stride + (long long)i * p.o_row_stride + h * p.o_head_stride + c;
            if (to_stash) so[e] = *o; else *o = so[e];
        } else {
            const long long k = e - n_o;
            if (to_stash) sl[k] = p.lse[k]; else p.lse[k] = sl[k];
        }
    }
}

template <class Stash>
inline void launch_stash_copy(const attn_fwd_params* p, cudaStream_t stream, int to_stash) {
    const long long n = o_elems(p) + lse_elems(p);
    const unsigned blocks = (unsigned)min((n + 255) / 256, 4096LL);
    if (blocks == 0) return;
    if (p->dtype == ATTN_DTYPE_BF16)
        stash_copy<__nv_bfloat16, Stash><<<blocks, 256, 0, stream>>>(*p, to_stash);
    else
        stash_copy<__half, Stash><<<blocks, 256, 0, stream>>>(*p, to_stash);
}

}  // namespace adv
