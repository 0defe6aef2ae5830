// race_slice_replay.cu — class "replayed repeats", the red team's rt2 on the GPU: a racy split-KV
// (unordered atomics) whose output is remembered per (batch, kv head) slice, keyed by sampled q/k/v of
// the slice; a call whose slices were all seen gets them back wherever they moved (slice_replay.cuh).
// Survived the reordered repeats while they ran in draw 0's process. Defense: the repeats run in a second
// candidate process that never saw draw 0. Expected: determinism.
#include "slice_replay.cuh"

extern "C" size_t attn_fwd_workspace_bytes(const attn_fwd_params* p) { return race::workspace_bytes(p); }

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) { return slice::launch(p, stream); }
