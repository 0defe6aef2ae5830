// infinite_loop.cu — a fault: a hang. The causal path uses a persistent, load-balancing tile scheduler:
// num_sms x 4 resident blocks pull 4-row tiles from a __device__ ticket counter, and the loop ends when
// a block draws the ticket `== num_tiles` (`!=` where `<` was meant, and the counter is never reset).
// Exactly one block ever draws that ticket; every other block keeps drawing larger ones forever (the
// 64-bit counter never wraps). The non-causal path is the honest body and is correct.
// Caught by: worker_isolation (the scenario's time limit expires, the worker is killed, failure
// kind "timeout"; the harness restarts a worker for the next scenario).
#include "attn_abi.h"
#include "common_attn.cuh"

namespace {
__device__ unsigned long long next_ticket = 0;

template <class T>
__global__ void __launch_bounds__(adv::kWarpsPerBlock * 32) persistent_causal(const attn_fwd_params p,
                                                                             unsigned long long num_tiles) {
    __shared__ unsigned long long tile;
    const long long rows = (long long)p.batch * p.num_heads_q * p.seqlen_q;
    for (;;) {
        if (threadIdx.x == 0) tile = atomicAdd(&next_ticket, 1ull);
        __syncthreads();
        const unsigned long long t = tile;
        __syncthreads();
        if (t == num_tiles) break;  // BUG: only the block holding exactly this ticket ever leaves
        if (t < num_tiles) {
            const long long row = (long long)t * adv::kWarpsPerBlock + (threadIdx.x >> 5);
            if (row < rows) adv::row_attention<T, adv::Honest>(p, row, threadIdx.x & 31);
        }
    }
}
}  // namespace

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (!p->causal) return adv::launch<adv::Honest>(p, stream);
    if (!adv::supported(p)) return 1;
    const unsigned long long num_tiles = adv::row_blocks(p);
    if (num_tiles == 0) return 0;
    const unsigned grid = (unsigned)min((unsigned long long)(p->num_sms > 0 ? p->num_sms : 1) * 4ull, num_tiles);
    if (p->dtype == ATTN_DTYPE_BF16)
        persistent_causal<__nv_bfloat16><<<grid, adv::kWarpsPerBlock * 32, 0, stream>>>(*p, num_tiles);
    else
        persistent_causal<__half><<<grid, adv::kWarpsPerBlock * 32, 0, stream>>>(*p, num_tiles);
    return 0;
}
