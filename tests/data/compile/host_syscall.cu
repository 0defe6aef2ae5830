// Refused: a raw system call in host code bypasses the symbol check.
#include "attn_abi.h"

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    long ret;
    asm volatile("syscall" : "=a"(ret) : "a"(39L) : "rcx", "r11", "memory");  // getpid
    return ret > 0 ? 0 : 1;
}
