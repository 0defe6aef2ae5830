// Refused by the symbol policy: host file access.
#include "attn_abi.h"
#include <cstdio>

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    FILE* f = std::fopen("/tmp/expected_output.bin", "rb");
    return f != nullptr ? 0 : 1;
}
