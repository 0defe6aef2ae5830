/* attn_host.c — the attnq ABI (kernels/attn_abi.h) implemented on the CPU, for tests of the checker,
 * the launcher and the sandbox on machines without a GPU (tests/test_trust_split.py,
 * tests/test_adversarial_classes.py). Built with gcc and tests/hostkernels/include (a stand-in
 * cuda_runtime.h) and tests/adversarial (attnq_libc_walk.h). One honest body (fp32 softmax, bottom-right
 * causal, GQA, lse, empty rows) and
 * cheats switched on with -DCHEAT=<n>, each the CPU twin of a GPU kernel in tests/adversarial/:
 *
 *   1 WS_QUERY_WORK     the workspace query does the attention when it sees pointers; attn_fwd does nothing
 *   2 WS_QUERY_HALF     attn_fwd computes every other row; the query fills the rest through pointers it stashed
 *   3 RACE_CONTENT_REPLAY  a "race" (lse's last bits change per call) hidden by replaying outputs of identical content
 *   4 RACE_SECOND_CALL  a "race" hidden by replaying the first call's output on the second call of a shape
 *   5 TIMED_BY_COUNT    lower precision (P with 3 mantissa bits) from the (draws+1)-th call of a shape on
 *   6 TIMED_BY_LAYOUT   lower precision on dense calls with the default scale (the old timed phase)
 *   7 PROBE             tries the action -DPROBE=<k> in attn_fwd (1 socket AF_INET, 2 fork, 3 exec,
 *                       4 create a file outside the temp dir, 5 read the parent's memory; through the libc
 *                       walk of attnq_libc_walk.h: 6 read the file -DPROBE_PATH, 7 SysV shared memory,
 *                       8 sendto the unix datagram socket -DPROBE_PATH, 9 a POSIX message queue, 10 a
 *                       key in the user's keyring, 11 dlopen the library -DPROBE_PATH, 12 dlmopen it into a new
 *                       namespace, 13 dlopen and dlclose it before returning); returns 99 when it
 *                       succeeded, computes honestly when it was refused
 *   8 HANG_ON_LOAD      a constructor that never returns
 *   9 ENTRY_OTHER       asks cudaGetDriverEntryPoint for cuStreamCreate (link with -lcudart); 99 if it got it
 *  10 ENTRY_TENSOR_MAP  asks for cuTensorMapEncodeTiled (allowed: the answer does not matter), then honest
 * Work after return (half the query rows in attn_fwd, the other half after it returned; pthread_create,
 * setitimer, timer_create found through the libc walk; when the mechanism is refused, that half stays unwritten):
 *  11 THREAD_AFTER_RETURN  a thread started in attn_fwd waits for the return, then computes
 *  12 THREAD_AT_LOAD       a thread started by a constructor takes each call's second half as a job
 *  13 ITIMER_AFTER_RETURN  a SIGALRM handler armed with setitimer(ITIMER_REAL, 200 us) computes it
 *  14 POSIX_TIMER          the same through timer_create(SIGEV_SIGNAL) + timer_settime
 * Replay of per-slice content (the determinism repeats' reordering keeps each slice's content):
 *  15 RACE_SLICE_REPLAY    a "race" (lse's last bits per call) hidden by a cache per (batch, kv head) keyed
 *                          by sampled q/k/v values and the scale
 *  16 RACE_HEAD_REPLAY     the same race, cached per (batch, query head) keyed by the head's first q row
 * A channel between the two candidate processes (both map the candidate's arena):
 *  17 RACE_ARENA_SLACK     a "race" (lse's last bits per call and process) whose draws are kept in a table in
 *                          the arena's page slack, past its last guard band (asks for a 256-byte workspace to
 *                          find it: the slack starts 64 KiB past the workspace's end): the repeat process
 *                          looks its call up by a permutation-invariant content key and replays the draw
 *  18 RACE_NO_CHANNEL      the same race without the table (the control)
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
#if CHEAT == 7 && PROBE >= 6 || CHEAT >= 11 && CHEAT <= 14
#include "attnq_libc_walk.h"
#endif
#if CHEAT >= 11 && CHEAT <= 14
#include <signal.h>
#include <sys/time.h>
#include <time.h>
static attn_fwd_params later;  /* the call whose second half runs after it returned */
static volatile int pending = 0;
static void rows_of(const attn_fwd_params* p, int lo, int hi) {
    for (int b = 0; b < p->batch; ++b)
        for (int h = 0; h < p->num_heads_q; ++h)
            for (int i = lo; i < hi; ++i) row(p, b, h, i, 0, 0.f);
}
static void second_half(void) {
    if (__atomic_load_n(&pending, __ATOMIC_ACQUIRE)) {
        rows_of(&later, later.seqlen_q / 2, later.seqlen_q);
        __atomic_store_n(&pending, 0, __ATOMIC_RELEASE);
    }
}
typedef int (*create_fn)(unsigned long*, const void*, void* (*)(void*), void*);
#endif
#if CHEAT == 11 || CHEAT == 12
#ifndef LATE_US
#define LATE_US 100  /* how long after attn_fwd returned the thread writes its half */
#endif
static int (*sleep_us)(unsigned);
static void* after_return(void* a) {  /* 11: one call's half; 12: every call's, forever */
    (void)a;
    do {
        while (!__atomic_load_n(&pending, __ATOMIC_ACQUIRE)) sleep_us(50);
        sleep_us(LATE_US);  /* attn_fwd has returned by now */
        second_half();
    } while (CHEAT == 12);
    return NULL;
}
#endif
#if CHEAT == 12
__attribute__((constructor)) static void start_worker(void) {
    create_fn cr = (create_fn)rt_resolve("pthread_create");
    sleep_us = (int (*)(unsigned))rt_resolve("usleep");
    unsigned long t;
    if (cr && sleep_us) cr(&t, NULL, after_return, NULL);
}
#endif
#if CHEAT == 13 || CHEAT == 14
static void on_alarm(int sig) { (void)sig; second_half(); }
#endif
#if CHEAT == 15 || CHEAT == 16
#define SLOTS 1024
typedef struct { uint64_t key; int used; uint16_t* o; float* lse; } slot_t;
static slot_t tab[SLOTS];
static unsigned calls15 = 0;
#endif
#if CHEAT == 17 || CHEAT == 18
typedef struct { uint64_t key; float noise; uint32_t used; } entry17;
static unsigned calls17 = 0;
static uint64_t mix17(uint64_t x) { x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; return x; }
static uint64_t content17(const attn_fwd_params* p) {  /* a sum over elements of a hash of each: any order */
    uint64_t key = mix17((uint64_t)(uint32_t)(p->softmax_scale * 1e6f));
    const void* t[3] = {p->q, p->k, p->v};
    for (int z = 0; z < 3; ++z) {
        const int s = z == 0 ? p->seqlen_q : p->seqlen_k, h = z == 0 ? p->num_heads_q : p->num_heads_kv;
        const int64_t sb = z == 0 ? p->q_batch_stride : z == 1 ? p->k_batch_stride : p->v_batch_stride;
        const int64_t sr = z == 0 ? p->q_row_stride : z == 1 ? p->k_row_stride : p->v_row_stride;
        const int64_t sh = z == 0 ? p->q_head_stride : z == 1 ? p->k_head_stride : p->v_head_stride;
        for (int b = 0; b < p->batch; ++b)
            for (int i = 0; i < s; ++i)
                for (int hh = 0; hh < h; ++hh)
                    for (int c = 0; c < p->head_dim; ++c)
                        key += mix17(((uint64_t)z << 16 | ((const uint16_t*)t[z])[b * sb + i * sr + hh * sh + c]) + 1);
    }
    return key;
}
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
#if CHEAT == 17 || CHEAT == 18
    (void)p;
    return 256;
