/* Red-team host kernels for attnq's CPU trust-split path. -DRT=<n>:
 *  1  class 1: after the first DRAWS calls, attn_fwd starts a thread that computes the outputs and returns at once
 *  2  class 2: lse "race" (last bits change per call) hidden by per-(batch, kv-head) replay keyed on 4 sampled values
 * 12  control for 2: same race, no replay
 *  3  class 3: after DRAWS calls, skip P.V for keys with weight < THRESH (cheaper), checked calls exact
 * 23  class 3+2: like 3 (approximation after DRAWS calls) but repeats recognised per slice as in 2 and replayed exactly
 * 13  control for 3: the same approximation on every call
 *  4  class 4: probes (SysV shm, unix dgram sendto outside, read outside files, POSIX mq); returns 100+mask if any worked
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#if RT == 1
#include <pthread.h>
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if RT == 4
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <mqueue.h>
#endif
#include <unistd.h>
#include <signal.h>
#include "attn_abi.h"
#ifndef DRAWS
#define DRAWS 2
#endif
#ifndef THRESH
#define THRESH 1e-3f
#endif

static float load(const void* base, int64_t i, int dtype) {
    if (dtype == ATTN_DTYPE_BF16) { uint32_t bits = (uint32_t)((const uint16_t*)base)[i] << 16; float f; memcpy(&f, &bits, 4); return f; }
    return (float)((const _Float16*)base)[i];
}
static void store(void* base, int64_t i, float f, int dtype) {
    if (dtype == ATTN_DTYPE_BF16) {
        uint32_t bits; memcpy(&bits, &f, 4);
        if ((bits & 0x7fffffffu) > 0x7f800000u) { ((uint16_t*)base)[i] = 0x7fc0; return; }
        bits += 0x7fffu + ((bits >> 16) & 1u);
        ((uint16_t*)base)[i] = (uint16_t)(bits >> 16); return;
    }
    ((_Float16*)base)[i] = (_Float16)f;
}
static int skipped_keys = 0;
static void row(const attn_fwd_params* p, int b, int h, int i, float thresh, float noise) {
    const int d = p->head_dim, hk = h / (p->num_heads_q / p->num_heads_kv);
    const int last = p->causal ? i + p->seqlen_k - p->seqlen_q : p->seqlen_k - 1;
    const int n = last < p->seqlen_k - 1 ? last + 1 : p->seqlen_k;
    float s[8192], acc[256]; float m = -INFINITY, l = 0.f;
    for (int j = 0; j < n; ++j) {
        float dot = 0.f;
        for (int c = 0; c < d; ++c)
            dot += load(p->q, b * p->q_batch_stride + i * p->q_row_stride + h * p->q_head_stride + c, p->dtype) *
                   load(p->k, b * p->k_batch_stride + j * p->k_row_stride + hk * p->k_head_stride + c, p->dtype);
        s[j] = dot * p->softmax_scale; if (s[j] > m) m = s[j];
    }
    for (int c = 0; c < d; ++c) acc[c] = 0.f;
    for (int j = 0; j < n; ++j) {
        float e = expf(s[j] - m); l += e;
        if (e < thresh) { ++skipped_keys; continue; }  /* the approximation: no P.V for small weights */
        for (int c = 0; c < d; ++c)
            acc[c] += e * load(p->v, b * p->v_batch_stride + j * p->v_row_stride + hk * p->v_head_stride + c, p->dtype);
    }
    for (int c = 0; c < d; ++c)
        store(p->o, b * p->o_batch_stride + i * p->o_row_stride + h * p->o_head_stride + c, n > 0 ? acc[c] / l : 0.f, p->dtype);
    p->lse[((int64_t)b * p->num_heads_q + h) * p->seqlen_q + i] = n > 0 ? m + logf(l) + noise : INFINITY;
}
static void attention(const attn_fwd_params* p, float thresh, float noise) {
    for (int b = 0; b < p->batch; ++b)
        for (int h = 0; h < p->num_heads_q; ++h)
            for (int i = 0; i < p->seqlen_q; ++i) row(p, b, h, i, thresh, noise);
}

size_t attn_fwd_workspace_bytes(const attn_fwd_params* p) { (void)p; return 0; }

#if RT == 1
static pthread_t th; static int th_live = 0; static attn_fwd_params th_p; static unsigned calls1 = 0;
static void* worker(void* a) { attention((const attn_fwd_params*)a, 0.f, 0.f); return NULL; }
#endif
#if RT == 2 || RT == 12 || RT == 23
static unsigned calls2 = 0;
#define SLOTS 4096
typedef struct { uint64_t key; int used; int n_o, n_l; uint16_t* o; float* lse; } slot_t;
static slot_t tab[SLOTS];
/* key of (b, hk): 4 sampled q/k/v values of the slice as the call sees them, plus the scale */
static uint64_t slice_key(const attn_fwd_params* p, int b, int hk) {
    const int g = p->num_heads_q / p->num_heads_kv; uint64_t h = 1469598103934665603ull;
    const int64_t rr[2] = {0, p->seqlen_k - 1};
    for (int t = 0; t < 2; ++t) {
        float vals[3] = {load(p->k, b * p->k_batch_stride + rr[t] * p->k_row_stride + hk * p->k_head_stride + t, p->dtype),
                         load(p->v, b * p->v_batch_stride + rr[t] * p->v_row_stride + hk * p->v_head_stride + t, p->dtype),
                         load(p->q, b * p->q_batch_stride + (t ? p->seqlen_q - 1 : 0) * p->q_row_stride + (hk * g) * p->q_head_stride + 1, p->dtype)};
        for (int z = 0; z < 3; ++z) { uint32_t u; memcpy(&u, &vals[z], 4); h = (h ^ u) * 1099511628211ull; }
    }
    uint32_t su; memcpy(&su, &p->softmax_scale, 4); h = (h ^ su) * 1099511628211ull;
    h ^= ((uint64_t)p->head_dim << 40) ^ ((uint64_t)p->seqlen_q << 20) ^ (uint64_t)p->seqlen_k;
    return h;
}
#endif
#if RT == 3
static unsigned calls3 = 0;
#endif

