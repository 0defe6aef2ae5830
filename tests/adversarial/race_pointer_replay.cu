// race_pointer_replay.cu — class "replayed repeats", by position: the racy split-KV kernel of
// split_atomic.cuh, hiding its race the way the old harness's determinism check allowed: a repeat was
// the call right after the first one, on the same q/k/v buffers but a freshly allocated o. When q is
// the previous call's and o is not, the previous output is copied back instead of computing.
// Defense: every call of a scenario uses the same buffers (re-poisoned), repeats come at random places
// among the timed calls with other inputs in between and reordered values. Nothing gives the repeat away:
// the race shows. Expected: determinism.
#include "attn_abi.h"
#include "common_attn.cuh"
#include "split_atomic.cuh"

namespace {
constexpr long long kStashElems = 8ll << 20;
constexpr long long kStashRows = 1ll << 20;
__device__ unsigned short stash_o[kStashElems];
__device__ float stash_lse[kStashRows];
struct Stash {
    __device__ static void* o() { return stash_o; }
    __device__ static float* lse() { return stash_lse; }
};
const void* last_q = nullptr;
const void* last_o = nullptr;
}  // namespace

extern "C" size_t attn_fwd_workspace_bytes(const attn_fwd_params* p) { return race::workspace_bytes(p); }

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (!adv::supported(p) || adv::o_elems(p) > kStashElems || adv::lse_elems(p) > kStashRows) return 1;
    const bool repeat = p->q == last_q && p->o != last_o;  // "the determinism re-run"
    last_q = p->q;
    last_o = p->o;
    if (repeat) {
        adv::launch_stash_copy<Stash>(p, stream, /*to_stash=*/0);
        return 0;
    }
    const int rc = race::launch(p, stream);
    if (rc == 0) adv::launch_stash_copy<Stash>(p, stream, /*to_stash=*/1);
    return rc;
}