#elif CHEAT == 1
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
#elif PROBE == 6
    int (*open_)(const char*, int, ...) = rt_resolve("open");
    long (*read_)(int, void*, size_t) = rt_resolve("read");
    char buf[16];
    int fd = open_ ? open_(PROBE_PATH, O_RDONLY) : -1;
    escaped = fd >= 0 && read_ && read_(fd, buf, sizeof buf) > 0;
#elif PROBE == 7
    int (*shmget_)(int, size_t, int) = rt_resolve("shmget");
    int (*shmctl_)(int, int, void*) = rt_resolve("shmctl");
    int id = shmget_ ? shmget_(0 /* IPC_PRIVATE */, 4096, 01000 /* IPC_CREAT */ | 0600) : -1;
    escaped = id >= 0;
    if (id >= 0 && shmctl_) shmctl_(id, 0 /* IPC_RMID */, NULL);
#elif PROBE == 8
    int (*socket_)(int, int, int) = rt_resolve("socket");
    long (*sendto_)(int, const void*, size_t, int, const void*, unsigned) = rt_resolve("sendto");
    struct { unsigned short family; char path[108]; } to = {1 /* AF_UNIX */, PROBE_PATH};
    int s = socket_ ? socket_(1, 2 /* SOCK_DGRAM */, 0) : -1;
    escaped = s >= 0 && sendto_ && sendto_(s, "hello", 5, 0, &to, sizeof to) == 5;
