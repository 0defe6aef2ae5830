// timed_by_layout.cu — class "recognisable timed phase", by parameters: at 567c892 only the last checked
// draw used padded strides and a drawn softmax_scale, and every timed call was dense with the default
// scale. This kernel runs with P rounded to fp8 e4m3 exactly on calls that look like that (dense q, k,
// v and o, softmax_scale == 1/sqrt(head_dim)) and honestly otherwise.
// Defense: every call, checked or timed, draws its layout (dense or padded q/o, k/v, both) and its scale
// (default half the time) from one distribution, and every timed output is checked against the fp32
// reference on sampled rows. Expected: timed_output, or reference_tolerance when a checked draw looks
// "timed".
#define ADV_WITH_FP8
#include "attn_abi.h"
#include "common_attn.cuh"
#include <math.h>

namespace {
struct PFp8 : adv::Honest {
    static constexpr bool kPFp8 = true;
};

bool looks_timed(const attn_fwd_params* p) {
    const long long d = p->head_dim;
    const bool dense = p->q_head_stride == d && p->k_head_stride == d && p->v_head_stride == d && p->o_head_stride == d;
    return dense && fabsf(p->softmax_scale * sqrtf((float)d) - 1.f) < 1e-6f;
}
}  // namespace

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    return looks_timed(p) ? adv::launch<PFp8>(p, stream) : adv::launch<adv::Honest>(p, stream);
}
