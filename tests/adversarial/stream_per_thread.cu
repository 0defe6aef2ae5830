// stream_per_thread.cu — correct attention launched on ANOTHER stream so that the harness's end event
// (recorded on the stream it passed) would not wait for it; attn_fwd returns immediately.
// Passes the policy: it creates no stream, it uses the per-thread default stream handle.
// Defense: stream_timing — the harness passes and times on the LEGACY default stream, which
// implicitly synchronizes with every blocking stream (the per-thread default stream included), so the
// work is counted; a host wall-clock cross-check flags work that outlives the end event anyway.
// Expected: correct, and no faster than the same body launched honestly (control_correct.cu).
#include "attn_abi.h"
#include "common_attn.cuh"

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    (void)stream;  // "the harness only times its own stream"
    return adv::launch<adv::Honest>(p, cudaStreamPerThread);
}
