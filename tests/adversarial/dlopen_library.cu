// dlopen_library.cu — the same library reached without its header: dlopen("libcublas.so") and
// dlsym("cublasSgemm_v2") at run time, with the prototypes declared by hand so that no forbidden
// header (<dlfcn.h>, <cublas_v2.h>) appears in the source.
// Caught by: symbol_policy (imported `dlopen` / `dlsym` are refused: the library loads code).
#include "attn_abi.h"
#include "common_attn.cuh"

extern "C" void* dlopen(const char* file, int mode);
extern "C" void* dlsym(void* handle, const char* name);

typedef int (*cublas_create_fn)(void**);

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    static void* lib = dlopen("libcublas.so.13", 2 /* RTLD_NOW */);
    static cublas_create_fn create = lib ? (cublas_create_fn)dlsym(lib, "cublasCreate_v2") : nullptr;
    static void* handle = nullptr;
    if (create != nullptr && handle == nullptr) create(&handle);
    // (the GEMMs through dlsym'd cublasGemmEx would go here; the honest body stands in)
    return adv::launch<adv::Honest>(p, stream);
}
