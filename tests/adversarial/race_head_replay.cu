// race_head_replay.cu — class "replayed repeats": the racy split-KV of race_slice_replay.cu remembered per
// (batch, query head) instead (a finer slice that also survives a permutation of the query heads in MQA).
// Defense: the repeats run in a second candidate process that never saw draw 0. Expected: determinism.
#define SLICE_PER_Q_HEAD 1
#include "slice_replay.cuh"

extern "C" size_t attn_fwd_workspace_bytes(const attn_fwd_params* p) { return race::workspace_bytes(p); }

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) { return slice::launch(p, stream); }
