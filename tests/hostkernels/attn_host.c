/* attn_host.c — the attnq ABI (kernels/attn_abi.h) implemented on the CPU, for tests of the checker,
 * the launcher and the sandbox on machines without a GPU (tests/test_trust_split.py,
 * tests/test_adversarial_classes.py). Built with gcc and tests/hostkernels/include (a stand-in
 * cuda_runtime.h). One honest body (fp32 softmax, bottom-right causal, GQA, lse, empty rows) and
 * cheats switched on with -DCHEAT=<n>, each the CPU twin of a GPU kernel in tests/adversarial/:
 *
 *   1 WS_QUERY_WORK     the workspace query does the attention when it sees pointers; attn_fwd does nothing
 *   2 WS_QUERY_HALF     attn_fwd computes every other row; the query fills the rest through pointers it stashed
 *   3 RACE_CONTENT_REPLAY  a "race" (lse's last bits change per call) hidden by replaying outputs of identical content
 *   4 RACE_SECOND_CALL  a "race" hidden by replaying the first call's output on the second call of a shape
 *   5 TIMED_BY_COUNT    lower precision (P with 3 mantissa bits) from the (draws+1)-th call of a shape on
 *   6 TIMED_BY_LAYOUT   lower precision on dense calls with the default scale (the old timed phase)
 *   7 PROBE             tries the action -DPROBE=<k> in attn_fwd (1 socket AF_INET, 2 fork, 3 exec,
 *                       4 create a file outside the temp dir, 5 read the parent's memory); returns 99
 *                       when it succeeded, computes honestly when it was refused
 *   8 HANG_ON_LOAD      a constructor that never returns
 *   9 ENTRY_OTHER       asks cudaGetDriverEntryPoint for cuStreamCreate (link with -lcudart); 99 if it got it
 *  10 ENTRY_TENSOR_MAP  asks for cuTensorMapEncodeTiled (allowed: the answer does not matter), then honest
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include "attn_abi.h"

#ifndef CHEAT
#define CHEAT 0
#endif
#ifndef DRAWS
#define DRAWS 2
#endif

static float load(const void* base, int64_t i, int dtype) {
    if (dtype == ATTN_DTYPE_BF16) {
        uint32_t bits = (uint32_t)((const uint16_t*)base)[i] << 16;
        float f;
        memcpy(&f, &bits, 4);
        return f;
    }
    return (float)((const _Float16*)base)[i];
}

static void store(void* base, int64_t i, float f, int dtype) {
    if (dtype == ATTN_DTYPE_BF16) {
        uint32_t bits;
        memcpy(&bits, &f, 4);
        if ((bits & 0x7fffffffu) > 0x7f800000u) { ((uint16_t*)base)[i] = 0x7fc0; return; }
        bits += 0x7fffu + ((bits >> 16) & 1u);  /* round to nearest even */
        ((uint16_t*)base)[i] = (uint16_t)(bits >> 16);
        return;
    }
    ((_Float16*)base)[i] = (_Float16)f;
}

static float coarse(float x) { /* 3 mantissa bits: the "fp8 P" of the timed-phase cheats */
    int e;
    float m = frexpf(x, &e);
    return ldexpf(roundf(m * 16.f) / 16.f, e);
}

