// Neither attn_abi.h nor extern "C": exports no attn_fwd and no attn_abi_version.
#include <cuda_runtime.h>

struct params { int batch; };

int attn_fwd(const params* p, cudaStream_t stream) { return 0; }
