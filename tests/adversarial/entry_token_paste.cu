// entry_token_paste.cu — class "entry-point rule bypass", by the preprocessor: the name is made by token
// pasting and stringification, so no literal naming the driver function appears in the source text
// (and a comment mentioning cuTensorMapEncodeTiled sits next to the call to look like the honest case).
// Defense: the rule is judged on `nvcc -E` output, where the macros are expanded to the literal
// "cuStreamCreate". Expected: refused (source_policy).
#include "attn_abi.h"
#include "common_attn.cuh"

#define ATTNQ_STR(x) #x
#define ATTNQ_NAME(x) ATTNQ_STR(x)
#define ATTNQ_CAT(a, b) a##b

typedef int (*cu_stream_create_fn)(cudaStream_t* stream, unsigned int flags);

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    (void)stream;
    static cudaStream_t side = nullptr;
    if (side == nullptr) {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found;
        // cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", ...) for the TMA descriptors
        if (cudaGetDriverEntryPoint(ATTNQ_NAME(ATTNQ_CAT(cuStream, Create)), &fn, cudaEnableDefault, &found) !=
                cudaSuccess || fn == nullptr || ((cu_stream_create_fn)fn)(&side, 0x1) != 0)
            return 1;
    }
    return adv::launch<adv::Honest>(p, side);
}