static void row(const attn_fwd_params* p, int b, int h, int i, int lowprec, float noise) {
    const int d = p->head_dim, hk = h / (p->num_heads_q / p->num_heads_kv);
    const int last = p->causal ? i + p->seqlen_k - p->seqlen_q : p->seqlen_k - 1;
    const int n = last < p->seqlen_k - 1 ? last + 1 : p->seqlen_k;
    float s[8192], acc[256];
    float m = -INFINITY, l = 0.f;
    for (int j = 0; j < n; ++j) {
        float dot = 0.f;
        for (int c = 0; c < d; ++c)
            dot += load(p->q, b * p->q_batch_stride + i * p->q_row_stride + h * p->q_head_stride + c, p->dtype) *
                   load(p->k, b * p->k_batch_stride + j * p->k_row_stride + hk * p->k_head_stride + c, p->dtype);
        s[j] = dot * p->softmax_scale;
        if (s[j] > m) m = s[j];
    }
    for (int c = 0; c < d; ++c) acc[c] = 0.f;
    for (int j = 0; j < n; ++j) {
        float e = expf(s[j] - m);
        l += e;
        if (lowprec) e = coarse(e);
        for (int c = 0; c < d; ++c)
            acc[c] += e * load(p->v, b * p->v_batch_stride + j * p->v_row_stride + hk * p->v_head_stride + c, p->dtype);
    }
    for (int c = 0; c < d; ++c)
        store(p->o, b * p->o_batch_stride + i * p->o_row_stride + h * p->o_head_stride + c,
              n > 0 ? acc[c] / l : 0.f, p->dtype);
    /* noise: the last bits of lse change (a different summation order), within every tolerance */
    p->lse[((int64_t)b * p->num_heads_q + h) * p->seqlen_q + i] = n > 0 ? m + logf(l) + noise : INFINITY;
}

static void attention(const attn_fwd_params* p, int lowprec, float noise, int stride_rows) {
    for (int b = 0; b < p->batch; ++b)
        for (int h = 0; h < p->num_heads_q; ++h)
            for (int i = 0; i < p->seqlen_q; i += stride_rows) row(p, b, h, i, lowprec, noise);
}

static int honest(const attn_fwd_params* p) {
    if (p->head_dim > 256 || p->seqlen_k > 8192) return 1;
    attention(p, 0, 0.f, 1);
    return 0;
}

#if CHEAT == 2
static attn_fwd_params stash;
static int stashed = 0;
#endif
#if CHEAT == 3 || CHEAT == 4
static unsigned calls = 0;
static uint64_t last_hash = 0;
static void* saved_o = NULL;
static float* saved_lse = NULL;
static uint64_t fnv(const attn_fwd_params* p) {  /* content of q, k, v as the call sees it */
    uint64_t h = 1469598103934665603ull;
    const void* t[3] = {p->q, p->k, p->v};
    const int64_t rows[3] = {p->seqlen_q, p->seqlen_k, p->seqlen_k};
    const int heads[3] = {p->num_heads_q, p->num_heads_kv, p->num_heads_kv};
    const int64_t* st[3] = {&p->q_batch_stride, &p->k_batch_stride, &p->v_batch_stride};
    for (int a = 0; a < 3; ++a)
        for (int b = 0; b < p->batch; ++b)
            for (int64_t r = 0; r < rows[a]; ++r)
                for (int hh = 0; hh < heads[a]; ++hh)
                    for (int c = 0; c < p->head_dim; ++c) {
                        h ^= (uint64_t)(load(t[a], b * st[a][0] + r * st[a][1] + hh * st[a][2] + c, p->dtype) * 4096.f);
                        h *= 1099511628211ull;
                    }
    return h;
}
#endif
#if CHEAT == 5
static unsigned calls5 = 0;
#endif
#if CHEAT == 9 || CHEAT == 10
extern int cudaGetDriverEntryPoint(const char* symbol, void** fn, unsigned long long flags, int* status);
#endif
#if CHEAT == 8
__attribute__((constructor)) static void never_returns(void) {
    for (volatile unsigned long long i = 0;; ++i) {
    }
}
#endif

size_t attn_fwd_workspace_bytes(const attn_fwd_params* p) {
#if CHEAT == 1
    if (p->q != NULL && p->o != NULL) attention(p, 0, 0.f, 1);  /* the whole job, outside the timed call */
#elif CHEAT == 2
    if (stashed) {  /* fill the odd rows of the last call's buffers */
        for (int b = 0; b < stash.batch; ++b)
            for (int h = 0; h < stash.num_heads_q; ++h)
                for (int i = 1; i < stash.seqlen_q; i += 2) row(&stash, b, h, i, 0, 0.f);
    }
#endif
    (void)p;
    return 0;
}

