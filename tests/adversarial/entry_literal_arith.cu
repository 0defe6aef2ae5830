// entry_literal_arith.cu — class "entry-point rule bypass", by pointer arithmetic on a literal: the old
// rule accepted cudaGetDriverEntryPoint* when the first argument STARTED with the literal "cuTensorMap";
// "cuTensorMapcuStreamCreate" + 11 is the string "cuStreamCreate". With a non-blocking stream the work
// escapes the timer. Defense: the rule is judged on the preprocessed source by the WHOLE first argument,
// which must be string literals only, naming cuTensorMap* as a whole. Expected: refused (source_policy).
#include "attn_abi.h"
#include "common_attn.cuh"

typedef int (*cu_stream_create_fn)(cudaStream_t* stream, unsigned int flags);

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    (void)stream;
    static cudaStream_t side = nullptr;
    if (side == nullptr) {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapcuStreamCreate" + 11, &fn, 12000, cudaEnableDefault, &found) !=
                cudaSuccess || fn == nullptr || ((cu_stream_create_fn)fn)(&side, 0x1) != 0)
            return 1;
    }
    return adv::launch<adv::Honest>(p, side);
}