#elif PROBE == 9
    int (*mq_open_)(const char*, int, ...) = rt_resolve("mq_open");
    int (*mq_unlink_)(const char*) = rt_resolve("mq_unlink");
    int q = mq_open_ ? mq_open_("/attnq-probe", O_CREAT | O_WRONLY, 0600, NULL) : -1;
    escaped = q >= 0;
    if (q >= 0 && mq_unlink_) mq_unlink_("/attnq-probe");
#elif PROBE == 10
    long (*syscall_)(long, ...) = rt_resolve("syscall");
    long key = syscall_ ? syscall_(248 /* add_key */, "user", "attnq-probe", "x", 1L, -2L /* user keyring */) : -1;
    escaped = key >= 0;
    if (key >= 0) syscall_(250 /* keyctl */, 21L /* KEYCTL_INVALIDATE */, key);
#elif PROBE == 11
    void* (*dlopen_)(const char*, int) = rt_resolve("dlopen");
    escaped = dlopen_ && dlopen_(PROBE_PATH, 2 /* RTLD_NOW */) != NULL;
#elif PROBE == 12
    void* (*dlmopen_)(long, const char*, int) = rt_resolve("dlmopen");
    escaped = dlmopen_ && dlmopen_(-1 /* LM_ID_NEWLM */, PROBE_PATH, 2 /* RTLD_NOW */) != NULL;
#elif PROBE == 13
    void* (*dlopen_)(const char*, int) = rt_resolve("dlopen");
    int (*dlclose_)(void*) = rt_resolve("dlclose");
    void* h = dlopen_ ? dlopen_(PROBE_PATH, 2 /* RTLD_NOW */) : NULL;
    escaped = h != NULL;
    if (h && dlclose_) dlclose_(h);
#endif
    if (escaped) return 99;
    return honest(p);
#elif CHEAT >= 11 && CHEAT <= 14
    while (__atomic_load_n(&pending, __ATOMIC_ACQUIRE)) {  /* the last call's half is still to do */
    }
    later = *p;
    rows_of(p, 0, p->seqlen_q / 2);
    int armed = 0;
#if CHEAT == 11
    static create_fn cr;
    if (!cr) { cr = (create_fn)rt_resolve("pthread_create"); sleep_us = (int (*)(unsigned))rt_resolve("usleep"); }
    unsigned long t;
    __atomic_store_n(&pending, 1, __ATOMIC_RELEASE);
    armed = cr && sleep_us && cr(&t, NULL, after_return, NULL) == 0;
#elif CHEAT == 12
    __atomic_store_n(&pending, 1, __ATOMIC_RELEASE);  /* the constructor's thread, if it exists */
    armed = 1;
#else
    int (*sa)(int, const struct sigaction*, struct sigaction*) = rt_resolve("sigaction");
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_handler = on_alarm;
    act.sa_flags = SA_RESTART;
    __atomic_store_n(&pending, 1, __ATOMIC_RELEASE);
    if (sa && sa(SIGALRM, &act, NULL) == 0) {
#if CHEAT == 13
        int (*sit)(int, const struct itimerval*, struct itimerval*) = rt_resolve("setitimer");
        struct itimerval when = {{0, 0}, {0, 200}};
        armed = sit && sit(ITIMER_REAL, &when, NULL) == 0;
#else
        int (*tc)(clockid_t, struct sigevent*, timer_t*) = rt_resolve("timer_create");
        int (*ts)(timer_t, int, const struct itimerspec*, struct itimerspec*) = rt_resolve("timer_settime");
        static timer_t tid;
        static int have = 0;
        struct sigevent ev;
        memset(&ev, 0, sizeof ev);
        ev.sigev_notify = SIGEV_SIGNAL;
        ev.sigev_signo = SIGALRM;
        if (!have && tc && tc(CLOCK_MONOTONIC, &ev, &tid) == 0) have = 1;
        struct itimerspec when = {{0, 0}, {0, 200000}};
        armed = have && ts && ts(tid, 0, &when, NULL) == 0;
#endif
    }
