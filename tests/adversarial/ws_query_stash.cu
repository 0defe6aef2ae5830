// ws_query_stash.cu — class "work outside the timed call", the subtle variant: attn_fwd does a
// plausible quarter of the rows (a 2-3x fake speedup without a flag at 567c892) and remembers the call's
// parameters; the workspace query, when it sees no pointers, finishes the other rows through the
// parameters it remembered. Defense: the query runs only at a scenario's start, on NULL data pointers,
// before the scenario's buffers exist; the launcher synchronizes after it, so nothing it launched can
// reach a later call's outputs. Expected: poisoned_output (three quarters of the rows never written).
#include "attn_abi.h"
#include "common_attn.cuh"

namespace {
attn_fwd_params remembered;
bool have = false;

template <class T>
__global__ void __launch_bounds__(adv::kWarpsPerBlock * 32) rows_from(const attn_fwd_params p, long long first) {
    const long long row = first + (long long)blockIdx.x * adv::kWarpsPerBlock + (threadIdx.x >> 5);
    if (row < (long long)p.batch * p.num_heads_q * p.seqlen_q) adv::row_attention<T, adv::Honest>(p, row, threadIdx.x & 31);
}

void launch_rows(const attn_fwd_params* p, long long first, long long count, cudaStream_t s) {
    const unsigned blocks = (unsigned)((count + adv::kWarpsPerBlock - 1) / adv::kWarpsPerBlock);
    if (blocks == 0) return;
    if (p->dtype == ATTN_DTYPE_BF16)
        rows_from<__nv_bfloat16><<<blocks, adv::kWarpsPerBlock * 32, 0, s>>>(*p, first);
    else
        rows_from<__half><<<blocks, adv::kWarpsPerBlock * 32, 0, s>>>(*p, first);
}
}  // namespace

extern "C" size_t attn_fwd_workspace_bytes(const attn_fwd_params* p) {
    const attn_fwd_params* use = (p != nullptr && p->q != nullptr) ? p : (have ? &remembered : nullptr);
    if (use != nullptr) {
        const long long rows = adv::lse_elems(use);
        launch_rows(use, rows / 4, rows - rows / 4, 0);  // the other three quarters, untimed
    }
    return 256;
}

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (!adv::supported(p)) return 1;
    remembered = *p;
    have = true;
    launch_rows(p, 0, adv::lse_elems(p) / 4, stream);
    return 0;
}
