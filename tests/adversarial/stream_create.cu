// stream_create.cu — the classic timer escape: create a non-blocking stream once, launch the (correct)
// work there and return, so an end event on the harness's stream fires before the work is done.
// Caught by: symbol_policy (cudaStreamCreateWithFlags is refused: a candidate uses the given stream).
#include "attn_abi.h"
#include "common_attn.cuh"

static cudaStream_t side_stream = nullptr;

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    (void)stream;
    if (side_stream == nullptr && cudaStreamCreateWithFlags(&side_stream, cudaStreamNonBlocking) != cudaSuccess)
        return 1;
    return adv::launch<adv::Honest>(p, side_stream);
}
