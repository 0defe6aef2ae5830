// python_capi.cu — torch from inside the kernel's host code: the worker that loads the library is a
// Python process with torch imported, so the library declares the CPython API itself (no header) and
// runs torch's SDPA through the embedded interpreter, wrapping the raw pointers with
// __cuda_array_interface__. No dlopen needed: the symbols resolve against the running interpreter.
// Caught by: symbol_policy (PyGILState_Ensure / PyRun_SimpleString are not in the allow-list).
#include "attn_abi.h"

extern "C" int PyGILState_Ensure(void);
extern "C" void PyGILState_Release(int);
extern "C" int PyRun_SimpleString(const char* command);

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    (void)stream;
    char code[2048];
    const char* fmt =
        "import torch\n"
        "class A:\n"
        "  def __init__(s, ptr, shape, ts): s.__cuda_array_interface__ = dict(shape=shape, typestr=ts, data=(ptr, False), version=3)\n"
        "sh = lambda n: (%d, n, %d, %d)\n"
        "q = torch.as_tensor(A(%llu, sh(%d), '<f2'), device='cuda').view(torch.bfloat16).transpose(1, 2)\n"
        "k = torch.as_tensor(A(%llu, (%d, %d, %d, %d), '<f2'), device='cuda').view(torch.bfloat16).transpose(1, 2)\n"
        "v = torch.as_tensor(A(%llu, (%d, %d, %d, %d), '<f2'), device='cuda').view(torch.bfloat16).transpose(1, 2)\n"
        "o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=%s, enable_gqa=True)\n"
        "torch.as_tensor(A(%llu, sh(%d), '<f2'), device='cuda').view(torch.bfloat16).copy_(o.transpose(1, 2))\n";
    int n = 0;
    for (const char* c = fmt; *c; ++c) code[n++] = *c;  // (formatting elided: snprintf is refused too)
    code[n] = 0;
    const int g = PyGILState_Ensure();
    const int rc = PyRun_SimpleString(code);
    PyGILState_Release(g);
    return rc == 0 ? 0 : 1;
}
