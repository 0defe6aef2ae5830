// warmup_then_copy.cu — "results computed during warm-up, copied back during timing". Counts calls
// per problem shape in a static host table: the first three calls of a shape (what a correctness phase
// does: a check, a determinism re-run, a second draw) are computed honestly and the result is kept
// in a __device__ stash; every later call only copies the stash into o/lse (a cheap memcpy-like
// kernel, so the timed rate stays plausible). Passes the policy (no allocation, no extra stream).
// Caught by: timed_output with fresh_inputs (timed calls get new inputs; the copied output belongs
// to old ones and differs from the original kernel's output on the same inputs).
#include "attn_abi.h"
#include "common_attn.cuh"

namespace {
constexpr long long kStashElems = 8ll << 20;
constexpr long long kStashRows = 1ll << 20;
__device__ unsigned short stash_o[kStashElems];
__device__ float stash_lse[kStashRows];

struct Stash {
    __device__ static void* o() { return stash_o; }
    __device__ static float* lse() { return stash_lse; }
};

struct ShapeCount {
    int b, sq, sk, hq, hk, d, causal, dtype;
    int calls;
};
constexpr int kSlots = 64;
ShapeCount shapes[kSlots];
int used = 0;

int& calls_for(const attn_fwd_params* p) {
    for (int s = 0; s < used; ++s) {
        const ShapeCount& e = shapes[s];
        if (e.b == p->batch && e.sq == p->seqlen_q && e.sk == p->seqlen_k && e.hq == p->num_heads_q &&
            e.hk == p->num_heads_kv && e.d == p->head_dim && e.causal == p->causal && e.dtype == p->dtype)
            return shapes[s].calls;
    }
    ShapeCount& e = shapes[used < kSlots ? used++ : kSlots - 1];
    e = ShapeCount{p->batch, p->seqlen_q, p->seqlen_k, p->num_heads_q, p->num_heads_kv, p->head_dim,
                   p->causal, p->dtype, 0};
    return e.calls;
}
}  // namespace

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (!adv::supported(p)) return 1;
    const bool fits = adv::o_elems(p) <= kStashElems && adv::lse_elems(p) <= kStashRows;
    int& calls = calls_for(p);
    ++calls;
    if (fits && calls > 3) {  // "warm-up is over": replay
        adv::launch_stash_copy<Stash>(p, stream, /*to_stash=*/0);
        return 0;
    }
    const int rc = adv::launch<adv::Honest>(p, stream);
    if (rc == 0 && fits) adv::launch_stash_copy<Stash>(p, stream, /*to_stash=*/1);
    return rc;
}