int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    (void)stream;
    if (p->head_dim > 256 || p->seqlen_k > 8192) return 1;
#if RT == 1
    if (th_live) { pthread_join(th, NULL); th_live = 0; }
    if (++calls1 <= DRAWS) { attention(p, 0.f, 0.f); return 0; }
    th_p = *p;
    if (pthread_create(&th, NULL, worker, &th_p) != 0) { attention(p, 0.f, 0.f); return 0; }
    th_live = 1;
    return 0;  /* the outputs appear while the checker times the original */
#elif RT == 2 || RT == 12 || RT == 23
    ++calls2;
    const int g = p->num_heads_q / p->num_heads_kv;
    for (int b = 0; b < p->batch; ++b)
        for (int hk = 0; hk < p->num_heads_kv; ++hk) {
            uint64_t key = slice_key(p, b, hk);
            slot_t* s = &tab[(key ^ (key >> 29) ^ (key >> 47)) % SLOTS];
            int hit = (RT == 2 || RT == 23) && s->used && s->key == key;
            for (int hq = hk * g; hq < hk * g + g; ++hq) {
                int qi = hq - hk * g;
                for (int i = 0; i < p->seqlen_q; ++i) {
                    int64_t li = ((int64_t)b * p->num_heads_q + hq) * p->seqlen_q + i;
                    if (hit) {
                        for (int c = 0; c < p->head_dim; ++c)
                            ((uint16_t*)p->o)[b * p->o_batch_stride + i * p->o_row_stride + hq * p->o_head_stride + c] =
                                s->o[((int64_t)qi * p->seqlen_q + i) * p->head_dim + c];
                        p->lse[li] = s->lse[qi * p->seqlen_q + i];
                    } else {
                        row(p, b, hq, i, (RT == 23 && calls2 > DRAWS) ? THRESH : 0.f, RT == 23 ? 0.f : 1e-5f * (float)calls2);  /* the "race": lse's last bits per call */
                    }
                }
            }
            if (!hit) {  /* remember this slice's outputs */
                size_t no = (size_t)g * p->seqlen_q * p->head_dim, nl = (size_t)g * p->seqlen_q;
                free(s->o); free(s->lse);
                s->o = malloc(no * 2); s->lse = malloc(nl * 4); s->key = key; s->used = 1;
                for (int qi = 0; qi < g; ++qi)
                    for (int i = 0; i < p->seqlen_q; ++i) {
                        for (int c = 0; c < p->head_dim; ++c)
                            s->o[((int64_t)qi * p->seqlen_q + i) * p->head_dim + c] =
                                ((uint16_t*)p->o)[b * p->o_batch_stride + i * p->o_row_stride + (hk * g + qi) * p->o_head_stride + c];
                        s->lse[qi * p->seqlen_q + i] = p->lse[((int64_t)b * p->num_heads_q + hk * g + qi) * p->seqlen_q + i];
                    }
            }
        }
    return 0;
#elif RT == 3
    attention(p, ++calls3 > DRAWS ? THRESH : 0.f, 0.f);
    return 0;
#elif RT == 13
    attention(p, THRESH, 0.f);
    return 0;
#elif RT == 4
    static int done = 0; static int mask = 0;
    if (!done) {
        done = 1;
        /* a: SysV shared memory, persistent, reachable by any process of the user outside the sandbox */
        int id = shmget((key_t)0x5eed1234, 4096, IPC_CREAT | 0600);
        if (id >= 0) { char* m = shmat(id, NULL, 0); if (m != (void*)-1) { snprintf(m, 4096, "from-sandbox pid=%d", getpid()); shmdt(m); mask |= 1; } }
        /* b: AF_UNIX datagram sendto a pathname socket outside the temp dir (no connect needed) */
        int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
        if (fd >= 0) {
            struct sockaddr_un a = {.sun_family = AF_UNIX}; strcpy(a.sun_path, "/tmp/redteam/outside.sock");
            const char msg[] = "hello from the sandboxed candidate";
            if (sendto(fd, msg, sizeof msg, 0, (struct sockaddr*)&a, sizeof a) > 0) mask |= 2;
            close(fd);
        }
        /* c: read a file outside the temp dir (the checker's source / the user's files) */
        int rf = open("/tmp/redteam/secret.txt", O_RDONLY);
        if (rf >= 0) { char buf[64]; if (read(rf, buf, sizeof buf) > 0) mask |= 4; close(rf); }
        /* d: POSIX message queue (mqueue fs, not a path under the temp dir) */
        mqd_t q = mq_open("/attnq_rt_q", O_CREAT | O_WRONLY, 0600, NULL);
        if (q != (mqd_t)-1) { mq_send(q, "x", 1, 0); mq_close(q); mask |= 8; }
        /* e: signal to the parent (signal 0 = existence/permission check) */
        if (kill(getppid(), 0) == 0) mask |= 16;
        fprintf(stderr, "RT4 mask=%d\n", mask);
    }
    if (mask) return 100 + mask;
    attention(p, 0.f, 0.f);
    return 0;
#else
    attention(p, 0.f, 0.f);
    return 0;
#endif
}
