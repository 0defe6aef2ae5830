/*
 * attn_abi.h — the attnq kernel ABI (version 1). The public contract between a candidate kernel and
 * the attnq harness. A candidate is ONE .cu file that includes this header and defines, with C
 * linkage:
 *
 *   int attn_fwd(const attn_fwd_params* p, cudaStream_t stream);
 *       Launch the attention forward pass on `stream`. Return 0 when the work was launched; any
 *       nonzero value means "this configuration is unsupported" (reported per scenario, and counted
 *       as a failed scenario). Never allocate device memory, never synchronize the device.
 *
 *   size_t attn_fwd_workspace_bytes(const attn_fwd_params* p);      (optional)
 *       Scratch bytes the kernel needs; the harness allocates them and passes p->workspace. The harness
 *       asks BEFORE any data exists, once per layout of a scenario, on a COPY of the params whose q, k,
 *       v, o, lse and workspace are NULL (workspace_bytes 0): shapes, strides, scale and flags are
 *       real, data pointers are not. Answer from those fields only; do not launch work here (the
 *       harness synchronizes the device after the query and poisons every output before every call,
 *       so nothing done here can reach a call's outputs).
 *
 * Every call, checked or timed, looks alike: its layout (dense, or head strides padded by 8 elements
 * on q/o, k/v or both), its softmax_scale and its input values are drawn per call; the same buffers
 * are reused within a scenario. The workspace holds garbage (0xFF bytes) on entry to every call:
 * zero what you need with cudaMemsetAsync on the given stream. The kernel runs in a process of its
 * own (the "launcher"), sandboxed: host code gets no network, no new processes and no writes outside
 * a temp directory; cudaGetDriverEntryPoint* resolves cuTensorMap* functions only.
 *
 * Shapes (all tensors row-major, last dimension contiguous; strides below are in ELEMENTS):
 *   q, o : [batch, seqlen_q, num_heads_q,  head_dim]   dtype (bf16 or fp16)
 *   k, v : [batch, seqlen_k, num_heads_kv, head_dim]   dtype
 *   lse  : [batch, num_heads_q, seqlen_q]              fp32, contiguous
 *   Query head h reads kv head h / (num_heads_q / num_heads_kv)   (MHA, GQA, MQA).
 *
 * Semantics, per (b, h, i):
 *   s_j   = softmax_scale * dot(q[b,i,h,:], k[b,j,h_kv,:])        for every visible key j
 *   lse   = log(sum_j exp(s_j))           (natural log; the row max and the scale are included)
 *   o     = sum_j exp(s_j - lse) * v[b,j,h_kv,:]
 *   causal is bottom-right aligned (FlashAttention >= 2.1): query i sees key j iff
 *   j <= i + seqlen_k - seqlen_q. A row that sees no key has o = 0 and lse = +INFINITY.
 */
#ifndef ATTN_ABI_H
#define ATTN_ABI_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#define ATTN_ABI_VERSION 1

/* The harness compiles with -DATTN_HARNESS_ABI_VERSION=<its version>; a stale copy of this header
 * fails at compile time with a message that names both versions. */
#if defined(ATTN_HARNESS_ABI_VERSION) && (ATTN_HARNESS_ABI_VERSION != ATTN_ABI_VERSION)
#error "attn_abi.h ABI version does not match the attnq harness: update your copy of attn_abi.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum attn_dtype {
    ATTN_DTYPE_BF16 = 0,
    ATTN_DTYPE_FP16 = 1
} attn_dtype;

typedef struct attn_fwd_params {
    int32_t abi_version;      /* == ATTN_ABI_VERSION; the harness sets it, a kernel may check it */
    int32_t dtype;            /* attn_dtype of q, k, v and o */

    const void* q;            /* [batch, seqlen_q, num_heads_q,  head_dim] */
    const void* k;            /* [batch, seqlen_k, num_heads_kv, head_dim] */
    const void* v;            /* [batch, seqlen_k, num_heads_kv, head_dim] */
    void* o;                  /* [batch, seqlen_q, num_heads_q,  head_dim] */
    float* lse;               /* [batch, num_heads_q, seqlen_q], contiguous fp32 */

    int64_t q_batch_stride, q_row_stride, q_head_stride;   /* elements */
    int64_t k_batch_stride, k_row_stride, k_head_stride;
    int64_t v_batch_stride, v_row_stride, v_head_stride;
    int64_t o_batch_stride, o_row_stride, o_head_stride;

    int32_t batch;
    int32_t seqlen_q;
    int32_t seqlen_k;
    int32_t num_heads_q;
    int32_t num_heads_kv;     /* divides num_heads_q */
    int32_t head_dim;         /* 64, 96, 128, 192 or 256 in the harness's suites */

    float softmax_scale;      /* usually 1/sqrt(head_dim) */
    int32_t causal;           /* 0 or 1; bottom-right aligned */

    void* workspace;          /* attn_fwd_workspace_bytes(p) bytes, or NULL when 0 */
    size_t workspace_bytes;

    int32_t num_sms;          /* multiprocessors on the device running the kernel */
    int32_t reserved[7];      /* zero; room for later fields without breaking the layout */
} attn_fwd_params;

/* Exported so the harness can refuse a library built against another ABI version at load time. */
int attn_abi_version(void) { return ATTN_ABI_VERSION; }

int attn_fwd(const attn_fwd_params* p, cudaStream_t stream);
size_t attn_fwd_workspace_bytes(const attn_fwd_params* p);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_ABI_H */
