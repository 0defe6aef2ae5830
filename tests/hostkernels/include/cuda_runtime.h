/* CPU-test stand-in for the CUDA runtime header: attn_abi.h needs only cudaStream_t. */
#ifndef ATTNQ_TEST_CUDA_RUNTIME_H
#define ATTNQ_TEST_CUDA_RUNTIME_H
typedef struct CUstream_st* cudaStream_t;
#endif
