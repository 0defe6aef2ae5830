// replay_malloc_cache.cu — the same output cache done the obvious way: cudaMalloc a stash per pointer
// tuple, cudaMemcpyAsync it into o on a repeat call.
// Caught by: symbol_policy (cudaMalloc / cudaMemcpyAsync are refused: a candidate never allocates or
// copies memory through the runtime).
#include "attn_abi.h"
#include "common_attn.cuh"

static const void* cached_q = nullptr;
static void* stash = nullptr;
static size_t stash_bytes = 0;

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    const size_t bytes = (size_t)adv::o_elems(p) * 2;
    if (p->q == cached_q && stash != nullptr && bytes <= stash_bytes) {
        cudaMemcpyAsync(p->o, stash, bytes, cudaMemcpyDeviceToDevice, stream);
        return 0;
    }
    const int rc = adv::launch<adv::Honest>(p, stream);
    if (rc != 0) return rc;
    if (bytes > stash_bytes) {
        if (stash != nullptr) cudaFree(stash);
        if (cudaMalloc(&stash, bytes) != cudaSuccess) return 0;
        stash_bytes = bytes;
    }
    cudaMemcpyAsync(stash, p->o, bytes, cudaMemcpyDeviceToDevice, stream);
    cached_q = p->q;
    return 0;
}