int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    (void)stream;
    if (p->head_dim > 256 || p->seqlen_k > 8192) return 1;
#if CHEAT == 1
    return 0;
#elif CHEAT == 2
    stash = *p;
    stashed = 1;
    attention(p, 0, 0.f, 2);
    return 0;
#elif CHEAT == 3 || CHEAT == 4
    const size_t no = (size_t)p->batch * p->seqlen_q * p->num_heads_q * p->head_dim, nl = (size_t)p->batch * p->num_heads_q * p->seqlen_q;
    ++calls;
    uint64_t h = fnv(p);
    int replay = (CHEAT == 3) ? (saved_o != NULL && h == last_hash) : (calls == 2);
    if (replay) {  /* dense copy back into the output view */
        for (int b = 0; b < p->batch; ++b)
            for (int i = 0; i < p->seqlen_q; ++i)
                for (int hh = 0; hh < p->num_heads_q; ++hh)
                    for (int c = 0; c < p->head_dim; ++c) {
                        size_t k = (((size_t)b * p->seqlen_q + i) * p->num_heads_q + hh) * p->head_dim + c;
                        memcpy((char*)p->o + 2 * (b * p->o_batch_stride + i * p->o_row_stride + hh * p->o_head_stride + c),
                               (char*)saved_o + 2 * k, 2);
                    }
        memcpy(p->lse, saved_lse, nl * 4);
        return 0;
    }
    attention(p, 0, 1e-5f * (float)calls, 1);  /* the "race": different last bits on every call */
    if (saved_o == NULL) { saved_o = malloc(no * 2); saved_lse = malloc(nl * 4); }
    for (int b = 0; b < p->batch; ++b)
        for (int i = 0; i < p->seqlen_q; ++i)
            for (int hh = 0; hh < p->num_heads_q; ++hh)
                for (int c = 0; c < p->head_dim; ++c) {
                    size_t k = (((size_t)b * p->seqlen_q + i) * p->num_heads_q + hh) * p->head_dim + c;
                    memcpy((char*)saved_o + 2 * k,
                           (char*)p->o + 2 * (b * p->o_batch_stride + i * p->o_row_stride + hh * p->o_head_stride + c), 2);
                }
    memcpy(saved_lse, p->lse, nl * 4);
    last_hash = h;
    return 0;
#elif CHEAT == 5
    attention(p, ++calls5 > DRAWS, 0.f, 1);
    return 0;
#elif CHEAT == 6
    const int dense = p->q_head_stride == p->head_dim && p->o_head_stride == p->head_dim &&
                      p->k_head_stride == p->head_dim;
    attention(p, dense && fabsf(p->softmax_scale * sqrtf((float)p->head_dim) - 1.f) < 1e-6f, 0.f, 1);
    return 0;
#elif CHEAT == 7
    int escaped = 0;
#if PROBE == 1
    int s = socket(AF_INET, SOCK_STREAM, 0);
    escaped = s >= 0;
#elif PROBE == 2
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    escaped = pid > 0;
#elif PROBE == 3
    escaped = system("true") == 0;
#elif PROBE == 4
    int fd = open("/tmp/attnq-sandbox-escape", O_CREAT | O_WRONLY, 0600);
    escaped = fd >= 0;
    if (fd >= 0) { close(fd); unlink("/tmp/attnq-sandbox-escape"); }
#elif PROBE == 5
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/mem", (int)getppid());
    int fd = open(path, O_RDONLY);
    escaped = fd >= 0;
    if (fd >= 0) close(fd);
#endif
    if (escaped) return 99;
    return honest(p);
#elif CHEAT == 9 || CHEAT == 10
    void* fn = NULL;
    int st = 0;
    cudaGetDriverEntryPoint(CHEAT == 9 ? "cuStreamCreate" : "cuTensorMapEncodeTiled", &fn, 0, &st);
    if (CHEAT == 9 && fn != NULL) return 99;
    return honest(p);
#else
    return honest(p);
#endif
}
