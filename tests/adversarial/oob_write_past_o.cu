// oob_write_past_o.cu — a fault: correct attention, then an off-by-one "clear the tail row for the
// next tile" that zeroes one head_dim row JUST PAST the end of o (and one float past lse). The write
// lands in a neighbouring allocation (or free allocator slack) and faults nothing.
// Should be caught by guard bands around o/lse (poison before and after the outputs, checked after
// every call) — not in the verifier's check list yet; see README ("gaps").
#include "attn_abi.h"
#include "common_attn.cuh"

namespace {
template <class T>
__global__ void clear_tail_row(const attn_fwd_params p) {
    const long long end_o = (long long)p.batch * p.seqlen_q * p.num_heads_q * p.head_dim;  // contiguous o
    const long long end_lse = (long long)p.batch * p.num_heads_q * p.seqlen_q;
    for (int c = threadIdx.x; c < p.head_dim; c += blockDim.x) ((T*)p.o)[end_o + c] = adv::from_f<T>(0.f);
    if (threadIdx.x == 0) p.lse[end_lse] = 0.f;  // "<=" instead of "<"
}
}  // namespace

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    const int rc = adv::launch<adv::Honest>(p, stream);
    if (rc != 0 || adv::o_elems(p) == 0) return rc;
    if (p->dtype == ATTN_DTYPE_BF16)
        clear_tail_row<__nv_bfloat16><<<1, 128, 0, stream>>>(*p);
    else
        clear_tail_row<__half><<<1, 128, 0, stream>>>(*p);
    return 0;
}
