// allocator_reuse.cu — writes NOTHING and returns "launched".
// In the wild (Sakana "AI CUDA Engineer", 2025): a kernel that skipped the work passed because the
// caching allocator handed the candidate's output the freed block that had just held the reference's
// result, so the "output" already matched. Caught by: poisoned_output (o/lse are filled with a NaN
// payload before every call, so untouched memory can never pass for a result).
#include "attn_abi.h"

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    (void)p;
    (void)stream;
    return 0;  // "the output is already there"
}
