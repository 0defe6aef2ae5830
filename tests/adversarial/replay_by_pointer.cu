// replay_by_pointer.cu — memoization by buffer identity, kept in a static HOST table (no allocation,
// so it passes the policy). The first two times a (q, k, v, o, lse, shape) tuple is seen the kernel
// computes honestly; from the third time on it returns without launching anything ("same buffers,
// same answer"). Tuned against a harness whose correctness phase sees each buffer at most twice and
// whose timing loop reuses the buffers.
// Caught by: timed_output on fresh_inputs (every timed call gets new input values and a re-poisoned o,
// and its output is compared with the original kernel's on the same inputs).
#include "attn_abi.h"
#include "common_attn.cuh"

namespace {
struct Seen {
    const void *q, *k, *v;
    void* o;
    float* lse;
    int b, sq, sk, hq, hk, d;
    int count;
};
constexpr int kSlots = 64;
Seen table[kSlots];
int used = 0;

bool same(const Seen& s, const attn_fwd_params* p) {
    return s.q == p->q && s.k == p->k && s.v == p->v && s.o == p->o && s.lse == p->lse && s.b == p->batch &&
           s.sq == p->seqlen_q && s.sk == p->seqlen_k && s.hq == p->num_heads_q && s.hk == p->num_heads_kv &&
           s.d == p->head_dim;
}
}  // namespace

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    for (int s = 0; s < used; ++s) {
        if (same(table[s], p)) {
            if (++table[s].count > 2) return 0;  // replay: o already holds the answer for these buffers
            return adv::launch<adv::Honest>(p, stream);
        }
    }
    Seen& e = table[used < kSlots ? used++ : kSlots - 1];
    e = Seen{p->q, p->k, p->v, p->o, p->lse, p->batch, p->seqlen_q, p->seqlen_k, p->num_heads_q, p->num_heads_kv,
             p->head_dim, 1};
    return adv::launch<adv::Honest>(p, stream);
}
