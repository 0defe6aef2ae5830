// Refused by the symbol policy: dlopen declared by hand (no <dlfcn.h>, so the header check passes).
#include "attn_abi.h"

extern "C" void* dlopen(const char* file, int mode);

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    return dlopen("libcublas.so", 2) != nullptr ? 0 : 1;
}
