/* after_return.cuh — the "work after return" corpus kernels (thread_after_return.cu, thread_at_load.cu,
 * timer_after_return.cu): attn_fwd launches the first half of the query rows on its stream and leaves the
 * second half of this call (`later`) to code that runs after it returned, while the checker times the
 * original; when that code never runs (refused), the second half stays unwritten. */
#pragma once
#include "attn_abi.h"
#include "common_attn.cuh"
#include "libc_walk.cuh"

namespace later {
attn_fwd_params call;
volatile int pending = 0;

template <class T>
__global__ void __launch_bounds__(adv::kWarpsPerBlock * 32) half_rows(const attn_fwd_params p, int second) {
    const long long r = (long long)blockIdx.x * adv::kWarpsPerBlock + (threadIdx.x >> 5);
    const int half = p.seqlen_q / 2, n = second ? p.seqlen_q - half : half;
    if (r >= (long long)p.batch * p.num_heads_q * n) return;
    const long long bh = r / n, row = bh * p.seqlen_q + (second ? half : 0) + r % n;  // lse order: (b, h, i)
    adv::row_attention<T, adv::Honest>(p, row, threadIdx.x & 31);
}

inline void launch_half(const attn_fwd_params* p, int second, cudaStream_t s) {
    const long long n = (long long)p->batch * p->num_heads_q * (second ? p->seqlen_q - p->seqlen_q / 2 : p->seqlen_q / 2);
    const unsigned blocks = (unsigned)((n + adv::kWarpsPerBlock - 1) / adv::kWarpsPerBlock);
    if (blocks == 0) return;
    if (p->dtype == ATTN_DTYPE_BF16)
        half_rows<__nv_bfloat16><<<blocks, adv::kWarpsPerBlock * 32, 0, s>>>(*p, second);
    else
        half_rows<__half><<<blocks, adv::kWarpsPerBlock * 32, 0, s>>>(*p, second);
}

/* The second half of the last call, once (from a thread or a signal handler). */
inline void second_half() {
    if (__atomic_load_n(&pending, __ATOMIC_ACQUIRE)) {
        launch_half(&call, 1, 0);
        __atomic_store_n(&pending, 0, __ATOMIC_RELEASE);
    }
}

/* attn_fwd's part: wait for the last call's half, remember this call, launch the first half. */
inline void first_half(const attn_fwd_params* p, cudaStream_t s) {
    while (__atomic_load_n(&pending, __ATOMIC_ACQUIRE)) {
    }
    call = *p;
    launch_half(p, 0, s);
}

typedef int (*create_fn)(unsigned long*, const void*, void* (*)(void*), void*);
typedef int (*usleep_fn)(unsigned);
}  // namespace later
