// illegal_address.cu — a fault: an illegal memory access. The GQA path stores each row's lse into the
// WORKSPACE for a later "group merge", but the file never exports attn_fwd_workspace_bytes, so the
// harness passes workspace = NULL and the kernel writes near address 0. MHA scenarios never touch the
// workspace and are correct.
// Caught by: worker_isolation (sticky CUDA error: the worker reports it and exits, failure kind
// "illegal_memory_access"; a fresh worker runs the next scenario).
#include "attn_abi.h"
#include "common_attn.cuh"

namespace {
template <class T>
__global__ void __launch_bounds__(adv::kWarpsPerBlock * 32) gqa_rows(const attn_fwd_params p) {
    const long long row = (long long)blockIdx.x * adv::kWarpsPerBlock + (threadIdx.x >> 5);
    if (row >= (long long)p.batch * p.num_heads_q * p.seqlen_q) return;
    adv::row_attention<T, adv::Honest>(p, row, threadIdx.x & 31);
    if ((threadIdx.x & 31) == 0) ((float*)p.workspace)[row] = p.lse[row];  // workspace is NULL
}
}  // namespace

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (p->num_heads_q == p->num_heads_kv) return adv::launch<adv::Honest>(p, stream);
    if (!adv::supported(p)) return 1;
    const unsigned blocks = adv::row_blocks(p);
    if (blocks == 0) return 0;
    if (p->dtype == ATTN_DTYPE_BF16)
        gqa_rows<__nv_bfloat16><<<blocks, adv::kWarpsPerBlock * 32, 0, stream>>>(*p);
    else
        gqa_rows<__half><<<blocks, adv::kWarpsPerBlock * 32, 0, stream>>>(*p);
    return 0;
}