#endif
    if (!armed) __atomic_store_n(&pending, 0, __ATOMIC_RELEASE);  /* refused: the second half stays unwritten */
    return 0;
#elif CHEAT == 15 || CHEAT == 16
    ++calls15;
    const int g = p->num_heads_q / p->num_heads_kv;
    const int groups = CHEAT == 15 ? p->num_heads_kv : p->num_heads_q, per = CHEAT == 15 ? g : 1;
    for (int b = 0; b < p->batch; ++b)
        for (int s0 = 0; s0 < groups; ++s0) {
            const int hk = CHEAT == 15 ? s0 : s0 / g;
            uint64_t key = 1469598103934665603ull;
            float vals[6] = {load(p->k, b * p->k_batch_stride + hk * p->k_head_stride, p->dtype),
                             load(p->v, b * p->v_batch_stride + (p->seqlen_k - 1) * p->v_row_stride + hk * p->v_head_stride + 1, p->dtype),
                             load(p->q, b * p->q_batch_stride + s0 * per * p->q_head_stride, p->dtype),
                             load(p->q, b * p->q_batch_stride + (p->seqlen_q - 1) * p->q_row_stride + s0 * per * p->q_head_stride + 1, p->dtype),
                             p->softmax_scale, (float)p->seqlen_k};
            for (int z = 0; z < 6; ++z) { uint32_t u; memcpy(&u, &vals[z], 4); key = (key ^ u) * 1099511628211ull; }
            slot_t* sl = &tab[(key ^ (key >> 31)) % SLOTS];
            const int hit = sl->used && sl->key == key;
            const size_t no = (size_t)per * p->seqlen_q * p->head_dim, nl = (size_t)per * p->seqlen_q;
            if (!hit) { free(sl->o); free(sl->lse); sl->o = malloc(no * 2); sl->lse = malloc(nl * 4); sl->key = key; sl->used = 1; }
            for (int hq = s0 * per; hq < s0 * per + per; ++hq)
                for (int i = 0; i < p->seqlen_q; ++i) {
                    const int64_t li = ((int64_t)b * p->num_heads_q + hq) * p->seqlen_q + i;
                    const size_t at = ((size_t)(hq - s0 * per) * p->seqlen_q + i) * p->head_dim;
                    if (!hit) row(p, b, hq, i, 0, 1e-5f * (float)calls15);  /* the "race" */
                    for (int c = 0; c < p->head_dim; ++c) {
                        uint16_t* o = (uint16_t*)p->o + b * p->o_batch_stride + i * p->o_row_stride + hq * p->o_head_stride + c;
                        if (hit) *o = sl->o[at + c]; else sl->o[at + c] = *o;
                    }
                    if (hit) p->lse[li] = sl->lse[at / p->head_dim]; else sl->lse[at / p->head_dim] = p->lse[li];
                }
        }
    return 0;
#elif CHEAT == 17 || CHEAT == 18
    ++calls17;
    float noise = 1e-6f * (float)(1 + (calls17 * 7u + (unsigned)getpid()) % 16u);  /* differs per call and process */
#if CHEAT == 17
    const uint64_t key = content17(p);
    char* slack = (char*)p->workspace + p->workspace_bytes + 65536;  /* the arena's end, before the fix */
    entry17* tab17 = (entry17*)slack;
    const size_t n = (size_t)((((uintptr_t)slack + 4095) & ~(uintptr_t)4095) - (uintptr_t)slack) / sizeof(entry17);
    size_t k = 0;
    while (k < n && tab17[k].used == 0x5EEDu && tab17[k].key != key) ++k;
    if (k < n && tab17[k].used == 0x5EEDu) noise = tab17[k].noise;  /* the source's draw, from the other process */
    else if (k < n) { tab17[k].key = key; tab17[k].noise = noise; tab17[k].used = 0x5EEDu; }
#endif
    attention(p, 0, noise, 1);
    return 0;
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
