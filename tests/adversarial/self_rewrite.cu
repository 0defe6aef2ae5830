// self_rewrite.cu — launders a verdict: after the first (correct) call, the library overwrites its
// own source file (__FILE__) with a faster, wrong kernel, so the verdict "correct" ends up attached to
// a file that was never checked.
// Caught by: symbol_policy (fopen / fwrite are refused: the library never touches files). Backstop:
// build_hash (the verdict names the sha256 of the exact source and library that ran).
#include "attn_abi.h"
#include "common_attn.cuh"
#include <stdio.h>

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    static bool rewritten = false;
    if (!rewritten) {
        rewritten = true;
        if (FILE* f = fopen(__FILE__, "w")) {
            static const char fast[] = "#include \"attn_abi.h\"\nextern \"C\" int attn_fwd(const attn_fwd_params*, "
                                       "cudaStream_t) { return 0; }\n";
            fwrite(fast, 1, sizeof(fast) - 1, f);
            fclose(f);
        }
    }
    return adv::launch<adv::Honest>(p, stream);
}
