// attn_fwd with a different signature than the header's: a C++ overload, so no C symbol `attn_fwd`.
#include "attn_abi.h"

int attn_fwd(attn_fwd_params* p, cudaStream_t stream) { return 0; }
