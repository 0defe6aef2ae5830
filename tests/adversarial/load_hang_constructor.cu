// load_hang_constructor.cu — class "a library whose load never ends": a static constructor that never
// returns (a "warm-up" waiting for a device that will not answer). At 567c892 it cost the worker's
// whole start-up limit (180 s) before any verdict. Defense: loading the library has its own limit
// (20 s) in the launcher, apart from the interpreter and CUDA start. Expected: verify_error naming the
// load limit, in well under a minute.
#include "attn_abi.h"
#include "common_attn.cuh"

namespace {
volatile unsigned long long spins = 0;
__attribute__((constructor)) void warm_up() {
    for (;;) spins = spins + 1;
}
}  // namespace

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) { return adv::launch<adv::Honest>(p, stream); }
