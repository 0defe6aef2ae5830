// abi_mangled.cu — an ABI mistake (or a probe of the loader): attn_fwd is defined as a C++ overload
// taking the params by reference, so it gets a mangled name and no `attn_fwd` with C linkage exists.
// Caught by: abi (compile_kernel's export check raises AbiError naming the mangled symbol).
#include "attn_abi.h"
#include "common_attn.cuh"

int attn_fwd(const attn_fwd_params& p, cudaStream_t stream) {
    return adv::launch<adv::Honest>(&p, stream);
}
