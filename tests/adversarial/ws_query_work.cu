// ws_query_work.cu — class "work outside the timed call": the whole attention is done inside
// attn_fwd_workspace_bytes, which the old harness called with live q/k/v/o/lse pointers outside the
// timed window; attn_fwd itself launches nothing (reported correct with a 45x geomean at 567c892).
// Defense: the workspace query gets a copy of the params whose data pointers are NULL, once per layout
// before any buffer of the scenario exists, and the launcher synchronizes after it; outputs are
// poisoned before every call. Expected: poisoned_output (nothing written by attn_fwd).
#include "attn_abi.h"
#include "common_attn.cuh"

extern "C" size_t attn_fwd_workspace_bytes(const attn_fwd_params* p) {
    if (p != nullptr && p->q != nullptr && p->o != nullptr && p->lse != nullptr)
        adv::launch<adv::Honest>(p, 0);  // the real work, untimed
    return 256;
}

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    (void)stream;
    return adv::supported(p) ? 0 : 1;  // "already done"
}
