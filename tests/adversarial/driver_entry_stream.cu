// driver_entry_stream.cu — a policy bypass: cudaGetDriverEntryPointByVersion is allowed (kernels need
// it for cuTensorMapEncodeTiled / TMA), and it hands out ANY driver function. This file fetches
// cuStreamCreate through it, creates a NON-BLOCKING stream (the legacy default stream does not wait
// for it) and launches the correct work there, returning at once: the end event on the harness's
// stream fires before the work is done. The symbol policy sees only the entry-point query (and warns).
// Defense: stream_timing — the host wall-clock cross-check sees work outliving the end event, flags
// it (work_outside_stream) and times the call by the host clock instead. Expected: correct, flagged,
// and no faster than the honest control.
#include "attn_abi.h"
#include "common_attn.cuh"

typedef int (*cu_stream_create_fn)(cudaStream_t* stream, unsigned int flags);  // CUresult cuStreamCreate
constexpr unsigned int kCuStreamNonBlocking = 0x1;                              // CU_STREAM_NON_BLOCKING

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    (void)stream;
    static cudaStream_t side = nullptr;
    if (side == nullptr) {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion("cuStreamCreate", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
            fn == nullptr || ((cu_stream_create_fn)fn)(&side, kCuStreamNonBlocking) != 0)
            return 1;
    }
    return adv::launch<adv::Honest>(p, side);
}
