// race_missing_sync.cu — a fault: a shared-memory tiled kernel (4 warps = 4 query rows of one head
// share K/V tiles of 16 keys; each warp stages 4 keys) that forgot the __syncthreads() between
// staging a tile and reading it. A warp whose loads land first reads rows another warp has not
// stored yet (the previous tile's keys, or uninitialized shared memory), so the output changes from
// run to run. Caught by: determinism (two calls on the same inputs must give the same bits); a large
// enough race also fails reference_tolerance.
#include "attn_abi.h"
#include "common_attn.cuh"

namespace {
constexpr int kTile = 16;
constexpr int kRows = 4;  // warps per block, one query row each

template <class T>
__global__ void __launch_bounds__(kRows * 32) tiled(const attn_fwd_params p) {
    __shared__ T ks[kTile][256];
    __shared__ T vs[kTile][256];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int tiles_q = (p.seqlen_q + kRows - 1) / kRows;
    const int bh = blockIdx.x / tiles_q;
    const int i = (blockIdx.x % tiles_q) * kRows + warp;
    const int h = bh % p.num_heads_q, b = bh / p.num_heads_q;
    const int hk = h / (p.num_heads_q / p.num_heads_kv);
    const int d = p.head_dim;
    const bool live = i < p.seqlen_q;
    const T* q = (const T*)p.q + b * p.q_batch_stride + (long long)(live ? i : 0) * p.q_row_stride + h * p.q_head_stride;
    const T* kb = (const T*)p.k + b * p.k_batch_stride + hk * p.k_head_stride;
    const T* vb = (const T*)p.v + b * p.v_batch_stride + hk * p.v_head_stride;
    float qf[8], acc[8];
    for (int t = 0; t < 8; ++t) {
        const int c = lane + 32 * t;
        qf[t] = c < d ? adv::to_f(q[c]) * p.softmax_scale * adv::kLog2e : 0.f;
        acc[t] = 0.f;
    }
    int n = p.seqlen_k;  // keys this row sees
    if (p.causal) n = max(0, min(p.seqlen_k, i + p.seqlen_k - p.seqlen_q + 1));
    const int last = (blockIdx.x % tiles_q) * kRows + kRows - 1;  // the block's last row sees the most keys
    const int n_block = p.causal ? max(0, min(p.seqlen_k, last + p.seqlen_k - p.seqlen_q + 1)) : p.seqlen_k;
    float m = -INFINITY, l = 0.f;
    for (int j0 = 0; j0 < n_block; j0 += kTile) {
        // Uneven warp progress (a cache miss, a slow load) is what exposes a missing barrier on real
        // hardware; on a quiet small test the warps run nearly in lockstep and the race hides, so the
        // staging warps are delayed by a varying few hundred ns here to make it show reliably.
        __nanosleep(((j0 / kTile + warp) & 3) * 300);
        for (int r = warp; r < kTile; r += kRows) {  // each warp stages kTile / kRows keys
            const int j = j0 + r;
            for (int c = lane; c < d; c += 32) {
                ks[r][c] = j < p.seqlen_k ? kb[(long long)j * p.k_row_stride + c] : adv::from_f<T>(0.f);
                vs[r][c] = j < p.seqlen_k ? vb[(long long)j * p.v_row_stride + c] : adv::from_f<T>(0.f);
            }
        }
        // BUG: missing __syncthreads() here — the tile is read before every warp has staged its keys.
        for (int r = 0; r < kTile && j0 + r < n; ++r) {
            float part = 0.f;
            for (int t = 0; t < 8; ++t) {
                const int c = lane + 32 * t;
                if (c < d) part += qf[t] * adv::to_f(ks[r][c]);
            }
            const float s = adv::warp_sum(part);
            const float m_new = fmaxf(m, s), corr = exp2f(m - m_new), pr = exp2f(s - m_new);
            l = l * corr + pr;
            for (int t = 0; t < 8; ++t) {
                const int c = lane + 32 * t;
                if (c < d) acc[t] = acc[t] * corr + pr * adv::to_f(vs[r][c]);
            }
            m = m_new;
        }
        __syncthreads();  // present: nobody overwrites the tile while it is still being read
    }
    if (!live) return;
    T* o = (T*)p.o + b * p.o_batch_stride + (long long)i * p.o_row_stride + h * p.o_head_stride;
    const float inv = l > 0.f ? 1.f / l : 0.f;
    for (int t = 0; t < 8; ++t) {
        const int c = lane + 32 * t;
        if (c < d) o[c] = adv::from_f<T>(acc[t] * inv);
    }
    if (lane == 0) p.lse[((long long)b * p.num_heads_q + h) * p.seqlen_q + i] = l > 0.f ? (m + log2f(l)) * adv::kLn2 : INFINITY;
}
}  // namespace

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (!adv::supported(p)) return 1;
    const long long blocks = (long long)p->batch * p->num_heads_q * ((p->seqlen_q + kRows - 1) / kRows);
    if (blocks == 0) return 0;
    if (p->dtype == ATTN_DTYPE_BF16)
        tiled<__nv_bfloat16><<<(unsigned)blocks, kRows * 32, 0, stream>>>(*p);
    else
        tiled<__half><<<(unsigned)blocks, kRows * 32, 0, stream>>>(*p);
    return 0;
}
