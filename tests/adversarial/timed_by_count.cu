// timed_by_count.cu — class "recognisable timed phase", by position: counts calls per problem shape
// and, after the first two (what a correctness phase of two draws does), runs with P rounded to fp8
// e4m3 before P@V — the cheaper math an FP8 kernel would use, only where nobody compares with the fp32
// reference. At 567c892 the timed outputs were compared with the original's under a bound about 10x
// looser than the checked tolerance, so this passed wherever the suite did not happen to catch it.
// Defense: every timed output is checked against the fp32 reference on sampled rows with the checked
// calls' tolerance (and against the original's output as a whole). Expected: timed_output.
#define ADV_WITH_FP8
#include "attn_abi.h"
#include "common_attn.cuh"

namespace {
struct PFp8 : adv::Honest {
    static constexpr bool kPFp8 = true;
};

struct ShapeCount {
    int b, sq, sk, hq, hk, d, causal, dtype, calls;
};
ShapeCount shapes[64];
int used = 0;

int& calls_for(const attn_fwd_params* p) {
    for (int s = 0; s < used; ++s) {
        ShapeCount& e = shapes[s];
        if (e.b == p->batch && e.sq == p->seqlen_q && e.sk == p->seqlen_k && e.hq == p->num_heads_q &&
            e.hk == p->num_heads_kv && e.d == p->head_dim && e.causal == p->causal && e.dtype == p->dtype)
            return e.calls;
    }
    ShapeCount& e = shapes[used < 64 ? used++ : 63];
    e = ShapeCount{p->batch, p->seqlen_q, p->seqlen_k, p->num_heads_q, p->num_heads_kv, p->head_dim, p->causal,
                   p->dtype, 0};
    return e.calls;
}
}  // namespace

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    int& calls = calls_for(p);
    return ++calls > 2 ? adv::launch<PFp8>(p, stream) : adv::launch<adv::Honest>(p, stream);
}
