// cublas_include.cu — a finished library from host code: Q K^T and P V through cuBLAS (strided batched
// GEMMs per batch and kv head into the workspace), a small softmax kernel in between.
// Caught by: source_policy (#include <cublas_v2.h> is refused before nvcc runs).
#include "attn_abi.h"
#include <cublas_v2.h>

static cublasHandle_t handle = nullptr;

extern "C" size_t attn_fwd_workspace_bytes(const attn_fwd_params* p) {
    return (size_t)p->batch * p->num_heads_q * p->seqlen_q * p->seqlen_k * sizeof(float);
}

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (handle == nullptr && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return 1;
    cublasSetStream(handle, stream);
    const float alpha = p->softmax_scale, beta = 0.f;
    float* s = (float*)p->workspace;
    for (int b = 0; b < p->batch; ++b)
        for (int h = 0; h < p->num_heads_q; ++h) {
            const int hk = h / (p->num_heads_q / p->num_heads_kv);
            const char* q = (const char*)p->q + 2 * (b * p->q_batch_stride + h * p->q_head_stride);
            const char* k = (const char*)p->k + 2 * (b * p->k_batch_stride + hk * p->k_head_stride);
            float* sbh = s + ((long long)b * p->num_heads_q + h) * p->seqlen_q * p->seqlen_k;
            cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, p->seqlen_k, p->seqlen_q, p->head_dim, &alpha, k,
                         CUDA_R_16BF, (int)p->k_row_stride, q, CUDA_R_16BF, (int)p->q_row_stride, &beta, sbh,
                         CUDA_R_32F, p->seqlen_k, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        }
    return 0;  // (softmax and P V elided: the policy refuses the file before it matters)
}
