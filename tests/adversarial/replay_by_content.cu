// replay_by_content.cu — memoization by input CONTENT, entirely on the device (no allocation, no host
// sync, so it passes the policy). A one-block kernel fingerprints 3 x 256 sampled elements of q, k, v
// and compares them (and the shape) with the fingerprint of the last computed call; on a match every
// block copies the stashed o/lse from a __device__ array instead of computing. Wins big on a harness
// that times the same inputs over and over.
// Defense: fresh_inputs (every timed call sees new random values, so the fingerprint never matches in
// the timing loop and the cheat only adds work). Expected: correct, and no faster than the honest
// control. If the fingerprint ever matched stale data, timed_output would catch the replayed output.
#include "attn_abi.h"
#include "common_attn.cuh"

namespace {
constexpr int kSamples = 256;
constexpr long long kStashElems = 8ll << 20;  // o elements (2 bytes each) the stash can hold
constexpr long long kStashRows = 1ll << 20;   // lse elements

__device__ unsigned short stash_o[kStashElems];
__device__ float stash_lse[kStashRows];
__device__ unsigned int last_fp[3 * kSamples + 8];
__device__ unsigned int this_fp[3 * kSamples + 8];
__device__ int valid = 0;
__device__ int hit = 0;

static __device__ __forceinline__ unsigned int sample(const attn_fwd_params& p, int which, int s) {
    const unsigned short* t = (const unsigned short*)(which == 0 ? p.q : which == 1 ? p.k : p.v);
    const long long rows = which == 0 ? (long long)p.batch * p.seqlen_q * p.num_heads_q
                                      : (long long)p.batch * p.seqlen_k * p.num_heads_kv;
    const long long e = ((long long)s * 2654435761ll) % (rows * p.head_dim);  // contiguous [.., d]
    return t[e];
}

__global__ void fingerprint(const attn_fwd_params p) {
    __shared__ int differs;
    if (threadIdx.x == 0) differs = !valid;
    __syncthreads();
    for (int s = threadIdx.x; s < 3 * kSamples; s += blockDim.x) {
        const unsigned int v = sample(p, s / kSamples, s % kSamples);
        this_fp[s] = v;
        if (v != last_fp[s]) differs = 1;
    }
    if (threadIdx.x == 0) {
        const unsigned int shape[8] = {(unsigned)p.batch, (unsigned)p.seqlen_q, (unsigned)p.seqlen_k,
                                       (unsigned)p.num_heads_q, (unsigned)p.num_heads_kv, (unsigned)p.head_dim,
                                       (unsigned)p.causal, (unsigned)p.dtype};
        for (int i = 0; i < 8; ++i) {
            this_fp[3 * kSamples + i] = shape[i];
            if (shape[i] != last_fp[3 * kSamples + i]) differs = 1;
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) hit = !differs;
}

/* After a miss: the fresh output becomes the stash and its fingerprint the reference. */
__global__ void remember() {
    if (hit) return;
    for (int s = threadIdx.x; s < 3 * kSamples + 8; s += blockDim.x) last_fp[s] = this_fp[s];
    if (threadIdx.x == 0) valid = 1;
}

template <class T>
__global__ void attn_or_replay(const attn_fwd_params p) {
    const long long row = (long long)blockIdx.x * adv::kWarpsPerBlock + (threadIdx.x >> 5);
    if (row >= (long long)p.batch * p.num_heads_q * p.seqlen_q) return;
    const int lane = threadIdx.x & 31;
    const int i = (int)(row % p.seqlen_q), h = (int)((row / p.seqlen_q) % p.num_heads_q);
    const int b = (int)(row / ((long long)p.seqlen_q * p.num_heads_q));
    T* o = (T*)p.o + b * p.o_batch_stride + (long long)i * p.o_row_stride + h * p.o_head_stride;
    const long long flat = (((long long)b * p.seqlen_q + i) * p.num_heads_q + h) * p.head_dim;
    T* so = (T*)stash_o + flat;
    if (hit) {
        for (int c = lane; c < p.head_dim; c += 32) o[c] = so[c];
        if (lane == 0) p.lse[row] = stash_lse[row];
        return;
    }
    adv::row_attention<T, adv::Honest>(p, row, lane);
    __syncwarp();
    for (int c = lane; c < p.head_dim; c += 32) so[c] = o[c];
    if (lane == 0) stash_lse[row] = p.lse[row];
}
}  // namespace

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (!adv::supported(p)) return 1;
    if (adv::o_elems(p) > kStashElems || adv::lse_elems(p) > kStashRows)
        return adv::launch<adv::Honest>(p, stream);  // too big to stash: honest
    const unsigned blocks = adv::row_blocks(p);
    if (blocks == 0) return 0;
    fingerprint<<<1, 256, 0, stream>>>(*p);
    if (p->dtype == ATTN_DTYPE_BF16)
        attn_or_replay<__nv_bfloat16><<<blocks, adv::kWarpsPerBlock * 32, 0, stream>>>(*p);
    else
        attn_or_replay<__half><<<blocks, adv::kWarpsPerBlock * 32, 0, stream>>>(*p);
    remember<<<1, 256, 0, stream>>>();
    return 0;
}
