/* slice_replay.cuh — the racy split-KV of split_atomic.cuh hidden by a replay that survives the
 * determinism repeats' reordering (red team rt2): a fingerprint per slice (sampled q, k, v of one
 * (batch, kv head) slice, or of one (batch, query head) with SLICE_PER_Q_HEAD), and when EVERY slice of a
 * call matches a remembered one, in any order, each slice's remembered output is copied to where that
 * slice now lives; otherwise the racy path runs and its slices are remembered. The repeats permute the
 * batch or the heads, which moves whole slices: this passed the reordered repeats in draw 0's process.
 * Defense: the repeats run in a second candidate process that never saw draw 0 (no memory of the
 * candidate's can carry its bits there). Expected: determinism. */
#pragma once
#include "attn_abi.h"
#include "common_attn.cuh"
#include "split_atomic.cuh"

namespace slice {
constexpr int kMaxSlices = 4096, kSamples = 64;
constexpr long long kStashElems = 8ll << 20, kStashRows = 1ll << 20;
__device__ unsigned short stash_o[kStashElems];
__device__ float stash_lse[kStashRows];
__device__ unsigned long long fp_now[kMaxSlices], fp_kept[kMaxSlices];
__device__ int where[kMaxSlices];
__device__ int kept = 0, hit = 0;

#ifdef SLICE_PER_Q_HEAD
__host__ __device__ inline int heads_per_slice(const attn_fwd_params& p) { return 1; }
#else
__host__ __device__ inline int heads_per_slice(const attn_fwd_params& p) { return p.num_heads_q / p.num_heads_kv; }
#endif
__host__ __device__ inline int slices(const attn_fwd_params& p) { return p.batch * (p.num_heads_q / heads_per_slice(p)); }

/* One block per slice: an FNV hash of kSamples elements each of its q heads, k and v (and the scale). */
__global__ void fingerprint(const attn_fwd_params p) {
    __shared__ unsigned int part[3 * kSamples];
    const int s = blockIdx.x, per = heads_per_slice(p), b = s / (p.num_heads_q / per), h0 = (s % (p.num_heads_q / per)) * per;
    const int hk = h0 / (p.num_heads_q / p.num_heads_kv);
    for (int t = threadIdx.x; t < 3 * kSamples; t += blockDim.x) {
        const int which = t / kSamples, n = t % kSamples;
        const long long e = ((long long)n * 2654435761ll) % ((which == 0 ? (long long)per * p.seqlen_q : p.seqlen_k) * p.head_dim);
        const int c = (int)(e % p.head_dim), r = (int)(e / p.head_dim);
        const unsigned short* q = (const unsigned short*)p.q;
        const unsigned short* k = (const unsigned short*)p.k;
        const unsigned short* v = (const unsigned short*)p.v;
        part[t] = which == 0 ? q[b * p.q_batch_stride + (long long)(r % p.seqlen_q) * p.q_row_stride + (h0 + r / p.seqlen_q) * p.q_head_stride + c]
                : which == 1 ? k[b * p.k_batch_stride + (long long)r * p.k_row_stride + hk * p.k_head_stride + c]
                             : v[b * p.v_batch_stride + (long long)r * p.v_row_stride + hk * p.v_head_stride + c];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long h = 1469598103934665603ull ^ __float_as_uint(p.softmax_scale);
        for (int t = 0; t < 3 * kSamples; ++t) h = (h ^ part[t]) * 1099511628211ull;
        fp_now[s] = h;
    }
}

/* One block: every current slice found among the kept ones? (where[s] = its kept slot) */
__global__ void match(const attn_fwd_params p) {
    __shared__ int missing;
    if (threadIdx.x == 0) missing = kept != slices(p);
    __syncthreads();
    for (int s = threadIdx.x; s < slices(p); s += blockDim.x) {
        int found = -1;
        for (int t = 0; t < kept && found < 0; ++t)
            if (fp_kept[t] == fp_now[s]) found = t;
        where[s] = found;
        if (found < 0) missing = 1;
    }
    __syncthreads();
    if (threadIdx.x == 0) hit = !missing;
}

struct SkipOnHit {
    __device__ static bool skip() { return hit != 0; }
};

/* hit: each slice's kept output -> where the slice is now; miss: outputs -> kept, fingerprints kept. */
template <class T>
__global__ void replay_or_keep(const attn_fwd_params p) {
    const int per = heads_per_slice(p), groups = p.num_heads_q / per;
    const long long n_l = (long long)p.batch * p.num_heads_q * p.seqlen_q, n_o = n_l * p.head_dim;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n_o + n_l; e += (long long)gridDim.x * blockDim.x) {
        const long long row = e < n_o ? e / p.head_dim : e - n_o;  // (b, h, i)
        const int c = e < n_o ? (int)(e % p.head_dim) : 0, i = (int)(row % p.seqlen_q);
        const int h = (int)((row / p.seqlen_q) % p.num_heads_q), b = (int)(row / ((long long)p.seqlen_q * p.num_heads_q));
        const int s = b * groups + h / per, slot = hit ? where[s] : s;
        const long long at = ((long long)slot * per + h % per) * p.seqlen_q + i;  // kept row
        if (e < n_o) {
            T* o = (T*)p.o + b * p.o_batch_stride + (long long)i * p.o_row_stride + h * p.o_head_stride + c;
            if (hit) *o = ((T*)stash_o)[at * p.head_dim + c]; else ((T*)stash_o)[at * p.head_dim + c] = *o;
        } else {
            if (hit) p.lse[row] = stash_lse[at]; else stash_lse[at] = p.lse[row];
        }
    }
    if (!hit && blockIdx.x == 0) {
        for (int s = threadIdx.x; s < slices(p); s += blockDim.x) fp_kept[s] = fp_now[s];
        if (threadIdx.x == 0) kept = slices(p);
    }
}

inline int launch(const attn_fwd_params* p, cudaStream_t stream) {
    if (!adv::supported(p) || adv::o_elems(p) > kStashElems || adv::lse_elems(p) > kStashRows || slices(*p) > kMaxSlices)
        return 1;
    fingerprint<<<slices(*p), 128, 0, stream>>>(*p);
    match<<<1, 256, 0, stream>>>(*p);
    const int rc = race::launch<SkipOnHit>(p, stream);
    if (rc != 0) return rc;
    if (p->dtype == ATTN_DTYPE_BF16)
        replay_or_keep<__nv_bfloat16><<<1024, 256, 0, stream>>>(*p);
    else
        replay_or_keep<__half><<<1024, 256, 0, stream>>>(*p);
    return 0;
}
}  // namespace slice
