// race_atomic_replay.cu — class "replayed repeats": a split-KV kernel whose splits add into o with
// unordered atomicAdd (the last bits change run to run), hiding its race from a determinism check by
// replaying: a one-block kernel fingerprints 256 sampled elements of q, k and v; when they equal the
// previous call's, every kernel of the racy path returns at once and the previous output is copied
// back (the old harness re-ran draw 0 right after it, on the same content: this passed at 567c892).
// Defense: determinism repeats replay draw 0's values REORDERED (batch or heads permuted), at random
// places among the timed calls, with other inputs in between, into the same re-poisoned buffers; the
// comparison is bitwise. The fingerprint misses, the race shows. Expected: determinism.
#include "attn_abi.h"
#include "common_attn.cuh"
#include "split_atomic.cuh"

namespace {
constexpr int kSamples = 256;
constexpr long long kStashElems = 8ll << 20;
constexpr long long kStashRows = 1ll << 20;
__device__ unsigned short stash_o[kStashElems];
__device__ float stash_lse[kStashRows];
__device__ unsigned int fp_last[3 * kSamples], fp_now[3 * kSamples];
__device__ int valid = 0;
__device__ int hit = 0;

__device__ unsigned int element(const attn_fwd_params& p, int which, int s) {
    const unsigned short* t = (const unsigned short*)(which == 0 ? p.q : which == 1 ? p.k : p.v);
    const int heads = which == 0 ? p.num_heads_q : p.num_heads_kv, rows = which == 0 ? p.seqlen_q : p.seqlen_k;
    const long long e = ((long long)s * 2654435761ll) % ((long long)p.batch * rows * heads * p.head_dim);
    const int c = (int)(e % p.head_dim), h = (int)((e / p.head_dim) % heads);
    const int r = (int)((e / ((long long)p.head_dim * heads)) % rows), b = (int)(e / ((long long)p.head_dim * heads * rows));
    const int64_t* st = which == 0 ? &p.q_batch_stride : which == 1 ? &p.k_batch_stride : &p.v_batch_stride;
    return t[b * st[0] + (long long)r * st[1] + h * st[2] + c];
}

__global__ void fingerprint(const attn_fwd_params p) {
    __shared__ int differs;
    if (threadIdx.x == 0) differs = !valid;
    __syncthreads();
    for (int s = threadIdx.x; s < 3 * kSamples; s += blockDim.x) {
        fp_now[s] = element(p, s / kSamples, s % kSamples);
        if (fp_now[s] != fp_last[s]) differs = 1;
    }
    __syncthreads();
    if (threadIdx.x == 0) hit = !differs;
}

struct SkipOnHit {
    __device__ static bool skip() { return hit != 0; }
};

/* hit: stash -> o/lse; miss: o/lse -> stash and the fingerprint is remembered. */
template <class T>
__global__ void replay_or_remember(const attn_fwd_params p) {
    const long long n_l = (long long)p.batch * p.num_heads_q * p.seqlen_q, n_o = n_l * p.head_dim;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n_o + n_l; e += (long long)gridDim.x * blockDim.x) {
        if (e < n_o) {
            const int c = (int)(e % p.head_dim);
            const long long r = e / p.head_dim;
            const int h = (int)(r % p.num_heads_q), i = (int)((r / p.num_heads_q) % p.seqlen_q);
            const int b = (int)(r / ((long long)p.num_heads_q * p.seqlen_q));
            T* o = (T*)p.o + b * p.o_batch_stride + (long long)i * p.o_row_stride + h * p.o_head_stride + c;
            if (hit) *o = ((T*)stash_o)[e]; else ((T*)stash_o)[e] = *o;
        } else {
            if (hit) p.lse[e - n_o] = stash_lse[e - n_o]; else stash_lse[e - n_o] = p.lse[e - n_o];
        }
    }
    if (!hit && blockIdx.x == 0) {
        for (int s = threadIdx.x; s < 3 * kSamples; s += blockDim.x) fp_last[s] = fp_now[s];
        if (threadIdx.x == 0) valid = 1;
    }
}
}  // namespace

extern "C" size_t attn_fwd_workspace_bytes(const attn_fwd_params* p) { return race::workspace_bytes(p); }

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (!adv::supported(p) || adv::o_elems(p) > kStashElems || adv::lse_elems(p) > kStashRows) return 1;
    fingerprint<<<1, 256, 0, stream>>>(*p);
    const int rc = race::launch<SkipOnHit>(p, stream);
    if (rc != 0) return rc;
    if (p->dtype == ATTN_DTYPE_BF16)
        replay_or_remember<__nv_bfloat16><<<1024, 256, 0, stream>>>(*p);
    else
        replay_or_remember<__half><<<1024, 256, 0, stream>>>(*p);
    return 0;
}
