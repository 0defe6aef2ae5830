// load_slow_static.cu — class "a library whose load never ends", through C++ static initialization: a
// global lookup table whose constructor "precomputes" 2^62 entries (years of work, not a loop the
// compiler can see as infinite). Defense: the launcher's load limit (20 s). Expected: verify_error
// naming the load limit.
#include "attn_abi.h"
#include "common_attn.cuh"

namespace {
struct Table {
    volatile unsigned long long acc = 0;
    Table() {
        for (unsigned long long i = 0; i < (1ull << 62); ++i) acc = acc * 6364136223846793005ull + i;
    }
};
Table table;
}  // namespace

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) { return adv::launch<adv::Honest>(p, stream); }
