/* split_atomic.cuh — a split-KV attention whose splits add their share of o into an fp32 accumulator
 * with unordered atomicAdd (the order, and so the last bits, change from run to run), for the
 * determinism cheats (race_atomic_replay.cu, race_pointer_replay.cu). Pass 1 (one warp per row, the
 * shared body) gives the row max and lse deterministically; pass 2 adds exp(s - lse) v over each of
 * kSplits key ranges into acc[row][d] (the workspace) with atomics; pass 3 rounds acc into o. */
#pragma once
#include "attn_abi.h"
#include "common_attn.cuh"

namespace race {
constexpr int kSplits = 16;

inline size_t workspace_bytes(const attn_fwd_params* p) {
    return (size_t)adv::lse_elems(p) * (size_t)p->head_dim * 4;
}

/* Every kernel below does nothing when Skip::skip() is true (a device-side replay decided so). */
struct NoSkip {
    __device__ static bool skip() { return false; }
};

template <class T, class Skip>
__global__ void __launch_bounds__(adv::kWarpsPerBlock * 32) split_pv(const attn_fwd_params p) {
    if (Skip::skip()) return;
    // the split is the fastest-moving block index: a row's kSplits blocks run at the same time on different
    // SMs, so the order of their atomics onto one address is the hardware's (with the split as blockIdx.y,
    // split s of a row ran long before split s + 1 and the sum came out the same on an H100, run 39)
    const long long row = (long long)blockIdx.y * adv::kWarpsPerBlock + (threadIdx.x >> 5);
    const int split = blockIdx.x, lane = threadIdx.x & 31;
    if (row >= (long long)p.batch * p.num_heads_q * p.seqlen_q) return;
    const float lse = p.lse[row];
    if (!(lse < INFINITY)) return;  // a row that sees no key: o stays 0
    const int i = (int)(row % p.seqlen_q), h = (int)((row / p.seqlen_q) % p.num_heads_q);
    const int b = (int)(row / ((long long)p.seqlen_q * p.num_heads_q));
    const int hk = h / (p.num_heads_q / p.num_heads_kv), d = p.head_dim;
    const int n = adv::visible_keys<adv::Honest>(p, i);
    const int per = (n + kSplits - 1) / kSplits, j0 = split * per, j1 = min(n, j0 + per);
    const T* q = (const T*)p.q + b * p.q_batch_stride + (long long)i * p.q_row_stride + h * p.q_head_stride;
    float* acc = (float*)p.workspace + row * d;
    for (int j = j0; j < j1; ++j) {
        const T* kr = (const T*)p.k + b * p.k_batch_stride + (long long)j * p.k_row_stride + hk * p.k_head_stride;
        const T* vr = (const T*)p.v + b * p.v_batch_stride + (long long)j * p.v_row_stride + hk * p.v_head_stride;
        float part = 0.f;
        for (int c = lane; c < d; c += 32) part += adv::to_f(q[c]) * adv::to_f(kr[c]);
        const float pr = expf(adv::warp_sum(part) * p.softmax_scale - lse);
        for (int c = lane; c < d; c += 32) atomicAdd(acc + c, pr * adv::to_f(vr[c]));
    }
}

template <class T, class Skip>
__global__ void finish(const attn_fwd_params p) {
    if (Skip::skip()) return;
    const long long rows = (long long)p.batch * p.num_heads_q * p.seqlen_q, d = p.head_dim;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < rows * d; e += (long long)gridDim.x * blockDim.x) {
        const long long row = e / d;
        const int c = (int)(e % d), i = (int)(row % p.seqlen_q), h = (int)((row / p.seqlen_q) % p.num_heads_q);
        const int b = (int)(row / ((long long)p.seqlen_q * p.num_heads_q));
        T* o = (T*)p.o + b * p.o_batch_stride + (long long)i * p.o_row_stride + h * p.o_head_stride;
        o[c] = adv::from_f<T>(((const float*)p.workspace)[e]);
    }
}

/* The racy attention into p->o / p->lse (p->workspace must hold workspace_bytes(p)). */
template <class T, class Skip>
__global__ void __launch_bounds__(adv::kWarpsPerBlock * 32) rows_unless(const attn_fwd_params p) {
    if (Skip::skip()) return;
    const long long row = (long long)blockIdx.x * adv::kWarpsPerBlock + (threadIdx.x >> 5);
    if (row < (long long)p.batch * p.num_heads_q * p.seqlen_q) adv::row_attention<T, adv::Honest>(p, row, threadIdx.x & 31);
}

template <class T, class Skip>
inline void launch_t(const attn_fwd_params* p, cudaStream_t s) {
    rows_unless<T, Skip><<<adv::row_blocks(p), adv::kWarpsPerBlock * 32, 0, s>>>(*p);  // lse (and a first o)
    cudaMemsetAsync(p->workspace, 0, workspace_bytes(p), s);
    split_pv<T, Skip><<<dim3(kSplits, adv::row_blocks(p)), adv::kWarpsPerBlock * 32, 0, s>>>(*p);
    finish<T, Skip><<<1024, 256, 0, s>>>(*p);
}

template <class Skip = NoSkip>
inline int launch(const attn_fwd_params* p, cudaStream_t s) {
    if (!adv::supported(p) || p->workspace == nullptr || p->workspace_bytes < workspace_bytes(p)) return 1;
    if (adv::row_blocks(p) > 65535u) return 1;  // the row blocks are grid.y
    if (adv::row_blocks(p) == 0) return 0;
    if (p->dtype == ATTN_DTYPE_BF16) launch_t<__nv_bfloat16, Skip>(p, s); else launch_t<__half, Skip>(p, s);
    return 0;
}
}  // namespace race
