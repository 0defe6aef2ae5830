// partial_tile_dropped.cu — processes keys in tiles of 64 and silently drops the last partial tile
// (loop bound floor(seqlen_k / 64) * 64). Right whenever seqlen_k is a multiple of 64 (every
// power-of-two benchmark), wrong otherwise. Caught by: reference_tolerance (seqlen_k = 200).
#include "attn_abi.h"
#include "common_attn.cuh"

struct FullTilesOnly : adv::Honest {
    static constexpr int kDropPartialKeyTile = 64;
};

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    return adv::launch<FullTilesOnly>(p, stream);
}
