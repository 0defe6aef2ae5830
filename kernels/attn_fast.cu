// attn_fast.cu (v20) — FlashAttention-style forward kernel for Hopper (sm_90a), hand-written PTX (no CUTLASS/CuTe).
// v20: the producer publishes each decoded work unit (ATTN_WS_PUBTILE) and the warp-specialized kernel also runs
// grids below one wave (ATTN_WS_SMALL); v19: head_dim 96 on three consumer warpgroups (ATTN_WS_NWG96).
// v18: head_dim 96 on the d128 warp-specialized kernel over 96-column tensor maps (ATTN_WS_D96); v17: tile
// boundaries no longer merged (ATTN_WS_MERGE128 0).
// v16: GQA decode (head_dim 128, packed rows <= 32) on attn_dec, whose warps split the keys, and split-KV on the
// warp-specialized kernel where its row tiles fill less than a wave; v10-v15 (tile order, TMA-store epilogue, ...)
// and every measurement: kernels/NOTES.md.
// v9 (stage 2, kernels/NOTES.md): prefill with head_dim 64/128/256 that fills >= 1 wave runs on a persistent,
// warp-specialized kernel (attn_fwd_ws): a producer warpgroup issues TMA bulk-tensor copies of Q/K/V into
// mbarrier rings, 2 or 3 consumer warpgroups (setmaxnreg) run S = Q K^T and O += P V on wgmma, the softmax of one
// tile issued between the PV GEMM of the previous one and its wait (intra-warpgroup; but in the SASS ptxas puts that
// wait before the softmax: kernels/NOTES.md, session 11, and the ATTN_WS_PEEL candidate) and overlapped with the
// other consumer's GEMMs (ping-pong over named barriers).
// v5 = v4 with head_dim 64 back on the mma.sync kernel. v4 = v3 + a wgmma kernel (2 warpgroups x 64 rows, Q/K/V
// in 128B-swizzled shared memory read by matrix descriptors, S = Q K^T as wgmma SS, O += P V as wgmma RS with P
// from registers, cp.async double-buffered K/V), now the fallback when no TMA tensor map fits the strides.
// v3 = v2's d128 4 warps x 32 rows with two 32-key sub-tiles and lazy o rescale, with v2's fp16 drift fixed
// (alpha is exactly 1 when the row max did not grow), one __syncthreads per K/V tile, causal warp skip.
// The Hopper-only kernels are compiled only for sm_90a and launched only on a 9.x device; an sm_100a build runs
// everything on the mma.sync kernels. History, predictions and measurements: kernels/NOTES.md.
//
// Design of the mma.sync kernels (decode, small grids, d64/d96/d192, unaligned; the wgmma kernel is described
// at its definition below; kernels/NOTES.md has the bounds, predictions and measured outcomes of v1-v5):
//   * One CTA = BM query rows of one (batch, head-block): 128 rows as 4 warps x 32 rows (d64, d96, and
//     d128 since v2: 64-key tiles processed as two 32-key sub-tiles to fit 255 registers) or 8 warps x
//     16 rows (d192, d256), or 64 rows as 4 warps x 16 rows (decode, small grids).
//   * S = Q K^T and O += P V on mma.sync.m16n8k16 (bf16/fp16 in, fp32 accumulate).
//   * Q fragments kept in registers where they fit, else re-read from shared memory per tile.
//   * K/V tiles of BN = 64 keys, double-buffered with cp.async (16 B, zero-fill past seqlen_k),
//     rows padded by 16 B in shared memory so every ldmatrix phase is bank-conflict free.
//   * Online softmax in registers (exp2f with scale*log2(e) folded in); P re-packed from the S
//     accumulators straight into the A operand of the PV mma (no shared-memory round trip).
//   * Causal (bottom-right aligned): tiles past the block's last visible key are skipped; the mask
//     is applied only on tiles that cross some row's limit (or seqlen_k).
//   * GQA packing for short seqlen_q (decode): the query heads sharing one kv head are stacked along
//     the M dimension, so K/V are read once per kv head.
//   * Split-KV when the grid is smaller than one wave: partial (o, lse) in fp32 in the workspace,
//     then a deterministic combine kernel (fixed summation order, no atomics).
//   * A scalar fallback kernel covers any head_dim <= 256 not templated or unaligned tensors.
#include "attn_abi.h"

#include <cuda.h>  // CUtensorMap and its enums (types only: the encoder comes through the entry-point query)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include <algorithm>

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kBN = 64;  // keys per tile
// Register-fit knobs of the 4 warps x 32 rows d128 shape (v2). With KSUB = 2 and the S k-loop unrolled
// by 4, ptxas -v reports 251 registers and no spill; KSUB = 1 spills (12-64 B) at any unroll, KSUB = 2
// fully unrolled spills 12 B.
#ifndef ATTN_KD_UNROLL
#define ATTN_KD_UNROLL 4  // unroll of the S k-loop when Q is re-read from shared memory
#endif
#ifndef ATTN_ONE_BARRIER
#define ATTN_ONE_BARRIER 1  // v3: one __syncthreads per K/V tile (prefetch issued after it); 0: v1/v2's two
#endif
#ifndef ATTN_CAUSAL_WARP_SKIP
#define ATTN_CAUSAL_WARP_SKIP 1  // v3: a warp skips (sub-)tiles that are fully masked for all its rows
#endif
#ifndef ATTN_LAZY_WIDE
#define ATTN_LAZY_WIDE 0  // 1: lazy o rescale also on the 8-warp d192/d256 CTAs (v2's choice)
#endif
#ifndef ATTN_DECODE
#define ATTN_DECODE 1  // v16 (run 34: full 256/256): decode (head_dim 128, packed rows <= 32) on attn_dec, the warps splitting the keys
#endif
#ifndef ATTN_D128_KSUB
#define ATTN_D128_KSUB 2  // d128 BM=128: the 64-key tile is processed as KSUB sub-tiles of 64/KSUB keys
#endif

struct KParams {
    const void* q;
    const void* k;
    const void* v;
    void* o;
    float* lse;
    float* o_part;     // [splits, batch, hq, sq, D] fp32 (split-KV only)
    float* lse_part;   // [splits, batch, hq, sq]    fp32 (split-KV only)
    long long q_bs, q_rs, q_hs;
    long long k_bs, k_rs, k_hs;
    long long v_bs, v_rs, v_hs;
    long long o_bs, o_rs, o_hs;
    int batch, sq, sk, hq, hkv;
    int group;         // hq / hkv
    int G;             // query heads packed along M (1 or group)
    int R;             // packed rows per head-block = G * sq
    int num_hb;        // head-blocks per batch = hq / G
    int causal;
    int num_splits;
    int tiles_per_split;
    float scale_log2;  // softmax_scale * log2(e)
    int* tile_counter; // warp-specialized kernel, causal: dynamic tile order (zeroed before the launch), else null
    int sec_heads;     // warp-specialized kernel: (batch, head) pairs per L2 section of the tile order (v11)
    unsigned long long* trace;  // ATTN_WS_TRACE: the consumers' clock64 marks (kTraceBytes at the workspace's end), else null
};

// ------------------------------------------------------------------------------------------------
// PTX helpers
// ------------------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// L2_256: with the L2 prefetch-size qualifier .L2::256B (PTX ISA "cp.async": a hint that the L2 may fetch the whole
// 256-byte block around the source)
template <bool L2_256 = false>
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
    const int n = valid ? 16 : 0;  // src-size 0 => 16 zero bytes written, nothing read
    if constexpr (L2_256)
        asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
    else
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                                  uint32_t& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

template <typename T>
struct Ops;

template <>
struct Ops<__nv_bfloat16> {
    __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&h);
    }
    __device__ __forceinline__ static float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
    __device__ __forceinline__ static void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

template <>
struct Ops<__half> {
    __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&h);
    }
    __device__ __forceinline__ static float to_float(__half x) { return __half2float(x); }
    __device__ __forceinline__ static void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// 2^x on the FMA pipe (ATTN_WS_EMU): x clamped to [-127, +inf), rounded to the nearest integer j with the
// 1.5 * 2^23 shift (j lands in the low mantissa bits of t), f = x - j in [-0.5, 0.5], 2^f by a degree-3 polynomial
// (coefficients: minimax relative error 7.5e-5 on [-0.5, 0.5], fitted for attnq), times 2^j built from t's bits as
// ((j + 127) << 23). Only for x <= 0 (scores minus the running max): x = -inf (masked key) gives j = -127, a scale of
// exactly 0 and so 0, as ex2.approx.ftz does. Meant to relieve the MUFU pipe (16 exp2 per clock per SM on sm_90) at
// ~9 FMA/ALU instructions per element; measured (run 53): 4-14 % slower, the softmax is bound by the warp's issue.
// A template so that builds without the warp-specialized kernel (sm_100a) do not warn that it is unreferenced.
template <int = 0>
__device__ __forceinline__ float emu_exp2(float x) {
    x = fmaxf(x, -127.f);
    const float t = x + 12582912.f;
    const float f = x - (t - 12582912.f);
    const float p = fmaf(fmaf(fmaf(0.05517167f, f, 0.24261113f), f, 0.69326097f), f, 0.99992806f);
    return p * __int_as_float((__float_as_int(t) << 23) + 0x3f800000);
}

__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    return x;
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x;
}

// Minimum CTAs per SM promised to the register allocator.
template <int D, int NW, int MI>
struct MinBlocks {
    static constexpr int value = (NW == 8) ? 1 : ((MI == 2 || D <= 96) ? 2 : 1);
};

template <int D, int NW, int MI>
constexpr int smem_bytes() {
    return (16 * NW * MI + 4 * kBN) * (D + 8) * 2;
}

// ------------------------------------------------------------------------------------------------
// Main kernel. grid = (batch * num_hb * num_m_blocks, num_splits); block = 32 * NW threads; each
// warp owns MI consecutive 16-row sub-tiles (MI = 2 halves the ldmatrix traffic per FLOP).
// ------------------------------------------------------------------------------------------------
template <int D, int NW, int MI, int KSUB, typename T>
__global__ void __launch_bounds__(NW * 32, MinBlocks<D, NW, MI>::value) attn_fwd_mma(const KParams p) {
    constexpr int WM = 16 * MI;       // rows per warp
    constexpr int BM = WM * NW;
    constexpr int BN = kBN;
    constexpr int NT = NW * 32;
    constexpr int LDS = D + 8;        // padded row, elements
    constexpr int CH = D / 8;         // 16-byte chunks per row
    constexpr bool QREG = (D * MI <= 128) || (MI == 1 && D <= 192);  // Q in registers, else re-read from shared
    constexpr int KD = D / 16;        // k-steps over head_dim
    // S k-loop unroll: full (v1) except for the sub-tiled shape (KSUB > 1, Q re-read from shared), where a
    // partial unroll limits how far ptxas hoists K/Q fragments (the 4 x 32-row d128 shape is register-bound)
    // Lazy o rescale (warp-uniform skip when every alpha of the warp is exactly 1) on the sub-tiled d128
    // shape only (v3). v2 also used it on the 8-warp d192/d256 CTAs: measured 0..-3% there (the branch
    // splits the unrolled softmax/PV schedule), so v3 keeps v1's unconditional rescale on them
    // (ATTN_LAZY_WIDE=1 restores v2's choice, with the v3 alpha fix).
    constexpr bool LAZY = (KSUB > 1) || (NW == 8 && ATTN_LAZY_WIDE);
    constexpr int KD_UNROLL = (QREG || KSUB == 1) ? KD : ATTN_KD_UNROLL;
    constexpr int SUBN = BN / KSUB;   // keys per sub-tile (S registers hold WM x SUBN)
    constexpr int NS = SUBN / 8;      // n-tiles of S per sub-tile
    constexpr int NO = D / 8;         // n-tiles of O

    extern __shared__ __align__(128) unsigned char smem_raw[];
    T* sQ = reinterpret_cast<T*>(smem_raw);
    T* sK = sQ + BM * LDS;            // [2][BN][LDS]
    T* sV = sK + 2 * BN * LDS;        // [2][BN][LDS]

    const int tid = threadIdx.x;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2;          // groupID
    const int t4 = lane & 3;          // thread in group

    // blockIdx.x = bh * m_blocks + (m_blocks - 1 - mblk): the m-blocks of one (batch, head-block) are
    // adjacent (they share K/V in L2) and the heaviest causal block of each head starts first.
    const int m_blocks = (p.R + BM - 1) / BM;
    const int bh = blockIdx.x / m_blocks;
    const int mblk = m_blocks - 1 - (blockIdx.x - bh * m_blocks);
    const int b = bh / p.num_hb;
    const int hb = bh - b * p.num_hb;
    const int split = blockIdx.y;
    const int m0 = mblk * BM;
    const int sq = p.sq, sk = p.sk;
    const int kvh = (hb * p.G) / p.group;
    const int off = sk - sq;

    // query-row range of this block (packed rows r -> head hb*G + r/sq, row r%sq)
    const int r_lo = m0;
    const int r_hi = min(m0 + BM, p.R) - 1;
    int i_min, i_max;
    if (r_lo / sq == r_hi / sq) {
        i_min = r_lo % sq;
        i_max = r_hi % sq;
    } else {
        i_min = 0;
        i_max = sq - 1;
    }
    const int n_end_blk = p.causal ? min(sk, i_max + off + 1) : sk;
    const int mask_from = p.causal ? min(sk, i_min + off + 1) : sk;  // tiles ending past this need masking
    const int ks = split * p.tiles_per_split * BN;
    const int ke = min(ks + p.tiles_per_split * BN, n_end_blk);

    // per-thread rows: [mi][rr] -> packed row m0 + warp*WM + mi*16 + g + rr*8; its key limit
    // (padding rows borrow the last valid row's limit; their results are never stored). Computed only
    // where a sub-tile needs the mask (keeps registers free for the accumulators).
    auto row_limit = [&](int mi, int rr) -> int {
        const int r = m0 + warp * WM + mi * 16 + g + rr * 8;
        const int rc = r < p.R ? r : p.R - 1;
        return p.causal ? min(sk, rc % sq + off + 1) : sk;
    };

    const bool partial = p.num_splits > 1;

    if (ke <= ks) {
        // No key visible to any row of this block in this split: o = 0, lse = +inf (or -inf partial).
        for (int c = tid; c < BM * CH; c += NT) {
            const int row = c / CH, ch = c - row * CH;
            const int r = m0 + row;
            if (r >= p.R) continue;
            const int h = hb * p.G + r / sq, i = r % sq;
            if (partial) {
                float* dst = p.o_part + ((((long long)split * p.batch + b) * p.hq + h) * sq + i) * D + ch * 8;
                reinterpret_cast<float4*>(dst)[0] = make_float4(0.f, 0.f, 0.f, 0.f);
                reinterpret_cast<float4*>(dst)[1] = make_float4(0.f, 0.f, 0.f, 0.f);
                if (ch == 0) p.lse_part[(((long long)split * p.batch + b) * p.hq + h) * sq + i] = -INFINITY;
            } else {
                T* dst = reinterpret_cast<T*>(p.o) + b * p.o_bs + (long long)i * p.o_rs + (long long)h * p.o_hs + ch * 8;
                *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
                if (ch == 0) p.lse[((long long)b * p.hq + h) * sq + i] = INFINITY;
            }
        }
        return;
    }

    const T* qg = reinterpret_cast<const T*>(p.q) + b * p.q_bs;
    const T* kg = reinterpret_cast<const T*>(p.k) + b * p.k_bs + (long long)kvh * p.k_hs;
    const T* vg = reinterpret_cast<const T*>(p.v) + b * p.v_bs + (long long)kvh * p.v_hs;

    // ---- Q tile -> shared (zero rows past R)
    for (int c = tid; c < BM * CH; c += NT) {
        const int row = c / CH, ch = c - row * CH;
        const int r = m0 + row;
        const bool valid = r < p.R;
        const T* src = qg;
        if (valid) {
            const int h = hb * p.G + r / sq, i = r % sq;
            src = qg + (long long)i * p.q_rs + (long long)h * p.q_hs + ch * 8;
        }
        cp_async_16(smem_u32(sQ + row * LDS + ch * 8), src, valid);
    }
    cp_async_commit();

    const int k_rs = (int)p.k_rs, v_rs = (int)p.v_rs;  // host guarantees BN * stride < 2^31
    // Each thread copies the same 16 B chunk column of rows row0, row0 + RSTEP, ... (NT % CH == 0) or
    // walks the generic chunk sequence otherwise.
    constexpr bool FIXED_CH = (NT % CH) == 0;
    constexpr int RSTEP = FIXED_CH ? NT / CH : 1;
    static_assert(BN % RSTEP == 0, "K/V tile rows must split evenly over the fixed-chunk threads");
    static_assert(BN % (16 * KSUB) == 0, "sub-tiles must be whole k16 steps");
    const int row0 = tid / CH, ch0 = tid - (tid / CH) * CH;
    auto load_kv = [&](int tile_n0, int buf) {
        T* dk = sK + buf * BN * LDS;
        T* dv = sV + buf * BN * LDS;
        if constexpr (FIXED_CH) {
            const T* kt = kg + (long long)(tile_n0 + row0) * p.k_rs + ch0 * 8;
            const T* vt = vg + (long long)(tile_n0 + row0) * p.v_rs + ch0 * 8;
            const uint32_t sdk = smem_u32(dk + row0 * LDS + ch0 * 8);
            const uint32_t sdv = smem_u32(dv + row0 * LDS + ch0 * 8);
#pragma unroll
            for (int j = 0; j < BN / RSTEP; ++j) {
                const bool valid = tile_n0 + row0 + j * RSTEP < sk;
                cp_async_16(sdk + j * RSTEP * LDS * 2, valid ? kt + j * RSTEP * k_rs : kg, valid);
                cp_async_16(sdv + j * RSTEP * LDS * 2, valid ? vt + j * RSTEP * v_rs : vg, valid);
            }
        } else {
            const T* kt = kg + (long long)tile_n0 * p.k_rs;
            const T* vt = vg + (long long)tile_n0 * p.v_rs;
            for (int c = tid; c < BN * CH; c += NT) {
                const int row = c / CH, ch = c - row * CH;
                const bool valid = tile_n0 + row < sk;
                const T* srck = valid ? kt + (row * k_rs + ch * 8) : kg;
                const T* srcv = valid ? vt + (row * v_rs + ch * 8) : vg;
                cp_async_16(smem_u32(dk + row * LDS + ch * 8), srck, valid);
                cp_async_16(smem_u32(dv + row * LDS + ch * 8), srcv, valid);
            }
        }
    };

    load_kv(ks, 0);
    cp_async_commit();

    float o_acc[MI][NO][4];
    float m_run[MI][2], l_run[MI][2];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int n = 0; n < NO; ++n) o_acc[mi][n][0] = o_acc[mi][n][1] = o_acc[mi][n][2] = o_acc[mi][n][3] = 0.f;
        m_run[mi][0] = m_run[mi][1] = -INFINITY;
        l_run[mi][0] = l_run[mi][1] = 0.f;
    }

    uint32_t q_frag[MI][QREG ? KD : 1][4];
    // Q (non-trans): row = lane&15, col = (lane>>4)*8; sub-tile mi is 16 rows further
    const uint32_t sQ_warp = smem_u32(sQ + (warp * WM + (lane & 15)) * LDS + (lane >> 4) * 8);
    // K (non-trans): key row = (lane&7) + (lane>>4)*8, col = ((lane>>3)&1)*8
    const int k_lane_off = ((lane & 7) + (lane >> 4) * 8) * LDS + ((lane >> 3) & 1) * 8;
    // V (trans):     key row = lane&15,               col = (lane>>4)*8
    const int v_lane_off = (lane & 15) * LDS + (lane >> 4) * 8;
    const float sl2 = p.scale_log2;

    const int n_tiles = (ke - ks + BN - 1) / BN;
    // A warp whose rows are all padding (decode: R < BM) only helps load K/V.
    const bool warp_active = m0 + warp * WM < p.R;
#if ATTN_CAUSAL_WARP_SKIP
    // v3: causal warp skip. warp_lim = the largest key limit over the warp's rows (padding rows borrow the
    // last valid row's limit). A sub-tile starting at or past it is fully masked for every row of the warp:
    // S = -inf everywhere, so mx = m_old, alpha = 1 exactly (v3 rule), p = 0, rs = 0: processing it changes
    // nothing, and the warp skips it (it still loads K/V and meets the barrier). Warp-uniform branch.
    int warp_lim = sk;
    if (p.causal) {
        warp_lim = 0;
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) warp_lim = max(warp_lim, max(row_limit(mi, 0), row_limit(mi, 1)));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) warp_lim = max(warp_lim, __shfl_xor_sync(0xffffffffu, warp_lim, o));
    }
#endif
    for (int it = 0; it < n_tiles; ++it) {
        const int n0 = ks + it * BN;
        const int buf = it & 1;
#if ATTN_ONE_BARRIER
        // v3: one barrier per tile. This thread's copies of tile `it` (issued one iteration ago, right after
        // the previous barrier) are complete; the barrier makes every thread's copies visible AND proves
        // every warp finished iteration it-1, which read buffer buf ^ 1: only then is the next tile
        // prefetched into it. Buffer `buf` is not written again before the next iteration's barrier.
        cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < n_tiles) {
            load_kv(n0 + BN, buf ^ 1);
            cp_async_commit();
        }
#else
        if (it + 1 < n_tiles) {
            load_kv(n0 + BN, buf ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
#endif

        if (QREG && it == 0) {
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int kk = 0; kk < (QREG ? KD : 1); ++kk)
                    ldmatrix_x4(sQ_warp + (mi * 16 * LDS + kk * 16) * 2, q_frag[mi][kk][0], q_frag[mi][kk][1],
                                q_frag[mi][kk][2], q_frag[mi][kk][3]);
        }

        if (warp_active) {
            const uint32_t sKb = smem_u32(sK + buf * BN * LDS + k_lane_off);
            const uint32_t sVb = smem_u32(sV + buf * BN * LDS + v_lane_off);

            // The BN-key tile is processed as KSUB sub-tiles of SUBN keys (KSUB = 2 halves the fp32 S
            // registers for the register-tight 4 x 32-row d128 shape; loads and barriers stay per BN).
#pragma unroll
            for (int hs = 0; hs < KSUB; ++hs) {
                const int c0 = hs * SUBN;  // first key of this sub-tile, relative to n0
#if ATTN_CAUSAL_WARP_SKIP
                if (n0 + c0 >= warp_lim) continue;  // no row of this warp sees a key of this sub-tile
#endif
                // ---- S = Q K^T (WM x SUBN per warp); each K fragment feeds MI mma rows
                float sc[MI][NS][4];
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                    for (int n = 0; n < NS; ++n) sc[mi][n][0] = sc[mi][n][1] = sc[mi][n][2] = sc[mi][n][3] = 0.f;
#pragma unroll(KD_UNROLL)
                for (int kk = 0; kk < KD; ++kk) {
                    uint32_t a[MI][4];
#pragma unroll
                    for (int mi = 0; mi < MI; ++mi) {
                        if constexpr (QREG) {
                            a[mi][0] = q_frag[mi][kk][0];
                            a[mi][1] = q_frag[mi][kk][1];
                            a[mi][2] = q_frag[mi][kk][2];
                            a[mi][3] = q_frag[mi][kk][3];
                        } else {
                            ldmatrix_x4(sQ_warp + (mi * 16 * LDS + kk * 16) * 2, a[mi][0], a[mi][1], a[mi][2],
                                        a[mi][3]);
                        }
                    }
#pragma unroll
                    for (int np = 0; np < NS / 2; ++np) {
                        uint32_t b0, b1, b2, b3;
                        ldmatrix_x4(sKb + ((c0 + np * 16) * LDS + kk * 16) * 2, b0, b1, b2, b3);
#pragma unroll
                        for (int mi = 0; mi < MI; ++mi) {
                            Ops<T>::mma(sc[mi][2 * np], a[mi], b0, b1);
                            Ops<T>::mma(sc[mi][2 * np + 1], a[mi], b2, b3);
                        }
                    }
                }

                // ---- mask (only sub-tiles crossing a row limit or seqlen_k)
                if (n0 + c0 + SUBN > mask_from) {
#pragma unroll
                    for (int mi = 0; mi < MI; ++mi) {
                        const int lim0 = row_limit(mi, 0), lim1 = row_limit(mi, 1);
#pragma unroll
                        for (int n = 0; n < NS; ++n) {
                            const int col = n0 + c0 + n * 8 + 2 * t4;
                            if (col >= lim0) sc[mi][n][0] = -INFINITY;
                            if (col + 1 >= lim0) sc[mi][n][1] = -INFINITY;
                            if (col >= lim1) sc[mi][n][2] = -INFINITY;
                            if (col + 1 >= lim1) sc[mi][n][3] = -INFINITY;
                        }
                    }
                }

                // ---- online softmax; P packed into the PV A fragments as soon as it exists
                // (C layout of n-tiles 2kk, 2kk+1 = A layout of k-step kk), freeing the fp32 S registers.
                uint32_t pf[MI][SUBN / 16][4];
                float alpha_v[MI][2];
                bool grew = false;
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
                    for (int rr = 0; rr < 2; ++rr) {
                        float mx = m_run[mi][rr];
#pragma unroll
                        for (int n = 0; n < NS; ++n)
                            mx = fmaxf(mx, fmaxf(sc[mi][n][2 * rr], sc[mi][n][2 * rr + 1]));
                        mx = quad_max(mx);
                        const float ms = (mx == -INFINITY) ? 0.f : mx * sl2;
                        // v3 fix: alpha is exactly 1 when the max did not grow. ptxas contracts
                        // `m_old * sl2 - ms` into FFMA(m_old, sl2, -fl(mx * sl2)), whose value for mx == m_old
                        // is the rounding residual of m * sl2 (|r| <= ulp(m*sl2)/2, 1.5e-5 at |m*sl2| ~ 200),
                        // not 0: v2's alpha was 1 +- 1e-5 while its lazy skip left o unscaled, so l and o
                        // drifted apart by alpha^N over N skipped sub-tiles (fp16 large logits, s8k/s16k).
                        // Both -inf (row saw no key yet): alpha = 1, o and l are still 0.
                        const float alpha = (mx == m_run[mi][rr]) ? 1.f : fast_exp2(m_run[mi][rr] * sl2 - ms);
                        // skip decided on the value actually applied to l: o *= alpha is skipped only when
                        // every alpha of the warp is exactly 1.0f, so skipping is bit-identical to multiplying
                        grew |= alpha != 1.f;
                        alpha_v[mi][rr] = alpha;
                        m_run[mi][rr] = mx;
                        float rs = 0.f;
#pragma unroll
                        for (int n = 0; n < NS; ++n) {
                            const float e0 = fast_exp2(fmaf(sc[mi][n][2 * rr], sl2, -ms));
                            const float e1 = fast_exp2(fmaf(sc[mi][n][2 * rr + 1], sl2, -ms));
                            rs += e0 + e1;
                            pf[mi][n >> 1][(n & 1) * 2 + rr] = Ops<T>::pack(e0, e1);
                        }
                        l_run[mi][rr] = l_run[mi][rr] * alpha + rs;
                        if constexpr (!LAZY) {
#pragma unroll
                            for (int n = 0; n < NO; ++n) {
                                o_acc[mi][n][2 * rr] *= alpha;
                                o_acc[mi][n][2 * rr + 1] *= alpha;
                            }
                        }
                    }
                }
                if constexpr (LAZY) {
                    // o is rescaled only when some row of the warp has alpha != 1.0f (l_run was multiplied by
                    // the same alpha above): skipping a multiply by exactly 1.0f is exact (v3; see alpha).
                    if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
                        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                            for (int rr = 0; rr < 2; ++rr)
#pragma unroll
                                for (int n = 0; n < NO; ++n) {
                                    o_acc[mi][n][2 * rr] *= alpha_v[mi][rr];
                                    o_acc[mi][n][2 * rr + 1] *= alpha_v[mi][rr];
                                }
                    }
                }

                // ---- O += P V over this sub-tile's keys
#pragma unroll
                for (int kk = 0; kk < SUBN / 16; ++kk) {
#pragma unroll
                    for (int dp = 0; dp < D / 16; ++dp) {
                        uint32_t b0, b1, b2, b3;
                        ldmatrix_x4_trans(sVb + ((c0 + kk * 16) * LDS + dp * 16) * 2, b0, b1, b2, b3);
#pragma unroll
                        for (int mi = 0; mi < MI; ++mi) {
                            Ops<T>::mma(o_acc[mi][2 * dp], pf[mi][kk], b0, b1);
                            Ops<T>::mma(o_acc[mi][2 * dp + 1], pf[mi][kk], b2, b3);
                        }
                    }
                }
            }  // sub-tiles
        }  // warp_active
#if !ATTN_ONE_BARRIER
        __syncthreads();  // buffer `buf` is refilled by the next-but-one iteration's prefetch
#endif
    }

    // ---- epilogue
    float inv[MI][2], lse_v[MI][2];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
            const float l = quad_sum(l_run[mi][rr]);
            if (l > 0.f) {
                inv[mi][rr] = 1.f / l;
                lse_v[mi][rr] = (m_run[mi][rr] * sl2 + log2f(l)) * kLn2;
            } else {
                inv[mi][rr] = 0.f;
                lse_v[mi][rr] = partial ? -INFINITY : INFINITY;
            }
        }
    }

    if (partial) {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
            for (int rr = 0; rr < 2; ++rr) {
                const int r = m0 + warp * WM + mi * 16 + g + rr * 8;
                if (r >= p.R) continue;
                const int h = hb * p.G + r / sq, i = r % sq;
                const long long row_off = (((long long)split * p.batch + b) * p.hq + h) * sq + i;
                float* dst = p.o_part + row_off * D + 2 * t4;
#pragma unroll
                for (int n = 0; n < NO; ++n)
                    *reinterpret_cast<float2*>(dst + n * 8) = make_float2(o_acc[mi][n][2 * rr] * inv[mi][rr],
                                                                          o_acc[mi][n][2 * rr + 1] * inv[mi][rr]);
                if (t4 == 0) p.lse_part[row_off] = lse_v[mi][rr];
            }
        }
        return;
    }

    // Stage the warp's WM output rows in its own rows of sQ (only this warp ever read them), then
    // write 16-byte chunks.
    __syncwarp();
    T* sO = sQ + warp * WM * LDS;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
#pragma unroll
            for (int n = 0; n < NO; ++n) {
                *reinterpret_cast<uint32_t*>(sO + (mi * 16 + g + rr * 8) * LDS + n * 8 + 2 * t4) =
                    Ops<T>::pack(o_acc[mi][n][2 * rr] * inv[mi][rr], o_acc[mi][n][2 * rr + 1] * inv[mi][rr]);
            }
            const int r = m0 + warp * WM + mi * 16 + g + rr * 8;
            if (t4 == 0 && r < p.R) p.lse[((long long)b * p.hq + hb * p.G + r / sq) * sq + r % sq] = lse_v[mi][rr];
        }
    }
    __syncwarp();
    T* og = reinterpret_cast<T*>(p.o) + b * p.o_bs;
    for (int c = lane; c < WM * CH; c += 32) {
        const int row = c / CH, ch = c - row * CH;
        const int r = m0 + warp * WM + row;
        if (r >= p.R) continue;
        const int h = hb * p.G + r / sq, i = r % sq;
        *reinterpret_cast<uint4*>(og + (long long)i * p.o_rs + (long long)h * p.o_hs + ch * 8) =
            *reinterpret_cast<const uint4*>(sO + row * LDS + ch * 8);
    }
}

// ------------------------------------------------------------------------------------------------
// Split-KV combine: one warp per (b, h, i) row; fixed order over splits (deterministic).
// ------------------------------------------------------------------------------------------------
// The lse of `row` over the splits' partial lse (natural log; lse_part[s * rows + row], -inf for a split that saw
// no key of the row): each lane takes splits lane, lane + 32, ..., then a warp reduction (a fixed order: the
// same bits every call). `empty`: no split saw a key (lse +inf, o 0). Shared by attn_combine and attn_combine_dec.
__device__ __forceinline__ float combined_lse(const float* lse_part, int S, long long rows, long long row, int lane,
                                              bool& empty) {
    float mx = -INFINITY;
    for (int s = lane; s < S; s += 32) mx = fmaxf(mx, lse_part[s * rows + row]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.f;
    if (mx != -INFINITY)
        for (int s = lane; s < S; s += 32) sum += expf(lse_part[s * rows + row] - mx);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    empty = !(sum > 0.f);
    return empty ? INFINITY : mx + logf(sum);
}

template <typename T>
__global__ void __launch_bounds__(128) attn_combine(const KParams p, int D) {
    const long long rows = (long long)p.batch * p.hq * p.sq;
    const long long row = (long long)blockIdx.x * 4 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const int S = p.num_splits;
    const long long split_stride = rows;  // rows per split in lse_part; o_part rows * D
    bool empty;
    const float lse = combined_lse(p.lse_part, S, rows, row, lane, empty);

    // row -> (b, h, i)
    const int i = (int)(row % p.sq);
    const long long bh = row / p.sq;
    const int h = (int)(bh % p.hq);
    const int b = (int)(bh / p.hq);
    if (lane == 0) p.lse[row] = lse;
    T* dst = reinterpret_cast<T*>(p.o) + b * p.o_bs + (long long)i * p.o_rs + (long long)h * p.o_hs;
    for (int d = lane * 4; d < D; d += 128) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        if (!empty) {
            for (int s = 0; s < S; ++s) {
                const float ls = p.lse_part[s * split_stride + row];
                const float w = (ls == -INFINITY) ? 0.f : expf(ls - lse);
                const float4 v = *reinterpret_cast<const float4*>(p.o_part + (s * split_stride + row) * D + d);
                acc.x += w * v.x;
                acc.y += w * v.y;
                acc.z += w * v.z;
                acc.w += w * v.w;
            }
        }
        T tmp[4] = {T(acc.x), T(acc.y), T(acc.z), T(acc.w)};
        *reinterpret_cast<uint2*>(dst + d) = *reinterpret_cast<const uint2*>(tmp);
    }
}

// ------------------------------------------------------------------------------------------------
// Scalar fallback (any head_dim <= 256, any alignment): one warp per (b, h, i) row.
// ------------------------------------------------------------------------------------------------
template <typename T>
__global__ void __launch_bounds__(128) attn_fallback(const KParams p, int D, float scale) {
    const long long rows = (long long)p.batch * p.hq * p.sq;
    const long long row = (long long)blockIdx.x * 4 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const int i = (int)(row % p.sq);
    const long long bh = row / p.sq;
    const int h = (int)(bh % p.hq);
    const int b = (int)(bh / p.hq);
    const int kvh = h / p.group;
    const T* qp = reinterpret_cast<const T*>(p.q) + b * p.q_bs + (long long)i * p.q_rs + (long long)h * p.q_hs;
    const T* kp = reinterpret_cast<const T*>(p.k) + b * p.k_bs + (long long)kvh * p.k_hs;
    const T* vp = reinterpret_cast<const T*>(p.v) + b * p.v_bs + (long long)kvh * p.v_hs;
    float qv[8], ov[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int d = lane + 32 * j;
        qv[j] = d < D ? Ops<T>::to_float(qp[d]) : 0.f;
        ov[j] = 0.f;
    }
    const int lim = p.causal ? min(p.sk, i + p.sk - p.sq + 1) : p.sk;
    float m = -INFINITY, l = 0.f;
    for (int key = 0; key < lim; ++key) {
        float dot = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int d = lane + 32 * j;
            if (d < D) dot += qv[j] * Ops<T>::to_float(kp[(long long)key * p.k_rs + d]);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        const float sc = dot * scale;
        const float mn = fmaxf(m, sc);
        const float alpha = expf(m - mn);  // m = -inf first time -> 0
        const float pw = expf(sc - mn);
        l = l * alpha + pw;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int d = lane + 32 * j;
            ov[j] = ov[j] * alpha + (d < D ? pw * Ops<T>::to_float(vp[(long long)key * p.v_rs + d]) : 0.f);
        }
        m = mn;
    }
    T* op = reinterpret_cast<T*>(p.o) + b * p.o_bs + (long long)i * p.o_rs + (long long)h * p.o_hs;
    const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int d = lane + 32 * j;
        if (d < D) op[d] = T(ov[j] * inv);
    }
    if (lane == 0) p.lse[row] = l > 0.f ? m + logf(l) : INFINITY;
}

// ------------------------------------------------------------------------------------------------
// Host side
// ------------------------------------------------------------------------------------------------
struct Plan {
    bool fast;        // templated mma path
    int bm;           // query rows per CTA (64 or 128)
    int G, R, num_hb, m_blocks, num_splits, tiles_per_split;
#if ATTN_DECODE
    bool dec;         // attn_dec (tiles_per_split then counts its 32-key tiles)
#endif
};

#if ATTN_DECODE
void dec_plan(const attn_fwd_params* p, Plan& pl, bool workspace_known_ok);
#endif

// The mma path needs 16 B aligned rows (cp.async / uint4) and 32-bit in-tile key offsets.
bool is_aligned(const attn_fwd_params* p) {
    const int64_t lim = (int64_t(1) << 31) / (2 * kBN);
    if (p->k_row_stride >= lim || p->v_row_stride >= lim || p->k_row_stride < 0 || p->v_row_stride < 0)
        return false;
    auto al = [](const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; };
    if (!al(p->q) || !al(p->k) || !al(p->v) || !al(p->o)) return false;
    const int64_t s[12] = {p->q_batch_stride, p->q_row_stride, p->q_head_stride, p->k_batch_stride,
                           p->k_row_stride,   p->k_head_stride, p->v_batch_stride, p->v_row_stride,
                           p->v_head_stride, p->o_batch_stride, p->o_row_stride, p->o_head_stride};
    for (int j = 0; j < 12; ++j)
        if (s[j] % 8 != 0) return false;
    return true;
}

Plan make_plan(const attn_fwd_params* p, bool workspace_known_ok) {
    Plan pl{};
    const int D = p->head_dim;
    pl.fast = (D == 64 || D == 96 || D == 128 || D == 192 || D == 256) && is_aligned(p);
    const int group = p->num_heads_q / p->num_heads_kv;
    pl.G = (p->seqlen_q <= 16) ? group : 1;
    pl.R = pl.G * p->seqlen_q;
    pl.num_hb = p->num_heads_q / pl.G;
    const int num_sms = p->num_sms > 0 ? p->num_sms : 132;
    const long long big_blocks = (long long)((pl.R + 127) / 128) * p->batch * pl.num_hb;
    pl.bm = (pl.R <= 64 || big_blocks < num_sms) ? 64 : 128;
    const int BM = pl.bm;
    pl.m_blocks = (pl.R + BM - 1) / BM;
    const int n_tiles = (p->seqlen_k + kBN - 1) / kBN;
    pl.num_splits = 1;
    pl.tiles_per_split = n_tiles > 0 ? n_tiles : 1;
    const long long base = (long long)pl.m_blocks * p->batch * pl.num_hb;
    const int per_sm = (pl.bm == 64 && D <= 128) ? 2 : 1;
    const long long wave = (long long)num_sms * per_sm;
    if (pl.fast && workspace_known_ok && base < wave && n_tiles >= 4) {
        long long want = (2 * wave + base - 1) / base;
        long long cap = n_tiles / 2;
        if (want > cap) want = cap;
        if (want > 128) want = 128;
        if (want > 1) {
            const int tps = (int)((n_tiles + want - 1) / want);
            pl.tiles_per_split = tps;
            pl.num_splits = (n_tiles + tps - 1) / tps;
        }
    }
#if ATTN_DECODE
    dec_plan(p, pl, workspace_known_ok);
#endif
    return pl;
}

size_t split_workspace_bytes(const attn_fwd_params* p, const Plan& pl) {
    if (pl.num_splits <= 1) return 0;
    const size_t rows = (size_t)pl.num_splits * p->batch * p->num_heads_q * p->seqlen_q;
    return rows * (size_t)p->head_dim * 4 + rows * 4 + 256;
}

template <int D, int NW, int MI, int KSUB, typename T>
int launch_mma(const KParams& kp, const Plan& pl, cudaStream_t stream) {
    constexpr int smem = smem_bytes<D, NW, MI>();
    auto kern = attn_fwd_mma<D, NW, MI, KSUB, T>;
    if (smem > 48 * 1024) {
        if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) return 2;
    }
    dim3 grid((unsigned)((long long)kp.batch * pl.num_hb * pl.m_blocks), (unsigned)pl.num_splits, 1u);
    kern<<<grid, NW * 32, smem, stream>>>(kp);
    if (cudaGetLastError() != cudaSuccess) return 3;
    if (pl.num_splits > 1) {
        const long long rows = (long long)kp.batch * kp.hq * kp.sq;
        attn_combine<T><<<(unsigned)((rows + 3) / 4), 128, 0, stream>>>(kp, D);
        if (cudaGetLastError() != cudaSuccess) return 3;
    }
    return 0;
}

#if ATTN_DECODE
// ------------------------------------------------------------------------------------------------
// ATTN_DECODE (v16 candidate): decode kernel, head_dim 128, GQA-packed rows R = group * seqlen_q <= 32.
// attn_fwd_mma gives every warp 16 of the BM = 64 packed rows and all warps the SAME 64-key tile, so with
// R = 4..32 most of its mma.sync work is padding and the per-tile MMA time is about the tile's memory
// time. Here the warps split the KEYS instead:
//   * One CTA = one (batch, kv head) and one split (a range of tiles_per_split 32-key tiles); NW warps.
//   * Every warp owns ALL packed rows (MI = R <= 16 ? 1 : 2 m16 tiles) and streams its own tiles
//     (local tiles warp, warp + NW, ...) through its own ST-stage cp.async ring: no CTA barrier in the
//     key loop (__syncwarp only), ST - 1 tiles (16 KB each, K + V) in flight per warp while it computes.
//   * Per tile (32 keys): S = Q K^T (8 k-steps x 4 n-tiles x MI mma), mask where a row limit or seqlen_k
//     cuts the tile, online softmax (exp2, scale*log2e folded, alpha exactly 1 when the max is unchanged),
//     O += P V (2 k-steps x 16 n-tiles x MI mma); fragment code and layouts as in attn_fwd_mma.
//   * End: every warp publishes its (m * scale_log2, l) per row in shared memory; each warp scales its O by
//     exp2(m_w - M) / L (M = max over warps, L = sum exp2(m_w - M) l_w), stores it as fp32 over the dead
//     K/V ring, and the CTA sums the warps in a fixed order: the final O (bf16/fp16) and lse, or the fp32
//     partials (o_part normalised, lse_part natural log, -inf where the split saw no key) of attn_combine.
// Shared memory (NW = 2, ST = 3): Q 16 MI x 136 x 2 B + (m, l) 2 x NW x 32 x 4 B + K/V NW x ST x 2 x 32 x
// 136 x 2 B = 109,312 B (MI 1) / 113,664 B (MI 2): two CTAs per SM, so one CTA's start/end bubble is
// covered by the other; 4 warps x 2 tiles x 16 KB = 128 KB in flight per SM.
// ------------------------------------------------------------------------------------------------
#ifndef ATTN_DEC_NW
#define ATTN_DEC_NW 2  // warps per decode CTA (each its own key tiles)
#endif
#ifndef ATTN_DEC_PF
#define ATTN_DEC_PF 0  // session 9 candidate: the warp also prefetches its tile this many tiles ahead of the ring into L2
#endif                 // (cp.async.bulk.prefetch.L2, one 256 B K row and one V row per lane; 0: off)
#ifndef ATTN_DEC_ST
#define ATTN_DEC_ST 3  // cp.async stages per warp
#endif
#ifndef ATTN_DEC_MI_MIN
#define ATTN_DEC_MI_MIN 1  // session 10 candidate: 2 runs R <= 16 on the MI = 2 kernel too (rows R..31 padding)
#endif
#ifndef ATTN_DEC_QREG
#define ATTN_DEC_QREG 1  // MI = 1 keeps Q's fragments in registers (0: re-read from shared memory, as MI = 2)
#endif
#ifndef ATTN_DEC_L2H
#define ATTN_DEC_L2H 0  // session 23 candidate 3: the decode kernel's K/V cp.async with the .L2::256B prefetch-size hint
#endif
// m16 tiles of the packed rows the decode kernel runs R rows with (ATTN_DEC_MI_MIN 2: always 2)
constexpr int dec_mi(int R) { return (R <= 16 && ATTN_DEC_MI_MIN < 2) ? 1 : 2; }
constexpr int kDecBN = 32;  // keys per warp tile
constexpr int kDecD = 128;

template <int NW, int MI, int ST>
constexpr int dec_smem_bytes() {
    return 16 * MI * (kDecD + 8) * 2 + NW * 2 * 32 * 4 + NW * ST * 2 * kDecBN * (kDecD + 8) * 2;
}

template <int NW, int MI, int ST>
struct DecMinBlocks {
    static constexpr int value = (228 * 1024) / (dec_smem_bytes<NW, MI, ST>() + 1024) >= 2 ? 2 : 1;
};

template <int NW, int MI, int ST, typename T>
__global__ void __launch_bounds__(NW * 32, DecMinBlocks<NW, MI, ST>::value) attn_dec(const KParams p) {
    constexpr int D = kDecD;
    constexpr int BN = kDecBN;
    constexpr int NT = NW * 32;
    constexpr int LDS = D + 8;   // padded K/V/Q row, elements (ldmatrix phases conflict free)
    constexpr int CH = D / 8;    // 16-byte chunks per row (16)
    constexpr int KD = D / 16;   // k-steps of S
    constexpr int NS = BN / 8;   // n-tiles of S per tile (4)
    constexpr int NO = D / 8;    // n-tiles of O (16)
    constexpr int RP = 16 * MI;  // packed rows incl. padding
    constexpr int OLD = D + 4;   // fp32 merge row stride (16-byte aligned rows)
    constexpr bool QREG = MI == 1 && ATTN_DEC_QREG != 0;
    static_assert(CH == 16, "the K/V copy maps lane -> (chunk lane & 15, row lane >> 4)");
    static_assert(NW * RP * OLD * 4 <= NW * ST * 2 * BN * LDS * 2, "merge buffer fits over the K/V ring");
    static_assert(ST >= 2, "at least double buffering");

    extern __shared__ __align__(128) unsigned char smem_raw[];
    T* sQ = reinterpret_cast<T*>(smem_raw);                                      // [RP][LDS]
    float* sM = reinterpret_cast<float*>(smem_raw + RP * LDS * 2);              // [NW][32]
    float* sL = sM + NW * 32;                                                   // [NW][32]
    T* sKV = reinterpret_cast<T*>(smem_raw + RP * LDS * 2 + NW * 2 * 32 * 4);   // [NW][ST][K,V][BN][LDS]
    float* sO = reinterpret_cast<float*>(sKV);                                  // [NW][RP][OLD] after the loop

    const int tid = threadIdx.x;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int t4 = lane & 3;

    const int bh = blockIdx.x;
    const int b = bh / p.num_hb;
    const int hb = bh - b * p.num_hb;
    const int split = blockIdx.y;
    const int sq = p.sq, sk = p.sk;
    const int off = sk - sq;
    const int kvh = (hb * p.G) / p.group;
    const bool partial = p.num_splits > 1;

    const int n_wt = (sk + BN - 1) / BN;
    const int t_beg = split * p.tiles_per_split;
    const int t_cnt = min(p.tiles_per_split, n_wt - t_beg);  // >= 1 by the plan; <= 0 handled (no tiles)
    const int my_n = t_cnt > warp ? (t_cnt - warp + NW - 1) / NW : 0;
    // key column from which some row needs the mask: the smallest row limit (query 0 of the block) or seqlen_k
    const int mask_from = p.causal ? min(sk, off + 1) : sk;

    const T* qg = reinterpret_cast<const T*>(p.q) + b * p.q_bs;
    const T* kg = reinterpret_cast<const T*>(p.k) + b * p.k_bs + (long long)kvh * p.k_hs;
    const T* vg = reinterpret_cast<const T*>(p.v) + b * p.v_bs + (long long)kvh * p.v_hs;

    // ---- Q (rows >= R zero-filled), one group of its own
    for (int c = tid; c < RP * CH; c += NT) {
        const int row = c / CH, ch = c - row * CH;
        const bool valid = row < p.R;
        const T* src = qg;
        if (valid) src = qg + (long long)(row % sq) * p.q_rs + (long long)(hb * p.G + row / sq) * p.q_hs + ch * 8;
        cp_async_16(smem_u32(sQ + row * LDS + ch * 8), src, valid);
    }
    cp_async_commit();

    // ---- this warp's ring; lane copies chunk (lane & 15) of rows (lane >> 4) + 2 j of a 32-key tile
    T* const ring = sKV + warp * ST * 2 * BN * LDS;
    const int ld_ch = lane & 15, ld_r0 = lane >> 4;
    const uint32_t ld_dst = smem_u32(ring + ld_r0 * LDS + ld_ch * 8);
    // in-tile offsets in 32-bit ints: is_aligned keeps 2 * kBN * row stride < 2^31 (this tile spans BN rows)
    const int k_rs2 = 2 * (int)p.k_rs, v_rs2 = 2 * (int)p.v_rs;
    auto load_tile = [&](int j, int stage) {  // j: this warp's j-th tile
        const int n0 = (t_beg + warp + j * NW) * BN;
        const uint32_t dk = ld_dst + stage * (2 * BN * LDS * 2);
        const uint32_t dv = dk + BN * LDS * 2;
        const T* kt = kg + (long long)(n0 + ld_r0) * p.k_rs + ld_ch * 8;
        const T* vt = vg + (long long)(n0 + ld_r0) * p.v_rs + ld_ch * 8;
        if (n0 + BN <= sk) {  // full tile: no bounds checks
#pragma unroll
            for (int jj = 0; jj < BN / 2; ++jj) {
                cp_async_16<ATTN_DEC_L2H != 0>(dk + jj * 2 * LDS * 2, kt + jj * k_rs2, true);
                cp_async_16<ATTN_DEC_L2H != 0>(dv + jj * 2 * LDS * 2, vt + jj * v_rs2, true);
            }
        } else {  // the tile crossing seqlen_k: rows past it zero-filled (nothing read)
#pragma unroll
            for (int jj = 0; jj < BN / 2; ++jj) {
                const bool valid = n0 + ld_r0 + 2 * jj < sk;
                cp_async_16<ATTN_DEC_L2H != 0>(dk + jj * 2 * LDS * 2, valid ? kt + jj * k_rs2 : kg, valid);
                cp_async_16<ATTN_DEC_L2H != 0>(dv + jj * 2 * LDS * 2, valid ? vt + jj * v_rs2 : vg, valid);
            }
        }
    };
#pragma unroll
    for (int s = 0; s < ST - 1; ++s) {
        if (s < my_n) load_tile(s, s);
        cp_async_commit();  // always: the group count stays uniform
    }

    // groups so far: Q, then ST - 1 tiles -> Q is complete with ST - 1 groups pending
    cp_async_wait<ST - 1>();
    __syncthreads();  // every thread's Q chunks visible

    const uint32_t sQ_lane = smem_u32(sQ + (lane & 15) * LDS + (lane >> 4) * 8);
    uint32_t q_frag[QREG ? KD : 1][4];
    if constexpr (QREG) {
#pragma unroll
        for (int kk = 0; kk < KD; ++kk)
            ldmatrix_x4(sQ_lane + kk * 16 * 2, q_frag[kk][0], q_frag[kk][1], q_frag[kk][2], q_frag[kk][3]);
    }
    const int k_lane_off = ((lane & 7) + (lane >> 4) * 8) * LDS + ((lane >> 3) & 1) * 8;
    const int v_lane_off = (lane & 15) * LDS + (lane >> 4) * 8;
    const float sl2 = p.scale_log2;

    // key limit of this thread's row [mi][rr] (padding rows borrow row R - 1's)
    auto row_limit = [&](int mi, int rr) -> int {
        const int r = mi * 16 + g + rr * 8;
        const int rc = r < p.R ? r : p.R - 1;
        return p.causal ? min(sk, rc % sq + off + 1) : sk;
    };

    float o_acc[MI][NO][4];
    float m_run[MI][2], l_run[MI][2];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int n = 0; n < NO; ++n) o_acc[mi][n][0] = o_acc[mi][n][1] = o_acc[mi][n][2] = o_acc[mi][n][3] = 0.f;
        m_run[mi][0] = m_run[mi][1] = -INFINITY;
        l_run[mi][0] = l_run[mi][1] = 0.f;
    }

    int rd = 0, wr = ST - 1;  // ring stages: read (tile it), write (tile it + ST - 1)
    for (int it = 0; it < my_n; ++it) {
        // groups committed before this point: 1 + (ST - 1) + it; tile it is group it + 1 -> ST - 2 may pend
        cp_async_wait<ST - 2>();
        __syncwarp();  // every lane's copies of tile it visible to the warp; every lane done with tile it - 1
        if (it + ST - 1 < my_n) load_tile(it + ST - 1, wr);
        cp_async_commit();
#if ATTN_DEC_PF > 0
        if (it + ST - 1 + ATTN_DEC_PF < my_n) {  // rows of a later tile of this warp into L2 (no shared memory)
            const int r = (t_beg + warp + (it + ST - 1 + ATTN_DEC_PF) * NW) * BN + lane;
            if (r < sk) {
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], 256;\n" ::"l"(kg + (long long)r * p.k_rs) : "memory");
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], 256;\n" ::"l"(vg + (long long)r * p.v_rs) : "memory");
            }
        }
#endif
        wr = (wr + 1 == ST) ? 0 : wr + 1;

        const int n0 = (t_beg + warp + it * NW) * BN;
        const T* sk_t = ring + rd * 2 * BN * LDS;
        const uint32_t sKb = smem_u32(sk_t + k_lane_off);
        const uint32_t sVb = smem_u32(sk_t + BN * LDS + v_lane_off);
        rd = (rd + 1 == ST) ? 0 : rd + 1;

        // ---- S = Q K^T (RP x 32)
        float sc[MI][NS][4];
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int n = 0; n < NS; ++n) sc[mi][n][0] = sc[mi][n][1] = sc[mi][n][2] = sc[mi][n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
            uint32_t a[MI][4];
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
                if constexpr (QREG) {
                    a[mi][0] = q_frag[kk][0];
                    a[mi][1] = q_frag[kk][1];
                    a[mi][2] = q_frag[kk][2];
                    a[mi][3] = q_frag[kk][3];
                } else {
                    ldmatrix_x4(sQ_lane + (mi * 16 * LDS + kk * 16) * 2, a[mi][0], a[mi][1], a[mi][2], a[mi][3]);
                }
            }
#pragma unroll
            for (int np = 0; np < NS / 2; ++np) {
                uint32_t b0, b1, b2, b3;
                ldmatrix_x4(sKb + (np * 16 * LDS + kk * 16) * 2, b0, b1, b2, b3);
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) {
                    Ops<T>::mma(sc[mi][2 * np], a[mi], b0, b1);
                    Ops<T>::mma(sc[mi][2 * np + 1], a[mi], b2, b3);
                }
            }
        }

        // ---- mask (tiles crossing some row limit or seqlen_k)
        if (n0 + BN > mask_from) {
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
                const int lim0 = row_limit(mi, 0), lim1 = row_limit(mi, 1);
#pragma unroll
                for (int n = 0; n < NS; ++n) {
                    const int col = n0 + n * 8 + 2 * t4;
                    if (col >= lim0) sc[mi][n][0] = -INFINITY;
                    if (col + 1 >= lim0) sc[mi][n][1] = -INFINITY;
                    if (col >= lim1) sc[mi][n][2] = -INFINITY;
                    if (col + 1 >= lim1) sc[mi][n][3] = -INFINITY;
                }
            }
        }

        // ---- online softmax, P straight into the PV A fragments
        uint32_t pf[MI][BN / 16][4];
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
            for (int rr = 0; rr < 2; ++rr) {
                float mx = m_run[mi][rr];
#pragma unroll
                for (int n = 0; n < NS; ++n) mx = fmaxf(mx, fmaxf(sc[mi][n][2 * rr], sc[mi][n][2 * rr + 1]));
                mx = quad_max(mx);
                const float ms = (mx == -INFINITY) ? 0.f : mx * sl2;
                const float alpha = (mx == m_run[mi][rr]) ? 1.f : fast_exp2(m_run[mi][rr] * sl2 - ms);
                m_run[mi][rr] = mx;
                float rs = 0.f;
#pragma unroll
                for (int n = 0; n < NS; ++n) {
                    const float e0 = fast_exp2(fmaf(sc[mi][n][2 * rr], sl2, -ms));
                    const float e1 = fast_exp2(fmaf(sc[mi][n][2 * rr + 1], sl2, -ms));
                    rs += e0 + e1;
                    pf[mi][n >> 1][(n & 1) * 2 + rr] = Ops<T>::pack(e0, e1);
                }
                l_run[mi][rr] = l_run[mi][rr] * alpha + rs;
#pragma unroll
                for (int n = 0; n < NO; ++n) {
                    o_acc[mi][n][2 * rr] *= alpha;
                    o_acc[mi][n][2 * rr + 1] *= alpha;
                }
            }
        }

        // ---- O += P V
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
#pragma unroll
            for (int dp = 0; dp < D / 16; ++dp) {
                uint32_t b0, b1, b2, b3;
                ldmatrix_x4_trans(sVb + (kk * 16 * LDS + dp * 16) * 2, b0, b1, b2, b3);
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) {
                    Ops<T>::mma(o_acc[mi][2 * dp], pf[mi][kk], b0, b1);
                    Ops<T>::mma(o_acc[mi][2 * dp + 1], pf[mi][kk], b2, b3);
                }
            }
        }
    }
    cp_async_wait<0>();  // only empty groups can remain; nothing may land in the ring after this

    // ---- merge the warps: (m in log2 units, l) per row
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
            const float l = quad_sum(l_run[mi][rr]);
            if (t4 == 0) {
                const int row = mi * 16 + g + rr * 8;
                sM[warp * 32 + row] = (m_run[mi][rr] == -INFINITY) ? -INFINITY : m_run[mi][rr] * sl2;
                sL[warp * 32 + row] = l;
            }
        }
    }
    __syncthreads();  // (m, l) of every warp visible; every warp is done with its ring (sO overwrites it)

    auto row_ml = [&](int row, float& M, float& L) {  // fixed order over warps
        M = -INFINITY;
#pragma unroll
        for (int w = 0; w < NW; ++w) M = fmaxf(M, sM[w * 32 + row]);
        L = 0.f;
        if (M != -INFINITY) {
#pragma unroll
            for (int w = 0; w < NW; ++w) {
                const float mw = sM[w * 32 + row];
                if (mw != -INFINITY) L += fast_exp2(mw - M) * sL[w * 32 + row];
            }
        }
    };

    float* sOw = sO + warp * RP * OLD;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
            const int row = mi * 16 + g + rr * 8;
            float M, L;
            row_ml(row, M, L);
            const float mw = sM[warp * 32 + row];
            const float f = (mw == -INFINITY || !(L > 0.f)) ? 0.f : fast_exp2(mw - M) / L;
#pragma unroll
            for (int n = 0; n < NO; ++n)
                *reinterpret_cast<float2*>(sOw + row * OLD + n * 8 + 2 * t4) =
                    make_float2(o_acc[mi][n][2 * rr] * f, o_acc[mi][n][2 * rr + 1] * f);
        }
    }
    __syncthreads();

    // ---- sum over warps (fixed order) and store rows < R: 16-byte chunks of 8 columns
    T* og = reinterpret_cast<T*>(p.o) + b * p.o_bs;
    for (int c = tid; c < p.R * CH; c += NT) {
        const int row = c / CH, ch = c - row * CH;
        float acc[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] = 0.f;
#pragma unroll
        for (int w = 0; w < NW; ++w) {
            const float4 x0 = *reinterpret_cast<const float4*>(sO + (w * RP + row) * OLD + ch * 8);
            const float4 x1 = *reinterpret_cast<const float4*>(sO + (w * RP + row) * OLD + ch * 8 + 4);
            acc[0] += x0.x; acc[1] += x0.y; acc[2] += x0.z; acc[3] += x0.w;
            acc[4] += x1.x; acc[5] += x1.y; acc[6] += x1.z; acc[7] += x1.w;
        }
        const int h = hb * p.G + row / sq, i = row % sq;
        float lse = 0.f;
        if (ch == 0) {
            float M, L;
            row_ml(row, M, L);
            lse = (L > 0.f) ? (M + log2f(L)) * kLn2 : (partial ? -INFINITY : INFINITY);
        }
        if (partial) {
            const long long row_off = (((long long)split * p.batch + b) * p.hq + h) * sq + i;
            float* dst = p.o_part + row_off * D + ch * 8;
            reinterpret_cast<float4*>(dst)[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
            reinterpret_cast<float4*>(dst)[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
            if (ch == 0) p.lse_part[row_off] = lse;
        } else {
            uint4 u;
            u.x = Ops<T>::pack(acc[0], acc[1]);
            u.y = Ops<T>::pack(acc[2], acc[3]);
            u.z = Ops<T>::pack(acc[4], acc[5]);
            u.w = Ops<T>::pack(acc[6], acc[7]);
            *reinterpret_cast<uint4*>(og + (long long)i * p.o_rs + (long long)h * p.o_hs + ch * 8) = u;
            if (ch == 0) p.lse[((long long)b * p.hq + h) * sq + i] = lse;
        }
    }
}

// Split combine for attn_dec (head_dim 128): attn_combine's math and fixed summation order, one float4 of the
// row per lane, the split loop unrolled by 4 so four splits' loads are in flight at once (the partials were
// just written and sit in L2: the loop is latency bound, ~32 splits at b1).
template <typename T>
__global__ void __launch_bounds__(128) attn_combine_dec(const KParams p) {
    constexpr int D = kDecD;
    const long long rows = (long long)p.batch * p.hq * p.sq;
    const long long row = (long long)blockIdx.x * 4 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const int S = p.num_splits;
    bool empty;
    const float lse = combined_lse(p.lse_part, S, rows, row, lane, empty);
    const int i = (int)(row % p.sq);
    const long long bh = row / p.sq;
    const int h = (int)(bh % p.hq);
    const int b = (int)(bh / p.hq);
    if (lane == 0) p.lse[row] = lse;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (!empty) {
        const float* src = p.o_part + row * D + lane * 4;
        auto add = [&](float ls, const float4& v) {
            const float w = (ls == -INFINITY) ? 0.f : expf(ls - lse);
            acc.x += w * v.x;
            acc.y += w * v.y;
            acc.z += w * v.z;
            acc.w += w * v.w;
        };
        int s = 0;
        for (; s + 4 <= S; s += 4) {  // four splits' loads issued before their sums (same order of sums)
            float ls[4];
            float4 v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                ls[u] = p.lse_part[(s + u) * rows + row];
                v[u] = *reinterpret_cast<const float4*>(src + (s + u) * rows * D);
            }
#pragma unroll
            for (int u = 0; u < 4; ++u) add(ls[u], v[u]);
        }
        for (; s < S; ++s) add(p.lse_part[s * rows + row], *reinterpret_cast<const float4*>(src + s * rows * D));
    }
    T* dst = reinterpret_cast<T*>(p.o) + b * p.o_bs + (long long)i * p.o_rs + (long long)h * p.o_hs;
    *reinterpret_cast<uint2*>(dst + lane * 4) = make_uint2(Ops<T>::pack(acc.x, acc.y), Ops<T>::pack(acc.z, acc.w));
}

template <int MI, typename T>
int launch_dec_mi(const KParams& kp, const Plan& pl, cudaStream_t stream) {
    constexpr int NW = ATTN_DEC_NW, ST = ATTN_DEC_ST;
    constexpr int smem = dec_smem_bytes<NW, MI, ST>();
    static_assert(smem <= 227 * 1024, "shared memory");
    auto kern = attn_dec<NW, MI, ST, T>;
    if (smem > 48 * 1024) {
        if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) return 2;
    }
    // all of the unified L1/shared array as shared memory, so DecMinBlocks CTAs (two at NW 2) fit on an SM
    // (cp.async.cg bypasses L1: the kernel has no use for it)
    if (cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, 100) != cudaSuccess) return 2;
    dim3 grid((unsigned)((long long)kp.batch * pl.num_hb), (unsigned)pl.num_splits, 1u);
    kern<<<grid, NW * 32, smem, stream>>>(kp);
    if (cudaGetLastError() != cudaSuccess) return 3;
    if (pl.num_splits > 1) {
        const long long rows = (long long)kp.batch * kp.hq * kp.sq;
        attn_combine_dec<T><<<(unsigned)((rows + 3) / 4), 128, 0, stream>>>(kp);
        if (cudaGetLastError() != cudaSuccess) return 3;
    }
    return 0;
}

template <typename T>
int launch_dec(const KParams& kp, const Plan& pl, cudaStream_t stream) {
    return dec_mi(kp.R) == 1 ? launch_dec_mi<1, T>(kp, pl, stream) : launch_dec_mi<2, T>(kp, pl, stream);
}

// Splits of attn_dec: the count that minimises a simple time model (memory bound): waves of co-resident CTAs
// (per_sm from shared memory) x the CTA's K+V bytes at the SM's share of ATTN_DEC_HBM_GBS, plus a start-up
// latency per CTA (shared by the co-resident ones) and, with > 1 split, the combine (launch + its bytes).
// tiles_per_split is a multiple of NW (every warp the same number of tiles) unless one split holds all.
#ifndef ATTN_DEC_HBM_GBS
#define ATTN_DEC_HBM_GBS 4000  // achievable HBM bandwidth of the model, GB/s (H200 ~4.0 TB/s)
#endif
#ifndef ATTN_DEC_MAX_SPLITS
#define ATTN_DEC_MAX_SPLITS 128
#endif
#ifndef ATTN_DEC_PLAN
#define ATTN_DEC_PLAN 1  // session 23 candidate 2: the resident CTAs share ATTN_DEC_HBM_GBS (one CTA on an SM is not
#endif                   // held to 1 / per_sm of the SM's share), each at most ATTN_DEC_CTA_GBS: fewer splits, no combine
#ifndef ATTN_DEC_CTA_GBS
#define ATTN_DEC_CTA_GBS 40  // PLAN 2: the most one CTA streams, GB/s (NW x (ST - 1) tiles of 16 KB in flight at ~1.5 us)
#endif
void dec_plan(const attn_fwd_params* p, Plan& pl, bool workspace_known_ok) {
    pl.dec = false;
    const int group = p->num_heads_q / p->num_heads_kv;
    if (!pl.fast || p->head_dim != kDecD || pl.G != group || pl.R > 32 || p->seqlen_k <= 0) return;
    pl.dec = true;
    pl.bm = 16 * dec_mi(pl.R);
    pl.m_blocks = 1;
    const int n_wt = (p->seqlen_k + kDecBN - 1) / kDecBN;
    pl.num_splits = 1;
    pl.tiles_per_split = n_wt;
    if (!workspace_known_ok) return;
    constexpr int NW = ATTN_DEC_NW;
    const int num_sms = p->num_sms > 0 ? p->num_sms : 132;
    const int smem = dec_mi(pl.R) == 1 ? dec_smem_bytes<NW, 1, ATTN_DEC_ST>() : dec_smem_bytes<NW, 2, ATTN_DEC_ST>();
    int per_sm = (228 * 1024) / (smem + 1024);
    per_sm = per_sm < 1 ? 1 : (per_sm > 8 ? 8 : per_sm);
    const double base = (double)p->batch * pl.num_hb;
    const double sm_bw = (double)ATTN_DEC_HBM_GBS / num_sms;         // bytes per ns per SM
    const double tile_bytes = 2.0 * kDecBN * kDecD * 2;             // K + V of one 32-key tile
    const double rows = (double)p->batch * p->num_heads_q * p->seqlen_q;
    double best = 1e300;
    for (int s = 1; s <= ATTN_DEC_MAX_SPLITS && s <= n_wt; ++s) {
        int tps = (n_wt + s - 1) / s;
        if (s > 1) tps = (tps + NW - 1) / NW * NW;
        const int ns = (n_wt + tps - 1) / tps;
        if (ns != s) continue;  // the same split as a smaller s
        const double waves = ceil(base * ns / ((double)num_sms * per_sm));
        double cta_bw = sm_bw / per_sm;  // bytes per ns of one CTA
        if (ATTN_DEC_PLAN == 2) cta_bw = fmin((double)ATTN_DEC_CTA_GBS, (double)ATTN_DEC_HBM_GBS / fmin(base * ns, (double)num_sms * per_sm));
        const double cta_ns = tps * tile_bytes / cta_bw + 1500.0;
        double t = waves * cta_ns;
        if (ns > 1) t += 2500.0 + rows * ns * kDecD * 4.0 / 2000.0;  // combine: launch + partials read
        if (t < best * 0.97) {  // a split must win by 3 % (fewer splits: less partial traffic, steadier)
            best = t;
            pl.num_splits = ns;
            pl.tiles_per_split = tps;
        }
    }
}

#endif  // ATTN_DECODE

// ------------------------------------------------------------------------------------------------
// v4: wgmma path (sm_90a) for prefill with head_dim 64 / 128 / 256.
// One CTA = 128 query rows of one (batch, head) as 2 warpgroups x 64 rows. Q, K and V tiles live in
// shared memory in the 128-byte-swizzled layout wgmma reads through matrix descriptors: a tile of R rows
// x D columns is stored as D/64 column blocks of R rows x 128 B, and inside a block the 16-byte chunk c
// of row r sits at chunk position c ^ (r % 8) (every tile base is 1024-byte aligned, so the address-bit
// swizzle the hardware applies is exactly this XOR). PTX ISA "Asynchronous Warpgroup Level Matrix
// Shared Memory Layout" / "Matrix Descriptor Format".
//   S = Q K^T : wgmma SS, A = Q (K-major), B = K tile (K-major: keys are B's N rows), N = BN keys.
//   O += P V  : wgmma RS, A = P from registers (the S accumulators re-packed, as with mma.sync),
//               B = V tile with imm-trans-b = 1 (MN-major: head_dim contiguous), N = head_dim.
// K/V tiles are double-buffered with cp.async (all 256 threads load), fence.proxy.async makes the
// generic-proxy writes visible to wgmma's async proxy before the barrier.
// ------------------------------------------------------------------------------------------------
#ifndef ATTN_WGMMA
#define ATTN_WGMMA 1  // v4: 1 routes head_dim 64/128/256 prefill to the wgmma kernel
#endif
#ifndef ATTN_V_LBO_IS_DBLOCK
#define ATTN_V_LBO_IS_DBLOCK 1  // MN-major V descriptor: LBO = stride of 64-column d blocks, SBO = 8-key groups
#endif

template <typename T, int N>
struct WgSS;
template <typename T, int N>
struct WgRS;

// GENERATED by kernels/tools/gen_wgmma.py: begin
// (tile widths a build does not select stay unreferenced: no warning #177 for them)
#pragma nv_diag_suppress 177
template <>
struct WgSS<__nv_bfloat16, 64> {
__device__ __forceinline__ static void run(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(accumulate));
}
};

template <>
struct WgSS<__nv_bfloat16, 80> {
__device__ __forceinline__ static void run(float (&d)[40], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39}, %40, %41, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
        : "l"(da), "l"(db), "r"(accumulate));
}
};

template <>
struct WgSS<__nv_bfloat16, 96> {
__device__ __forceinline__ static void run(float (&d)[48], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, %48, %49, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
        : "l"(da), "l"(db), "r"(accumulate));
}
};

template <>
struct WgSS<__nv_bfloat16, 112> {
__device__ __forceinline__ static void run(float (&d)[56], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %58, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n112k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55}, %56, %57, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
        : "l"(da), "l"(db), "r"(accumulate));
}
};

template <>
struct WgSS<__nv_bfloat16, 128> {
__device__ __forceinline__ static void run(float (&d)[64], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(accumulate));
}
};

template <>
struct WgSS<__nv_bfloat16, 144> {
__device__ __forceinline__ static void run(float (&d)[72], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %74, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n144k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71}, %72, %73, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71])
        : "l"(da), "l"(db), "r"(accumulate));
}
};

template <>
struct WgSS<__nv_bfloat16, 160> {
__device__ __forceinline__ static void run(float (&d)[80], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %82, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n160k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79}, %80, %81, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
        : "l"(da), "l"(db), "r"(accumulate));
}
};

template <>
struct WgSS<__nv_bfloat16, 176> {
__device__ __forceinline__ static void run(float (&d)[88], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n176k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87}, %88, %89, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
        : "l"(da), "l"(db), "r"(accumulate));
}
};

template <>
struct WgSS<__nv_bfloat16, 192> {
__device__ __forceinline__ static void run(float (&d)[96], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}, %96, %97, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "l"(da), "l"(db), "r"(accumulate));
}
};

template <>
struct WgRS<__nv_bfloat16, 64> {
__device__ __forceinline__ static void run(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
};

template <>
struct WgRS<__nv_bfloat16, 96> {
__device__ __forceinline__ static void run(float (&d)[48], const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %53, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, {%48,%49,%50,%51}, %52, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
};

template <>
struct WgRS<__nv_bfloat16, 128> {
__device__ __forceinline__ static void run(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
};

template <>
struct WgRS<__nv_bfloat16, 192> {
__device__ __forceinline__ static void run(float (&d)[96], const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}, {%96,%97,%98,%99}, %100, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
};

template <>
struct WgRS<__nv_bfloat16, 256> {
__device__ __forceinline__ static void run(float (&d)[128], const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, {%128,%129,%130,%131}, %132, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
};

template <>
struct WgSS<__half, 64> {
__device__ __forceinline__ static void run(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(accumulate));
}
};

template <>
struct WgSS<__half, 80> {
__device__ __forceinline__ static void run(float (&d)[40], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n80k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39}, %40, %41, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
        : "l"(da), "l"(db), "r"(accumulate));
}
};

template <>
struct WgSS<__half, 96> {
__device__ __forceinline__ static void run(float (&d)[48], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n96k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, %48, %49, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
        : "l"(da), "l"(db), "r"(accumulate));
}
};

template <>
struct WgSS<__half, 112> {
__device__ __forceinline__ static void run(float (&d)[56], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %58, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n112k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55}, %56, %57, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
        : "l"(da), "l"(db), "r"(accumulate));
}
};

template <>
struct WgSS<__half, 128> {
__device__ __forceinline__ static void run(float (&d)[64], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(accumulate));
}
};

template <>
struct WgSS<__half, 144> {
__device__ __forceinline__ static void run(float (&d)[72], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %74, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n144k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71}, %72, %73, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71])
        : "l"(da), "l"(db), "r"(accumulate));
}
};

template <>
struct WgSS<__half, 160> {
__device__ __forceinline__ static void run(float (&d)[80], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %82, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n160k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79}, %80, %81, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
        : "l"(da), "l"(db), "r"(accumulate));
}
};

template <>
struct WgSS<__half, 176> {
__device__ __forceinline__ static void run(float (&d)[88], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n176k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87}, %88, %89, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
        : "l"(da), "l"(db), "r"(accumulate));
}
};

template <>
struct WgSS<__half, 192> {
__device__ __forceinline__ static void run(float (&d)[96], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}, %96, %97, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "l"(da), "l"(db), "r"(accumulate));
}
};

template <>
struct WgRS<__half, 64> {
__device__ __forceinline__ static void run(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
};

template <>
struct WgRS<__half, 96> {
__device__ __forceinline__ static void run(float (&d)[48], const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %53, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n96k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, {%48,%49,%50,%51}, %52, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
};

template <>
struct WgRS<__half, 128> {
__device__ __forceinline__ static void run(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
};

template <>
struct WgRS<__half, 192> {
__device__ __forceinline__ static void run(float (&d)[96], const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}, {%96,%97,%98,%99}, %100, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
};

template <>
struct WgRS<__half, 256> {
__device__ __forceinline__ static void run(float (&d)[128], const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, {%128,%129,%130,%131}, %132, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
};
// GENERATED: end

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
template <int K>
__device__ __forceinline__ void reg_fence(float (&r)[K]) {
#pragma unroll
    for (int i = 0; i < K; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Matrix descriptor: start address, leading / stride byte offsets (all >> 4), 128-byte swizzle (mode 1).
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo & 0x3FFFFu) >> 4) << 16) |
           ((uint64_t)((sbo & 0x3FFFFu) >> 4) << 32) | (1ull << 62);
}
// The same for a 64-byte-swizzled operand (layout type 2 in bits 62-63; PTX ISA, "Matrix Descriptor Format").
__device__ __forceinline__ uint64_t wg_desc64(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (wg_desc(addr, lbo, sbo) & ~(3ull << 62)) | (2ull << 62);
}

constexpr int kWgBM = 128;  // query rows per CTA: 2 warpgroups x 64
template <int D>
struct WgCfg {
    static constexpr int BN = D == 256 ? 64 : 128;  // keys per tile
};
template <int D>
constexpr int wg_smem_bytes() {
    return 1024 + kWgBM * D * 2 + 2 * 2 * WgCfg<D>::BN * D * 2;  // align slack + Q + 2 stages of K and V
}

// Byte offset of 16-byte chunk `c` (columns 8c..8c+7) of row `r` in a swizzled tile of R rows.
template <int R>
__device__ __forceinline__ uint32_t sw_off(int r, int c) {
    return (uint32_t)((c >> 3) * (R * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// cp.async an R x D tile (rows at `g`, row stride `rs` elements) into the swizzled tile at `dst`; rows
// >= `valid` are zero-filled and read nothing (`safe` is a valid address used for them).
template <int R, int D, typename T>
__device__ __forceinline__ void wg_load(uint32_t dst, const T* g, long long rs, int valid, const T* safe, int tid) {
    constexpr int CH = D / 8;
#pragma unroll 4
    for (int i = tid; i < R * CH; i += 256) {
        const int r = i / CH, c = i % CH;
        const bool ok = r < valid;
        cp_async_16(dst + sw_off<R>(r, c), ok ? (const void*)(g + (long long)r * rs + c * 8) : (const void*)safe, ok);
    }
}

// grid = m_blocks * batch * hq CTAs (heaviest causal row blocks first), 256 threads.
template <int D, typename T>
__global__ void __launch_bounds__(256, 1) attn_fwd_wgmma(const KParams p, int m_blocks) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap();  // wgmma is sm_90a only; the host never launches this kernel elsewhere (hopper_device())
#else
    constexpr int BN = WgCfg<D>::BN, BM = kWgBM;
    constexpr int NC = BN / 8;  // 8-column chunks of the S accumulator
    constexpr int NO = D / 8;   // 8-column chunks of the O accumulator
    constexpr uint32_t kTile = BN * D * 2;
#if ATTN_V_LBO_IS_DBLOCK
    constexpr uint32_t kVLbo = BN * 128, kVSbo = 1024;
#else
    constexpr uint32_t kVLbo = 1024, kVSbo = BN * 128;
#endif
    extern __shared__ uint8_t smem_raw[];
    const uint32_t sQ = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t sKV = sQ + BM * D * 2;  // stage s: K at sKV + 2 s kTile, V right after it

    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const int bh_count = p.batch * p.hq;
    const int mb = m_blocks - 1 - (int)(blockIdx.x / bh_count);
    const int bh = (int)(blockIdx.x % bh_count);
    const int b = bh / p.hq, h = bh % p.hq, hk = h / p.group;
    const int m0 = mb * BM;
    const int off = p.sk - p.sq;  // bottom-right causal: row i sees keys j <= i + off
    int n_end = p.sk;
    if (p.causal) n_end = min(n_end, m0 + BM + off);
    const int n_tiles = n_end > 0 ? (n_end + BN - 1) / BN : 0;
    const T* qg = static_cast<const T*>(p.q) + b * p.q_bs + h * p.q_hs;
    const T* kg = static_cast<const T*>(p.k) + b * p.k_bs + hk * p.k_hs;
    const T* vg = static_cast<const T*>(p.v) + b * p.v_bs + hk * p.v_hs;
    const float sl2 = p.scale_log2;

    const int r0 = m0 + 64 * wg + 16 * warp + (lane >> 2);  // this thread's rows: r0 and r0 + 8
    const int t2 = 2 * (lane & 3);

    float o[NO * 4];
#pragma unroll
    for (int i = 0; i < NO * 4; ++i) o[i] = 0.f;
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.f, 0.f};

    if (n_tiles > 0) {
        wg_load<BM, D>(sQ, qg + (long long)m0 * p.q_rs, p.q_rs, p.sq - m0, qg, tid);
        wg_load<BN, D>(sKV, kg, p.k_rs, p.sk, kg, tid);
        wg_load<BN, D>(sKV + kTile, vg, p.v_rs, p.sk, vg, tid);
        cp_async_commit();
    }
    for (int j = 0; j < n_tiles; ++j) {
        const uint32_t sK = sKV + (j & 1) * 2 * kTile, sV = sK + kTile;
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();  // tile j visible to all; every warpgroup is done with tile j - 1's stage
        if (j + 1 < n_tiles) {
            const uint32_t nK = sKV + ((j + 1) & 1) * 2 * kTile;
            const int k0 = (j + 1) * BN;
            wg_load<BN, D>(nK, kg + (long long)k0 * p.k_rs, p.k_rs, p.sk - k0, kg, tid);
            wg_load<BN, D>(nK + kTile, vg + (long long)k0 * p.v_rs, p.v_rs, p.sk - k0, vg, tid);
            cp_async_commit();
        }
        // S = Q K^T for this warpgroup's 64 rows
        float s[NC * 4];
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const uint32_t qa = sQ + (kk >> 2) * (BM * 128) + wg * (64 * 128) + (kk & 3) * 32;
            const uint32_t kb = sK + (kk >> 2) * (BN * 128) + (kk & 3) * 32;
            WgSS<T, BN>::run(s, wg_desc(qa, 16, 1024), wg_desc(kb, 16, 1024), kk > 0);
        }
        wg_commit();
        wg_wait<0>();
        reg_fence(s);

        const int kbase = j * BN;
        if (kbase + BN > p.sk || (p.causal && kbase + BN - 1 > m0 + off)) {
#pragma unroll
            for (int c = 0; c < NC; ++c) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int row = r0 + ((e >> 1) << 3);
                    const int col = kbase + 8 * c + t2 + (e & 1);
                    const int lim = p.causal ? min(p.sk, row + off + 1) : p.sk;
                    if (col >= lim) s[4 * c + e] = -INFINITY;
                }
            }
        }
        float mx[2] = {m_r[0], m_r[1]};
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            mx[0] = fmaxf(mx[0], fmaxf(s[4 * c], s[4 * c + 1]));
            mx[1] = fmaxf(mx[1], fmaxf(s[4 * c + 2], s[4 * c + 3]));
        }
        float ms[2], alpha[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            mx[i] = quad_max(mx[i]);
            ms[i] = mx[i] == -INFINITY ? 0.f : mx[i] * sl2;
            alpha[i] = mx[i] == m_r[i] ? 1.f : fast_exp2(m_r[i] * sl2 - ms[i]);
            m_r[i] = mx[i];
            l_r[i] *= alpha[i];
        }
        uint32_t pa[BN / 16][4];
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const float p0 = fast_exp2(s[4 * c] * sl2 - ms[0]), p1 = fast_exp2(s[4 * c + 1] * sl2 - ms[0]);
            const float p2 = fast_exp2(s[4 * c + 2] * sl2 - ms[1]), p3 = fast_exp2(s[4 * c + 3] * sl2 - ms[1]);
            l_r[0] += p0 + p1;
            l_r[1] += p2 + p3;
            pa[c >> 1][(c & 1) * 2 + 0] = Ops<T>::pack(p0, p1);  // A fragment: a0/a2 row g, a1/a3 row g + 8
            pa[c >> 1][(c & 1) * 2 + 1] = Ops<T>::pack(p2, p3);
        }
#pragma unroll
        for (int c = 0; c < NO; ++c) {
            o[4 * c] *= alpha[0];
            o[4 * c + 1] *= alpha[0];
            o[4 * c + 2] *= alpha[1];
            o[4 * c + 3] *= alpha[1];
        }
        // O += P V
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
            WgRS<T, D>::run(o, pa[kk], wg_desc(sV + kk * (16 * 128), kVLbo, kVSbo));
        wg_commit();
        wg_wait<0>();
        reg_fence(o);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const float l = quad_sum(l_r[i]);
        const int row = r0 + 8 * i;
        if (row >= p.sq) continue;
        const float inv = l > 0.f ? 1.f / l : 0.f;
        T* og = static_cast<T*>(p.o) + b * p.o_bs + (long long)row * p.o_rs + h * p.o_hs;
#pragma unroll
        for (int c = 0; c < NO; ++c)
            *reinterpret_cast<uint32_t*>(og + 8 * c + t2) = Ops<T>::pack(o[4 * c + 2 * i] * inv, o[4 * c + 2 * i + 1] * inv);
        if ((lane & 3) == 0)
            p.lse[((long long)b * p.hq + h) * p.sq + row] = l > 0.f ? (m_r[i] * sl2 + log2f(l)) * kLn2 : INFINITY;
    }
#endif
}

template <int D, typename T>
int launch_wgmma(const KParams& kp, int m_blocks, cudaStream_t stream) {
    constexpr int smem = wg_smem_bytes<D>();
    auto kern = attn_fwd_wgmma<D, T>;
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) return 3;
    const long long grid = (long long)m_blocks * kp.batch * kp.hq;
    kern<<<(unsigned)grid, 256, smem, stream>>>(kp, m_blocks);
    return cudaGetLastError() == cudaSuccess ? 0 : 3;
}

template <typename T>
int dispatch_wgmma(const KParams& kp, int D, cudaStream_t stream) {
    const int m_blocks = (kp.sq + kWgBM - 1) / kWgBM;
    switch (D) {
        case 64: return launch_wgmma<64, T>(kp, m_blocks, stream);
        case 128: return launch_wgmma<128, T>(kp, m_blocks, stream);
        case 256: return launch_wgmma<256, T>(kp, m_blocks, stream);
    }
    return 1;
}

// The wgmma kernel takes prefill work that fills at least one wave of 128-row CTAs; decode, GQA
// packing, split-KV and other head dims stay on the mma.sync kernels.
// The wgmma kernels exist only in an sm_90a build and run only on a compute capability 9.x device; elsewhere
// (an sm_100a build on Blackwell, say) the mma.sync kernels, which every sm_80+ build has, take the work.
bool hopper_device() {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return major == 9;
}

bool use_wgmma(const attn_fwd_params* p, const Plan& pl) {
    if (!ATTN_WGMMA || !pl.fast || pl.G != 1 || pl.num_splits != 1 || !hopper_device()) return false;
    const int D = p->head_dim;
    // v5: d64 stays on the mma.sync kernel (v4 measured wgmma d64 at 0.88x flash, v3's mma.sync d64 at 1.0x:
    // with 64 columns the serial softmax dominates a warpgroup that has no GEMM to overlap it with)
    if (D != 128 && D != 256) return false;
    const int num_sms = p->num_sms > 0 ? p->num_sms : 132;
    const long long ctas = (long long)((p->seqlen_q + kWgBM - 1) / kWgBM) * p->batch * p->num_heads_q;
    return ctas >= num_sms;
}

// ------------------------------------------------------------------------------------------------
// v6: warp-specialized wgmma kernel (sm_90a) for prefill with head_dim 64 / 128 / 256.
// One CTA = 128 query rows of one (batch, head), 3 warpgroups (384 threads):
//   * warpgroup 0 is the producer: it gives its registers back (setmaxnreg.dec) and one thread issues
//     TMA bulk-tensor copies (cp.async.bulk.tensor.4d, 128-byte swizzle) of Q once and of K/V tiles into
//     an ST-stage ring. Every stage has a "full" mbarrier (the copy's transaction bytes complete it) and
//     an "empty" mbarrier (one arrival per consumer warpgroup when its wgmma reads of the stage are done);
//     K and V have separate rings so K of tile j+1 is in flight while V of tile j is still being read.
//   * warpgroups 1 and 2 are consumers of 64 query rows each (setmaxnreg.inc for the accumulators).
//     Intra-warpgroup overlap (software pipelining): in iteration j a warpgroup issues S_j = Q K_j^T and
//     O += P_{j-1} V_{j-1} back to back, waits only for S_j (wgmma.wait_group 1), runs the softmax of
//     tile j while the tensor cores still do P_{j-1} V_{j-1}, then waits for the PV and rescales O.
//   * Ping-pong (PP): the two consumers take turns issuing their GEMMs (named barriers 1 and 2), so the
//     softmax of one warpgroup overlaps the GEMMs of the other.
// Shared memory: Q (128 x D), ST stages of K and of V (BN x D), each stored as D/64 column blocks of
// rows x 128 B in the 128B-swizzle layout that TMA writes and wgmma reads (see the v4 comment above).
// Rows past seqlen_q / seqlen_k come in as zeros (TMA out-of-bounds fill) and are masked like v4.
// PTX ISA: "cp.async.bulk.tensor", "mbarrier", "setmaxnreg", "bar.sync / bar.arrive", "wgmma".
// ------------------------------------------------------------------------------------------------
#ifndef ATTN_WS
#define ATTN_WS 1  // v6: 1 routes head_dim 64/128/256 prefill (>= 1 wave of CTAs) to the warp-specialized kernel
#endif
#ifndef ATTN_WS_D64
#define ATTN_WS_D64 1  // include head_dim 64 (0: d64 stays on the mma.sync kernel, as in v5)
#endif
#ifndef ATTN_WS_BN64
#define ATTN_WS_BN64 128
#endif
#ifndef ATTN_WS_ST64
#define ATTN_WS_ST64 2
#endif
#ifndef ATTN_WS_BN128
#define ATTN_WS_BN128 128
#endif
#ifndef ATTN_WS_ST128
#define ATTN_WS_ST128 2
#endif
#ifndef ATTN_WS_BN256
#define ATTN_WS_BN256 80
#endif
#ifndef ATTN_WS_ST256
#define ATTN_WS_ST256 2
#endif
#ifndef ATTN_WS_PP64
#define ATTN_WS_PP64 1
#endif
#ifndef ATTN_WS_PP128
#define ATTN_WS_PP128 1
#endif
#ifndef ATTN_WS_PP256
#define ATTN_WS_PP256 1  // v8: on (v6: off; persistent without it lost 10% at d256, run 13)
#endif
#ifndef ATTN_WS_PERSIST
#define ATTN_WS_PERSIST 1  // v7: one CTA per SM looping over tiles (0: one CTA per tile, as v6)
#endif
#ifndef ATTN_WS_DYN
#define ATTN_WS_DYN 1  // v10: causal tiles taken from an atomic counter in the workspace (greedy, like the
#endif                 // hardware's CTA order) instead of the static round-robin order
#ifndef ATTN_WS_PERSIST_C256
#define ATTN_WS_PERSIST_C256 0  // v8: causal d256 runs one CTA per tile (the hardware's greedy CTA order balances
#endif                          // the uneven causal tiles; static round-robin lost 8% there in run 13)
#ifndef ATTN_WS_MERGE64  // v9: tile boundary merged into the pipeline (S_0 of the next tile with the last PV);
#define ATTN_WS_MERGE64 0  // off where the consumer's register budget would spill (d64 at 160, d256 at 240)
#endif
#ifndef ATTN_WS_MERGE128
#define ATTN_WS_MERGE128 0  // v17 (run 39, H100: d128 grid 0.951 -> 0.985x FA3 in one process); v9-v16: 1
#endif
#ifndef ATTN_WS_MERGE256
#define ATTN_WS_MERGE256 0
#endif
#ifndef ATTN_WS_D96
#define ATTN_WS_D96 1  // v18 (run 42, H100: d96 rows 0.55 -> 0.87x FA3; #18 hdim96_192 0.72 -> 0.93): head_dim 96 on the d128 warp-specialized kernel, Q/K/V zero-padded to 128 by TMA
#endif
#ifndef ATTN_WS_D192
#define ATTN_WS_D192 1  // v11: head_dim 192 on the warp-specialized kernel (BN 112, 3 column blocks; run 17: 0.40 -> 0.80x FA3)
#endif
#ifndef ATTN_WS_BN192
#define ATTN_WS_BN192 80  // v14: BN 80, so the TMA-O staging fits (run 27: d192 +6% vs BN 112 without it)
#endif
#ifndef ATTN_WS_NWG64
#define ATTN_WS_NWG64 3  // v8: consumer warpgroups of the d64 kernel (2 or 3: 128 or 192 rows per CTA)
#endif
#ifndef ATTN_WS_BN128N
#define ATTN_WS_BN128N 176  // v8: key-tile width of the d128 kernel when not causal
#endif
#ifndef ATTN_WS_L2MB
#define ATTN_WS_L2MB 8  // v11: tile order in sections of heads whose K+V fit this many MB of L2 (0: v10's order)
#endif
#ifndef ATTN_WS_SMSPLIT
#define ATTN_WS_SMSPLIT 0  // v12 candidate: the softmax in two branch arms (masked / not), ahead of the PV wait
                           // (1: every head_dim; 2: only where ptxas needs no spill)
#endif
#ifndef ATTN_WS_DESC_INC
#define ATTN_WS_DESC_INC 1  // v12: wgmma descriptors built once and advanced by constants (run 22: +2.2% grid)
#endif
#ifndef ATTN_WS_TWHINT
#define ATTN_WS_TWHINT 0  // v13 candidate: suspend-time hint (ns) of the mbarrier waits (0: none)
#endif
#ifndef ATTN_WS_ILP
#define ATTN_WS_ILP 0  // v13 candidate: row max and row sum over two independent chains each (shorter latency)
#endif
#ifndef ATTN_WS_RMID
#define ATTN_WS_RMID 0  // v11 candidate: rescale O between the S issue and the PV issue (FA3's order), not after the PV
#endif
#ifndef ATTN_WS_LAZY
#define ATTN_WS_LAZY 0  // v11 candidate: a warp skips the O rescale when none of its rows' running max moved
#endif
#ifndef ATTN_WS_THRESH
#define ATTN_WS_THRESH 0  // v17 candidate (off): a row keeps its reference max until the new max exceeds it by more than
#endif                    // this many powers of two; with LAZY +1.2 % (run 32) but 253/256 in run 33: the row max's P is
                          // no longer exp2(0) = 1, exact in bf16, and attnq's tolerance catches the extra rounding
#ifndef ATTN_WS_TMA_O
#define ATTN_WS_TMA_O 1  // v13: O through swizzled shared memory and a TMA store, where the staging fits (d64, d128; run 25: +9-17% d128 causal s512-s2k)
#endif
#ifndef ATTN_WS_BN128N_TMAO
#define ATTN_WS_BN128N_TMAO 128  // v15: with ATTN_WS_TMA_O, the d128 non-causal key-tile width (run 28: 128 0.90x FA3, 160 0.87, 176 without TO 0.85)
#endif
#ifndef ATTN_WS_SPLIT
#define ATTN_WS_SPLIT 1  // v16 (run 34: full 256/256): split-KV on the warp-specialized kernel where its row tiles fill < 1 wave (chunked prefill)
#endif
#ifndef ATTN_WS_SPLIT_BN128N
#define ATTN_WS_SPLIT_BN128N ATTN_WS_BN128N  // ATTN_WS_SPLIT: the d128 non-causal key-tile width (no TMA-O staging there)
#endif
#ifndef ATTN_WS_SPLIT_FORCE
#define ATTN_WS_SPLIT_FORCE 0  // ATTN_WS_SPLIT test knob: this many splits wherever the split path applies (0: cost model)
#endif
#ifndef ATTN_WS_TMA_O_QBUF
#define ATTN_WS_TMA_O_QBUF 1  // v14: with ATTN_WS_TMA_O, O staged in Q's buffer where a staging area does not fit (d256; run 27: d256 +3-4%)
#endif
#ifndef ATTN_WS_UNIF
#define ATTN_WS_UNIF 0  // session 11 candidate: the tile id and the warpgroup index broadcast by __shfl_sync (warp-uniform to
#endif                  // the compiler, as CUTLASS's canonical_warp_group_idx does)
#ifndef ATTN_WS_PRED
#define ATTN_WS_PRED 0  // session 11 candidate: the consumer leader's mbarrier arrivals as one predicated instruction each,
#endif                  // not a branch (a divergent region in the loop makes ptxas put the P V wait right after it)
#ifndef ATTN_WS_DESC32
#define ATTN_WS_DESC32 0  // session 11 candidate: the wgmma descriptors advanced on their low 32 bits (a constant high word)
#endif
#ifndef ATTN_WS_PEEL
#define ATTN_WS_PEEL 0  // session 11 candidate: the issue points whose key tile needs no mask in a loop of their own,
#endif                  // without the mask's branch (ptxas then leaves the P V wait after the row max: FA3's overlap)
#ifndef ATTN_WS_PVPIN
#define ATTN_WS_PVPIN 0  // session 12 candidate: ATTN_WS_TRACE's mark before the P V wait, never storing (ptxas then waits after the softmax)
#endif
#ifndef ATTN_WS_EMU
#define ATTN_WS_EMU 0  // session 13 candidate: every ATTN_WS_EMU-th 8-column chunk of the softmax's exp2 on the FMA pipe
#endif                 // (emu_exp2) instead of MUFU (0: none; 4: a quarter of the elements)
#ifndef ATTN_WS_TRACE
#define ATTN_WS_TRACE 0  // debug build (session 12): clock64 marks of each consumer's issue points (scripts/ws_trace.py)
#endif
#ifndef ATTN_WS_D96N
#define ATTN_WS_D96N 3  // v19 (run 61, H100; with NWG96 3, BN96 112: d96 rows +10.7 %, 0.89 -> 0.99x FA3 in the bench):
#endif                  // head_dim 96 on the padded d128 kernel without the padding's work: S over 6 k-steps (not 8),
                        // O += P V as m64n96k16 (O in 48 registers, not 64): 25 % less MMA and rescale; 2: only S's
                        // 6 k-steps (K-major operands, no partial swizzle atom); 1: as 3 with V in 128-byte swizzle;
                        // 3: V in 64-byte swizzle (three whole 32-column atoms, the layout the PTX ISA defines for n96)
#ifndef ATTN_WS_NWG96
#define ATTN_WS_NWG96 3  // v19: consumer warpgroups of the d96 kernel (3: 192 rows per CTA, FA3's tile height for
#endif                   // head_dim 96; one softmax in three hidden behind the other two's MMAs; session 15: 2)
#ifndef ATTN_WS_BN96
#define ATTN_WS_BN96 112  // v19: with ATTN_WS_NWG96 3, the d96 key-tile width (causal or not)
#endif
#ifndef ATTN_WS_NWG128
#define ATTN_WS_NWG128 2  // session 17 candidate (run 61, H100: BN 80 0.934x v18 on the d128 rows, BN 96 spills 0.654x):
#endif                    // consumer warpgroups of the d128 prefill kernel (3: 192 rows per CTA at 160 registers)
#ifndef ATTN_WS_BN128W3
#define ATTN_WS_BN128W3 96  // with ATTN_WS_NWG128 3: the d128 key-tile width (causal or not; S and P must fit 160 registers)
#endif
#ifndef ATTN_WS_ST128W3
#define ATTN_WS_ST128W3 ATTN_WS_ST128  // with ATTN_WS_NWG128 3: K/V stages (3 fit at BN 80 with the TMA-O staging)
#endif
#ifndef ATTN_WS_TMA_O_VBUF
#define ATTN_WS_TMA_O_VBUF 0  // session 10 candidate: O staged over the V ring instead of Q's buffer (FA3's choice), so the
#endif                        // next tile's Q loads early; the producer holds the next tile's first V until the store read it
                              // (1: every head_dim where the staging does not fit; 2: d128 only, e.g. BN 176)
#ifndef ATTN_WS_BN176_FROM
#define ATTN_WS_BN176_FROM 0  // session 22 candidate: d128 non-causal at BN 176 (O over the V ring) where seqlen_k >= this,
#endif                        // BN 128 below (run 72: 176 +4-5 % at s8k-s16k, -4-8 % at s512-s2k; 0: off)
#ifndef ATTN_WS_S0FIRST
#define ATTN_WS_S0FIRST 0  // session 18 candidate: at an unmerged boundary the next tile's S_0 is issued before the O store
#endif                     // (the store then runs while S_0 is on the tensor core; run 65's trace: the store ~1500 cycles)
#ifndef ATTN_WS_PUBTILE
#define ATTN_WS_PUBTILE 1  // v20 (run 66: acquisition 1250/800 -> 600/250 cycles; d128 +0.8 %): the producer publishes the decoded work unit (b, h, m0, n_tiles; KS: j0,
#endif                     // split) beside the id, so a consumer's acquisition is one shared load, not ws_unit's divisions
#ifndef ATTN_WS_SMALL
#define ATTN_WS_SMALL 1  // v20 (run 66: small_grid.toml 0.905 -> 1.069x FA3): below one wave of row tiles, the ws kernel (one CTA per tile) where the ws
#endif                   // split-KV does not take the work (ws_num_splits 1), instead of v5's kernels; K/V broadcast
                         // across kv heads (head stride 0) read as one kv head, so the tensor maps describe it
#ifndef ATTN_WS_PPFIRST
#define ATTN_WS_PPFIRST 0  // session 20 diagnostic: the consumer warpgroup that takes the first ping-pong turn (run 66's
#endif                     // trace: consumer 0's softmax 1500 cycles, consumer 1's 1190; does the slow one follow the turn?)
#ifndef ATTN_WS_RFOLD
#define ATTN_WS_RFOLD 0  // session 21 candidate: the O rescale of an issue point placed right after its row max (1: the P V
#endif                   // wait before the max, where ptxas puts it today; 2: after the max), so ptxas can put the FMULs
                         // among the exp2 (FA3's SASS does); today they trail the softmax, on the chain (NOTES, session 21)
#ifndef ATTN_WS_QDB
#define ATTN_WS_QDB 0  // session 18 candidate: two Q buffers on the d128 two-consumer kernel, so the
#endif                 // producer loads the next tile's Q while the current tile still reads its own (ws_qdb)

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// mbar_arrive where pred (one predicated instruction, no branch: the warp stays converged around it)
__device__ __forceinline__ void mbar_arrive_if(uint32_t bar, bool pred) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %1, 0;\n @p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(bar),
                 "r"((int)pred)
                 : "memory");
}
// Waits until the phase of parity `parity` of the barrier has completed.
// ATTN_WS_TWHINT > 0 passes it as try_wait's suspendTimeHint (ns, PTX ISA "mbarrier.test_wait/try_wait"): the
// thread sleeps in hardware until the phase completes or the hint runs out, instead of spinning through the
// loop after the system-dependent default time limit (each spin is issued instructions on the SMSP).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#if ATTN_WS_TWHINT > 0
    asm volatile(
        "{\n"
        ".reg .pred P1;\n"
        "WS_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1, %2;\n"
        "@P1 bra WS_DONE;\n"
        "bra WS_WAIT;\n"
        "WS_DONE:\n"
        "}\n" ::"r"(bar),
        "r"(parity), "n"(ATTN_WS_TWHINT)
        : "memory");
#else
    asm volatile(
        "{\n"
        ".reg .pred P1;\n"
        "WS_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
        "@P1 bra WS_DONE;\n"
        "bra WS_WAIT;\n"
        "WS_DONE:\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
#endif
}
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2,
                                            int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
        "[%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}
// O epilogue through shared memory (ATTN_WS_TMA_O): a bulk tensor store of one box from shared memory, in a
// per-thread bulk async-group; wait_group.read N returns once all but the N newest groups have finished
// reading their shared-memory source (PTX ISA "cp.async.bulk.tensor", "cp.async.bulk.commit_group",
// "cp.async.bulk.wait_group"). Out-of-bound elements of the box are not written.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read0() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait0() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void named_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void named_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ld_shared_u32(uint32_t addr) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ void st_shared_v4(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
    return v;
}
template <int R>
__device__ __forceinline__ void regs_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R)); }
template <int R>
__device__ __forceinline__ void regs_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R)); }
template <int K>
__device__ __forceinline__ void reg_fence_u(uint32_t (&r)[K][4]) {
#pragma unroll
    for (int i = 0; i < K; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(r[i][e])::"memory");
}

// ATTN_WS_TRACE: the leader thread of each consumer warpgroup of CTAs 0..kTrCtas-1 stamps six points of its first
// kTrIts issue points (K/V tile counter gk) with the SM's clock64: [cta][warpgroup (of 3)][gk][event], event 0 entry,
// 1 the ping-pong turn taken, 2 S and P V issued (other warpgroup let go), 3 S done, 4 softmax done, 5 P V done.
// The store is one predicated st.global (no branch: a divergent region in the loop moves ptxas's P V wait); with
// the knob off the marks compile to nothing. ATTN_WS_PVPIN compiles in only the mark before the P V wait, without a
// trace buffer (the host sets KParams::trace only under ATTN_WS_TRACE, so no store runs): in that SASS ptxas keeps
// every exp2 of the softmax above the P V wait in every ws kernel, where v18 waits before the row max (no overlap of
// a warpgroup's softmax with its own P V; NOTES, session 11), and spills nowhere (all six marks: 12-52 B in the
// head_dim 256 kernels). A clock read alone does not do it: its value unused, ptxas drops it.
// After the issue points, the same layout again holds the row tiles' boundaries (unmerged boundary only),
// [cta][warpgroup][tile of the CTA][event]: 0 the tile's last issue point done, 1 its last P V issued, 2 that
// P V done, 3 O stored (staged and its TMA store issued), 4 the next tile acquired (its Q landed), 5 the next
// tile's S_0 issued; the next tile's issue point 1 (event 0) closes it (S_0's wait and its softmax). With
// ATTN_WS_S0FIRST the store comes after S_0's issue: events 0 1 2 4 5 3 in time (scripts/ws_trace.py reads both).
constexpr int kTrCtas = 4, kTrWgs = 3, kTrIts = 256, kTrEv = 6;
constexpr int kTrBoundary = kTrCtas * kTrWgs * kTrIts * kTrEv;  // first mark of the boundary records
constexpr size_t kTraceBytes = sizeof(unsigned long long) * 2 * kTrBoundary;
constexpr int kTrPvWait = 4;  // the event before the P V wait: the one ATTN_WS_PVPIN compiles in
// Mark event E of the issue point whose first event is at tr + tb, where rec holds.
template <int E>
__device__ __forceinline__ void trace_mark(unsigned long long* tr, bool rec, int tb) {
    if constexpr (ATTN_WS_TRACE != 0 || (ATTN_WS_PVPIN != 0 && E == kTrPvWait)) {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%clock64;\n" : "=l"(t));
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "setp.ne.b32 p, %0, 0;\n"
            "@p st.global.u64 [%1], %2;\n"
            "}\n" ::"r"((int)rec),
            "l"(tr + (tb + E)), "l"(t));
    }
}

// A boundary mark: compiled in only with ATTN_WS_TRACE (not with ATTN_WS_PVPIN, whose mark is an issue point's).
template <int E>
__device__ __forceinline__ void trace_bmark(unsigned long long* tr, bool rec, int tb) {
    if constexpr (ATTN_WS_TRACE != 0) trace_mark<E>(tr, rec, tb);
}

// Registers per thread after setmaxnreg: NWG consumer warpgroups of 64 rows + 1 producer warpgroup share
// the 64K registers of an SM (2 consumers: 240 / 24, 3 consumers: 160 / 32).
template <int NWG>
struct WsRegs {
    static constexpr int consumer = NWG == 2 ? 240 : 160;
    static constexpr int producer = NWG == 2 ? 24 : 32;
};
// v9: tile boundary merged into the pipeline (S_0 of the next tile issued with the last PV of the current one).
template <int D>
__host__ __device__ constexpr bool ws_merge() {
    return D == 64 ? ATTN_WS_MERGE64 : (D == 128 ? ATTN_WS_MERGE128 : (D == 192 ? false : ATTN_WS_MERGE256));
}
// ATTN_WS_PUBTILE: after the barriers (and QDB's second set), 16-aligned, one 32-byte unit record per Q buffer
constexpr int kWsRecBytes = ATTN_WS_PUBTILE ? 8 + 2 * 32 : 0;
template <int D, int BN, int ST, int NWG, bool TO>
constexpr int ws_smem_one_q() {
    return 1024 + 64 * NWG * D * 2 * (TO ? 2 : 1) + 2 * ST * BN * D * 2 + 8 * (4 + 4 * ST) + kWsRecBytes;
}
// ATTN_WS_QDB: Q double-buffered (tile handover n in buffer n % 2, each with its full / empty barrier and tile id),
// on the d128 kernel with two consumers, where the second buffer fits next to O's staging (BN 128, 2 stages:
// 230512 B). One Q buffer is released when the tile's last S GEMM is done, and its next load (from HBM: the next
// row block) then sits between the last P V and the next S_0 (unmerged boundary), or before the merged boundary's
// issue point (ATTN_WS_MERGE128: S_0 of the next tile issued with the last P V, so its Q is needed even earlier).
template <int D, int BN, int ST, int NWG>
__host__ __device__ constexpr bool ws_qdb() {
    return ATTN_WS_QDB != 0 && D == 128 && NWG == 2 &&
           ws_smem_one_q<D, BN, ST, NWG, ATTN_WS_TMA_O != 0>() + 64 * NWG * D * 2 + 8 * 3 <= 227 * 1024;
}
template <int D, int BN, int ST, int NWG, bool TO = false>
constexpr int ws_smem_bytes() {
    return ws_smem_one_q<D, BN, ST, NWG, TO>() + (ws_qdb<D, BN, ST, NWG>() ? 64 * NWG * D * 2 + 8 * 3 : 0);
}
// ATTN_WS_TMA_O: the O staging area (BM x D, as Q) fits next to Q, K and V: d64 (3 consumers) 115800 B,
// d128 BN 128 197720 B and d128 BN 160 230488 B do; d128 BN 176 (246872), d192 BN 112 (271448) and d256 BN 80
// (296024) do not (227 KB per CTA).
template <int D, int BN, int ST, int NWG>
constexpr bool ws_tma_o() {
    return ATTN_WS_TMA_O != 0 && ws_smem_bytes<D, BN, ST, NWG, true>() <= 227 * 1024;
}
// ATTN_WS_TMA_O_QBUF: where the staging area does not fit and the boundary is not merged (d192, d256; a merged
// boundary reads the next tile's Q before the epilogue), O is staged in Q's buffer, which is dead once the tile's
// last S GEMM has completed; the next Q is loaded only after the TMA store has read it.
// ATTN_WS_TMA_O_VBUF: where the staging area does not fit, the boundary is not merged and the V ring holds the
// CTA's BM x D staging (64 NWG <= ST BN), O is staged over the V ring: each consumer waits until both consumers'
// last P V of the tile has completed (the ring holds no live V then), stages there and arrives on an O-empty
// barrier once its TMA store has read it; the producer waits on that barrier before the next tile's first V load.
// Q's buffer stays Q's: the next tile's Q loads as soon as the last S GEMM is done (QB waits for the store).
// ATTN_WS_D96N 3: the V of a padded head_dim (DR real columns of D) is read as 64-column atoms, so the V ring is not
// laid out as O's staging there (no VB).
template <int D, int DR>
constexpr bool ws_v64() {
    return ATTN_WS_D96N == 3 && DR < D;
}
template <int D, int BN, int ST, int NWG, int DR = D>
constexpr bool ws_tma_o_vbuf() {
    return ATTN_WS_TMA_O != 0 && (ATTN_WS_TMA_O_VBUF == 1 || ((ATTN_WS_TMA_O_VBUF == 2 || ATTN_WS_BN176_FROM > 0) && D == 128)) &&
           !ws_tma_o<D, BN, ST, NWG>() && !ws_merge<D>() && !ws_v64<D, DR>() &&
           64 * NWG <= ST * BN;
}
template <int D, int BN, int ST, int NWG, int DR = D>
constexpr bool ws_tma_o_qbuf() {
    return ATTN_WS_TMA_O != 0 && ATTN_WS_TMA_O_QBUF != 0 && !ws_tma_o<D, BN, ST, NWG>() && !ws_merge<D>() &&
           !ws_tma_o_vbuf<D, BN, ST, NWG, DR>();
}

// Persistent (v7): grid = min(tiles, SMs) CTAs, 384 threads; CTA c takes tiles c, c + grid, ... in the
// heaviest-first order (causal: the longest row blocks first). The producer loads the next tile's Q and
// first K/V tiles while the consumers finish the current tile (last PV, epilogue); Q has its own
// full/empty barrier pair, and the K/V rings run on across tiles.
template <bool B>
struct WsTag {  // a compile-time flag passed to a generic lambda
    static constexpr bool value = B;
};
struct WsTile {
    int b, h, m0, n_tiles;
};
// v11 (run 17's ncu: v10 read K/V from DRAM at 26% (d128 s8k) / 75% (d256 s1k) of its bandwidth, L2 hit
// 64% / 31%; FA3 3% / 21%): tiles go in sections of sec_heads (batch, head) pairs whose K and V fit in L2;
// inside a section the row blocks go heaviest first and, per row block, over the section's heads, so the
// CTAs running at one time share a few heads' K/V. sec_heads = batch * hq gives v10's order.
__device__ __forceinline__ WsTile ws_tile(const KParams& p, int t, int m_blocks, int BM, int BN) {
    const int bh_count = p.batch * p.hq;
    WsTile w;
    const int per_sec = p.sec_heads * m_blocks;
    const int sec = t / per_sec, r = t - sec * per_sec, h0 = sec * p.sec_heads;
    const int nh = min(p.sec_heads, bh_count - h0);
    const int mb = m_blocks - 1 - r / nh;
    const int bh = h0 + r % nh;
    w.b = bh / p.hq;
    w.h = bh % p.hq;
    w.m0 = mb * BM;
    int n_end = p.sk;
    if (p.causal) n_end = min(n_end, w.m0 + BM + p.sk - p.sq);
    w.n_tiles = n_end > 0 ? (n_end + BN - 1) / BN : 0;
    return w;
}
// ATTN_WS_SPLIT (KS): work unit t = tile * num_splits + split (a tile's splits adjacent, heaviest tiles first); split s
// of a tile with n key tiles takes its key tiles [s * n / S, (s + 1) * n / S) (possibly none: n < S, causal).
template <bool KS>
struct WsUnit : WsTile {};
template <>
struct WsUnit<true> : WsTile {
    int j0, split;  // first key tile of the unit (n_tiles: its key tiles), split index
};
template <bool KS>
__device__ __forceinline__ WsUnit<KS> ws_unit(const KParams& p, int t, int m_blocks, int BM, int BN) {
    WsUnit<KS> w;
    if constexpr (!KS) {
        static_cast<WsTile&>(w) = ws_tile(p, t, m_blocks, BM, BN);
    } else {
        const int S = p.num_splits, tile = t / S, s = t - tile * S;
        static_cast<WsTile&>(w) = ws_tile(p, tile, m_blocks, BM, BN);
        const int n = w.n_tiles;
        w.j0 = s * n / S;
        w.n_tiles = (s + 1) * n / S - w.j0;
        w.split = s;
    }
    return w;
}

// TO (only with ATTN_WS_TMA_O, where ws_tma_o holds and the host could build tmO): O leaves through shared memory;
// QB (with TO, where ws_tma_o_qbuf holds): the staging area is Q's buffer.
// VB (with TO, where ws_tma_o_vbuf holds): the staging area is the V ring (consumer c's 64 rows at sV + c * 64 * D * 2).
// DR (ATTN_WS_D96): the real head_dim when it is below D: the tensor maps have DR columns, so TMA fills Q/K/V's
// columns DR..D-1 with zeros (S and P V are exact; O's padded columns come out 0) and the O store skips them; the
// plain stores write only columns < DR.
// KS (ATTN_WS_SPLIT, without TO / QB): the CTA's work units are (tile, key split) pairs (ws_unit); each writes
// fp32 o (normalized by its own sum) and lse (natural log, -inf where the row saw no key of the split) to
// o_part / lse_part, the layout attn_combine reads.
template <int D, int BN, int ST, bool PP, int NWG, typename T, bool TO = false, bool QB = false, bool KS = false,
          int DR = D, bool VB = false>
__global__ void __launch_bounds__(128 * (NWG + 1), 1)
    attn_fwd_ws(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                const __grid_constant__ CUtensorMap tmV, const KParams p, int m_blocks
#if ATTN_WS_TMA_O
                ,
                const __grid_constant__ CUtensorMap tmO
#endif
    ) {
    // ATTN_WS_D96N: the MMAs skip the zero padding: S over KD = DR / 16 k-steps (1, 2, 3); O holds DR columns (NO
    // chunks of 8) and P V runs at n = DR (1, 3); V64 (3): V's stages hold DR / 32 atoms of BN rows x 64 B (64-byte
    // swizzle, from a map of 32-column boxes), so the n = DR B operand is made of whole atoms
    constexpr int DO = (ATTN_WS_D96N == 1 || ATTN_WS_D96N == 3) ? DR : D;
    constexpr bool V64 = ws_v64<D, DR>();
    constexpr int BM = 64 * NWG, NC = BN / 8, NO = DO / 8, DB = D / 64, KD = (ATTN_WS_D96N ? DR : D) / 16;
    // SMSPLIT 1: everywhere; 2: where ptxas keeps it without spills (not d256, not d128 with BN > 128)
    constexpr bool SPLIT = ATTN_WS_SMSPLIT == 1 || (ATTN_WS_SMSPLIT == 2 && D != 256 && !(D == 128 && BN > 128));
    constexpr bool MERGE = ws_merge<D>();
    constexpr int QN = ws_qdb<D, BN, ST, NWG>() ? 2 : 1;  // Q buffers (ATTN_WS_QDB)
    // ATTN_WS_S0FIRST: the next tile's S_0 before this tile's O store, on the d128 two-consumer kernel (ptxas, session
    // 18: the d256 and three-consumer d96 kernels spill 8-56 bytes with it); not where the store's staging is Q's
    // buffer or the V ring (the next tile's Q / first V wait for that store)
    constexpr bool S0F = ATTN_WS_S0FIRST != 0 && D == 128 && NWG == 2 && !MERGE && !QB && !VB;
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap();  // wgmma / setmaxnreg are sm_90a only; the host never launches this kernel elsewhere
#else
    constexpr uint32_t kQBytes = BM * D * 2, kKV = BN * D * 2, kOBytes = TO && !QB && !VB ? BM * D * 2 : 0;
    static_assert(BN % 16 == 0 && BN <= 256 && D % 64 == 0 && (NWG == 2 || NWG == 3), "tile shape");
    static_assert(!TO || ATTN_WS_TMA_O, "TO needs the tmO parameter");
    static_assert(!QB || (TO && !MERGE), "QB: O staged in Q's buffer, which a merged boundary still reads");
    static_assert(QN == 1 || !QB, "ATTN_WS_QDB: O is not staged in a Q buffer");
    static_assert(!VB || (TO && !QB && !MERGE && 64 * NWG <= ST * BN), "VB: O staged over the V ring, unmerged");
    static_assert(!KS || (!TO && !QB), "KS: partials leave through plain stores");
    static_assert(DR <= D && DR % 8 == 0 && (DR == D || !KS), "DR: a padded head_dim, not on the split path");
    static_assert(DR % 16 == 0 || !ATTN_WS_D96N, "ATTN_WS_D96N: the real head_dim in whole k-steps");
    static_assert(!V64 || (DR % 32 == 0 && !VB), "V64: whole 32-column atoms; the V ring is not O's staging");
    static_assert(NWG <= kTrWgs, "ATTN_WS_TRACE's layout has room for kTrWgs consumer warpgroups");
    extern __shared__ uint8_t smem_raw[];
    const uint32_t sQ = (smem_u32(smem_raw) + 1023u) & ~1023u;
    // TO: the O staging area (consumer c's 64 rows at sO + c * 64 * D * 2, D / 64 column blocks of 64 rows x
    // 128 B each, 1024-aligned like Q/K/V) lies between V and the barriers; without TO it is empty.
    const uint32_t sK = sQ + QN * kQBytes, sV = sK + ST * kKV, sO = sV + ST * kKV, sBar = sO + kOBytes;
    const uint32_t bQ = sBar, bQEmpty = sBar + 8u * (1u + 4 * ST), sTile = sBar + 8u * (2u + 4 * ST);
    const uint32_t bOEmpty = sBar + 8u * (3u + 4 * ST);  // VB: the consumers' O stores have read the V ring
    // tile handover n (producer and consumers count them alike: q_it): its Q buffer, Q full / empty barriers, tile
    // id slot and barrier phase; with one buffer, always the first (QDB: buffer 1's three slots after bOEmpty)
    auto q_odd = [](int n) { return QN == 2 && (n & 1) != 0; };
    auto q_buf = [&](int n) { return sQ + (q_odd(n) ? kQBytes : 0u); };
    auto q_full = [&](int n) { return q_odd(n) ? sBar + 8u * (4u + 4 * ST) : bQ; };
    auto q_empty = [&](int n) { return q_odd(n) ? sBar + 8u * (5u + 4 * ST) : bQEmpty; };
    auto q_tile = [&](int n) { return q_odd(n) ? sBar + 8u * (6u + 4 * ST) : sTile; };
    auto q_phase = [](int n) { return (uint32_t)((n / QN) & 1); };
    // ATTN_WS_PUBTILE: handover n's unit record {t, b, h, m0}, {n_tiles, j0, split, 0} (the end: t >= total only)
    const uint32_t sRec = (sBar + 8u * (4u + 4 * ST + (QN == 2 ? 3u : 0u)) + 15u) & ~15u;
    auto q_rec = [&](int n) { return sRec + (q_odd(n) ? 32u : 0u); };
#define WS_FULL_K(s) (sBar + 8u * (1u + (s)))
#define WS_FULL_V(s) (sBar + 8u * (1u + ST + (s)))
#define WS_EMPTY_K(s) (sBar + 8u * (1u + 2 * ST + (s)))
#define WS_EMPTY_V(s) (sBar + 8u * (1u + 3 * ST + (s)))

    const int tid = threadIdx.x, wg = tid >> 7;
    const int total = KS ? m_blocks * p.batch * p.hq * p.num_splits : m_blocks * p.batch * p.hq;

    if (tid == 0) {
        mbar_init(bQ, 1);
        mbar_init(bQEmpty, NWG);
        mbar_init(bOEmpty, NWG);
        if (QN == 2) {
            mbar_init(q_full(1), 1);
            mbar_init(q_empty(1), NWG);
        }
#pragma unroll
        for (int s = 0; s < ST; ++s) {
            mbar_init(WS_FULL_K(s), 1);
            mbar_init(WS_FULL_V(s), 1);
            mbar_init(WS_EMPTY_K(s), NWG);
            mbar_init(WS_EMPTY_V(s), NWG);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {  // ---------------- producer ----------------
        // v10: the producer takes the tiles (static: c, c + grid, ...; dynamic: an atomic counter) and hands
        // each tile id to the consumers in shared memory, published by the Q barrier's phase: with Q's TMA
        // for a tile with keys, by a plain arrival for a tile without keys and for the end (id >= total).
        regs_dec<WsRegs<NWG>::producer>();
        if (tid == 0) {
            int q_it = 0, kv = 0;  // tiles handed over so far, K/V tiles so far (ring position)
            int o_it = 0;          // VB: tiles with keys so far (each one O store over the V ring)
            int t = blockIdx.x;
            while (true) {
                if constexpr (QB) {  // K_0 of the next tile ahead of the Q wait: Q's buffer is free only after the epilogue
                    if (t < total) {
                        const WsTile w = ws_tile(p, t, m_blocks, BM, BN);
                        if (w.n_tiles > 0) {
                            const int hk = w.h / p.group, s = kv % ST;
                            mbar_wait(WS_EMPTY_K(s), ((kv / ST) & 1) ^ 1);
                            mbar_expect_tx(WS_FULL_K(s), kKV);
#pragma unroll
                            for (int c = 0; c < DB; ++c)
                                tma_load_4d(sK + s * kKV + c * (BN * 128), &tmK, WS_FULL_K(s), c * 64, 0, hk, w.b);
                        }
                    }
                }
                // the consumers are done with this buffer's previous tile (QDB: the one before the previous) and its id
                mbar_wait(q_empty(q_it), q_phase(q_it) ^ 1);
                WsUnit<KS> w;  // (PUBTILE: decoded after the wait, which the producer's 24 registers cannot span with it)
                if constexpr (ATTN_WS_PUBTILE != 0) {  // the decoded unit: the consumers skip ws_unit's divisions
                    if (t < total) {
                        w = ws_unit<KS>(p, t, m_blocks, BM, BN);
                        uint32_t j0 = 0, split = 0;
                        if constexpr (KS) {
                            j0 = (uint32_t)w.j0;
                            split = (uint32_t)w.split;
                        }
                        st_shared_v4(q_rec(q_it), (uint32_t)t, (uint32_t)w.b, (uint32_t)w.h, (uint32_t)w.m0);
                        st_shared_v4(q_rec(q_it) + 16u, (uint32_t)w.n_tiles, j0, split, 0u);
                    } else {
                        st_shared_u32(q_rec(q_it), (uint32_t)total);
                    }
                } else {
                    st_shared_u32(q_tile(q_it), (uint32_t)min(t, total));
                }
                if (t >= total) {
                    mbar_arrive(q_full(q_it));
                    break;
                }
                if constexpr (ATTN_WS_PUBTILE == 0) w = ws_unit<KS>(p, t, m_blocks, BM, BN);
                int jk = 0;  // first key tile of the unit
                if constexpr (KS) jk = w.j0;
                if (w.n_tiles == 0) {
                    mbar_arrive(q_full(q_it));
                } else {
                    const int hk = w.h / p.group;
                    const uint32_t bq = q_full(q_it), sq = q_buf(q_it);
                    mbar_expect_tx(bq, kQBytes);
#pragma unroll
                    for (int c = 0; c < DB; ++c) tma_load_4d(sq + c * (BM * 128), &tmQ, bq, c * 64, w.m0, w.h, w.b);
                    for (int j = 0; j <= w.n_tiles; ++j) {
                        if (j < w.n_tiles && (!QB || j > 0)) {  // K_j (QB: K_0 went ahead)
                            const int g = kv + j, s = g % ST;
                            mbar_wait(WS_EMPTY_K(s), ((g / ST) & 1) ^ 1);
                            mbar_expect_tx(WS_FULL_K(s), kKV);
#pragma unroll
                            for (int c = 0; c < DB; ++c)
                                tma_load_4d(sK + s * kKV + c * (BN * 128), &tmK, WS_FULL_K(s), c * 64, (jk + j) * BN, hk, w.b);
                        }
                        if (j > 0) {  // V_{j-1}: one tile behind K, the order the consumers read them in
                            // VB: the previous tile's O, staged over the V ring, has been read by its TMA stores
                            if (VB && j == 1 && o_it > 0) mbar_wait(bOEmpty, (o_it - 1) & 1);
                            const int g = kv + j - 1, s = g % ST;
                            mbar_wait(WS_EMPTY_V(s), ((g / ST) & 1) ^ 1);
                            if constexpr (V64) {  // DR / 32 boxes of 32 columns, each an atom column of BN x 64 B
                                mbar_expect_tx(WS_FULL_V(s), BN * DR * 2);
#pragma unroll
                                for (int c = 0; c < DR / 32; ++c)
                                    tma_load_4d(sV + s * kKV + c * (BN * 64), &tmV, WS_FULL_V(s), c * 32,
                                                (jk + j - 1) * BN, hk, w.b);
                            } else {
                                mbar_expect_tx(WS_FULL_V(s), kKV);
#pragma unroll
                                for (int c = 0; c < DB; ++c)
                                    tma_load_4d(sV + s * kKV + c * (BN * 128), &tmV, WS_FULL_V(s), c * 64,
                                                (jk + j - 1) * BN, hk, w.b);
                            }
                        }
                    }
                    kv += w.n_tiles;
                    ++o_it;
                }
                ++q_it;
                t = p.tile_counter != nullptr ? (int)gridDim.x + atomicAdd(p.tile_counter, 1) : t + (int)gridDim.x;
            }
        }
        return;
    }

    // ---------------- consumers ----------------
    // v9: one software pipeline over all tiles of the CTA. Inside a tile, issue point j (1 <= j < n) issues
    // S_j and P_{j-1} V_{j-1}; at a tile boundary the issue point issues S_0 of the next tile together with
    // the last P V of the current one, so the next tile's first softmax overlaps that PV, and the epilogue
    // runs while the other consumer's GEMMs keep the tensor cores busy.
    regs_inc<WsRegs<NWG>::consumer>();
#if ATTN_WS_UNIF
    const int cw = __shfl_sync(0xffffffffu, wg - 1, 0), warp = (tid >> 5) & 3, lane = tid & 31;  // cw warp-uniform
#else
    const int cw = wg - 1, warp = (tid >> 5) & 3, lane = tid & 31;
#endif
    const bool leader = (tid & 127) == 0;
    const float sl2 = p.scale_log2;
    const int off = p.sk - p.sq;  // bottom-right causal: row i sees keys j <= i + off
    const int t2 = 2 * (lane & 3);
    const int rlane = 64 * cw + 16 * warp + (lane >> 2);  // this thread's rows in a tile: rlane and rlane + 8
    // Ping-pong: consumer c waits on named barrier 1 + c before issuing its GEMMs and then lets consumer
    // c + 1 (mod NWG) go; the last consumer's first arrival lets consumer 0 start.
    // ATTN_WS_PPFIRST: consumer F takes the first turn (the one before it arrives once ahead; default 0).
    constexpr int kPpFirst = ATTN_WS_PPFIRST % NWG;
    const int me = 1 + cw, other = 1 + (cw + 1) % NWG;
    if (PP && cw == (kPpFirst + NWG - 1) % NWG) named_arrive(1 + kPpFirst, 256);

    // lse of one row of tile w from its running max m and sum l (+inf where no key was seen)
    auto store_lse = [&](const WsUnit<KS>& w, int row, float m, float l) {
        p.lse[((long long)w.b * p.hq + w.h) * p.sq + row] = l > 0.f ? (m * sl2 + log2f(l)) * kLn2 : INFINITY;
    };
    // o / lse of this thread's two rows of tile w (o = 0 and lse = +inf where no key was seen).
    auto store_rows = [&](const WsUnit<KS>& w, const float* o, const float (&m)[2], const float (&l4)[2]) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const float l = quad_sum(l4[i]);
            const int row = w.m0 + rlane + 8 * i;
            if (row >= p.sq) continue;
            const float inv = l > 0.f ? 1.f / l : 0.f;
            T* og = static_cast<T*>(p.o) + w.b * p.o_bs + (long long)row * p.o_rs + w.h * p.o_hs;
#pragma unroll
            for (int c = 0; c < NO; ++c)
                if (8 * c < DR)
                    *reinterpret_cast<uint32_t*>(og + 8 * c + t2) =
                        Ops<T>::pack(o[4 * c + 2 * i] * inv, o[4 * c + 2 * i + 1] * inv);
            if ((lane & 3) == 0) store_lse(w, row, m[i], l);
        }
    };
    // ATTN_WS_TMA_O: the same values (o * (1 / l) packed to T) go to this consumer's staging area in the
    // 128-byte-swizzle layout of the O map's 64 x 64 boxes (row r's 16-byte chunk k at chunk k ^ (r % 8); r % 8
    // is lane / 4 for both of a thread's rows), then one thread stores the D / 64 boxes with TMA, which skips
    // the rows >= seqlen_q. Named barrier NWG + 1 + cw (ids 1..NWG are the ping-pong's) orders, per consumer:
    // the previous store's reads before the writes, the writes (made visible to the async proxy) before the
    // store. lse stays a plain store.
    // QB (ATTN_WS_TMA_O_QBUF): the staging area is this consumer's 64 rows of Q's buffer (column block c at
    // sQ + c * BM * 128 + cw * 64 * 128: the same 64 x 128 B swizzled blocks, 1024-aligned), which only this
    // consumer's S GEMMs read; Q's empty barrier is arrived on here, once the store has read the staging, not
    // after the tile's last S GEMM (the producer then loads the next tile's Q over it).
    auto store_o = [&](const WsUnit<KS>& w, const float* o, const float (&m)[2], const float (&l4)[2]) {
        if constexpr (KS) {  // fp32 partials of split w.split: o * (1 / l) and lse (-inf where no key was seen)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const float l = quad_sum(l4[i]);
                const int row = w.m0 + rlane + 8 * i;
                if (row >= p.sq) continue;
                const float inv = l > 0.f ? 1.f / l : 0.f;
                const long long ro = (((long long)w.split * p.batch + w.b) * p.hq + w.h) * p.sq + row;
                float* dst = p.o_part + ro * D + t2;
#pragma unroll
                for (int c = 0; c < NO; ++c)
                    *reinterpret_cast<float2*>(dst + 8 * c) = make_float2(o[4 * c + 2 * i] * inv, o[4 * c + 2 * i + 1] * inv);
                if ((lane & 3) == 0) p.lse_part[ro] = l > 0.f ? (m[i] * sl2 + log2f(l)) * kLn2 : -INFINITY;
            }
            return;
        }
#if ATTN_WS_TMA_O
        if constexpr (TO) {
            const int bar_o = NWG + 1 + cw;
            constexpr uint32_t cstride = QB ? BM * 128 : 64 * 128;  // bytes between the staging's column blocks
            const uint32_t so = QB ? sQ + cw * (64 * 128) : (VB ? sV : sO) + cw * (64 * D * 2);
            // the previous tile's store has read the staging area (QB / VB: waited for before the empty arrival); the
            // sync also orders every warp's completed GEMMs (QB: the S GEMMs reading Q) before the writes
            if (!QB && !VB && leader) bulk_wait_read0();
            // VB: the caller's leader has seen both consumers' last P V of the tile complete (V's empty barrier of
            // that tile), so no GEMM reads the ring; the producer loads no V until this tile's stores have read it
            named_sync(bar_o, 128);
            const int xr = lane >> 2;
            const uint32_t rb = so + (16 * warp + xr) * 128 + (lane & 3) * 4;  // row 16 * warp + xr, bytes 4 * (lane & 3)
            float l[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {  // row + 8 * i: 1024 B further, same xr
                l[i] = quad_sum(l4[i]);
                const float inv = l[i] > 0.f ? 1.f / l[i] : 0.f;
#pragma unroll
                for (int c = 0; c < NO; ++c)  // columns 8c + t2, t2 + 1: column block c / 8, 16-byte chunk c % 8
                    st_shared_u32(rb + i * 1024 + (c >> 3) * cstride + (((c & 7) ^ xr) << 4),
                                  Ops<T>::pack(o[4 * c + 2 * i] * inv, o[4 * c + 2 * i + 1] * inv));
            }
            fence_proxy_async();  // this thread's generic-proxy writes, visible to the TMA store
            named_sync(bar_o, 128);
            if (leader && w.m0 + 64 * cw < p.sq) {
#pragma unroll
                for (int c = 0; c < DB; ++c) tma_store_4d(&tmO, so + c * cstride, c * 64, w.m0 + 64 * cw, w.h, w.b);
                bulk_commit();
            }
            if (QB && leader) {  // Q's buffer (this consumer's half) free for the next tile's Q
                bulk_wait_read0();
                mbar_arrive(bQEmpty);
            }
            if (VB && leader) {  // this consumer's part of the V ring free for the next tile's V
                bulk_wait_read0();
                mbar_arrive(bOEmpty);
            }
#pragma unroll
            for (int i = 0; i < 2; ++i) {  // lse after the store is issued (off the fence's path)
                const int row = w.m0 + rlane + 8 * i;
                if ((lane & 3) == 0 && row < p.sq) store_lse(w, row, m[i], l[i]);
            }
            return;
        }
#endif
        store_rows(w, o, m, l4);
    };
    // The next tile with keys from the producer (its id in shared memory, published by the Q barrier's
    // phase q_it); tiles without keys (causal, seqlen_q > seqlen_k) are written on the way (o = 0,
    // lse = +inf). Returns total at the end.
    int q_it = 0;  // tile ids taken so far
    auto acquire = [&](WsUnit<KS>& w) {
        while (true) {
            mbar_wait(q_full(q_it), q_phase(q_it));
#if ATTN_WS_PUBTILE
            const uint4 r0 = ld_shared_v4(q_rec(q_it));
            const int t = ATTN_WS_UNIF ? __shfl_sync(0xffffffffu, (int)r0.x, 0) : (int)r0.x;
            if (t >= total) return total;
            const uint4 r1 = ld_shared_v4(q_rec(q_it) + 16u);
            w.b = (int)r0.y;
            w.h = (int)r0.z;
            w.m0 = (int)r0.w;
            w.n_tiles = (int)r1.x;
            if constexpr (KS) {
                w.j0 = (int)r1.y;
                w.split = (int)r1.z;
            }
#else
#if ATTN_WS_UNIF
            const int t = __shfl_sync(0xffffffffu, (int)ld_shared_u32(q_tile(q_it)), 0);  // warp-uniform to the compiler
#else
            const int t = (int)ld_shared_u32(q_tile(q_it));
#endif
            if (t >= total) return total;
            w = ws_unit<KS>(p, t, m_blocks, BM, BN);
#endif
            if (w.n_tiles > 0) return t;
#pragma unroll
            for (int i = 0; i < 2; ++i) {  // no key for any row of this tile: o = 0, lse = +inf
                const int row = w.m0 + rlane + 8 * i;
                if (row >= p.sq) continue;
                if constexpr (KS) {  // no key in this split: partial o = 0, lse = -inf (attn_combine gives it weight 0)
                    const long long ro = (((long long)w.split * p.batch + w.b) * p.hq + w.h) * p.sq + row;
                    float* dst = p.o_part + ro * D + t2;
#pragma unroll 1
                    for (int c = 0; c < NO; ++c) *reinterpret_cast<float2*>(dst + 8 * c) = make_float2(0.f, 0.f);
                    if ((lane & 3) == 0) p.lse_part[ro] = -INFINITY;
                    continue;
                }
                T* og = static_cast<T*>(p.o) + w.b * p.o_bs + (long long)row * p.o_rs + w.h * p.o_hs;
#pragma unroll 1
                for (int c = 0; c < DR / 8; ++c) *reinterpret_cast<uint32_t*>(og + 8 * c + t2) = 0u;
                if ((lane & 3) == 0) p.lse[((long long)w.b * p.hq + w.h) * p.sq + row] = INFINITY;
            }
            if (leader) mbar_arrive(q_empty(q_it));
            ++q_it;
        }
    };

    WsUnit<KS> w;
    int t = acquire(w);
    if (t < total) {
        int kv = 0;  // K/V tiles consumed before the current tile (ring position)
        int mask_from = 0;     // key index from which this warpgroup's rows of tile w need a mask
        uint32_t qoff = 0;     // tile w's Q buffer, in bytes from sQ (ATTN_WS_QDB)
        auto set_tile = [&]() {
            mask_from = p.causal ? min(p.sk, w.m0 + 64 * cw + off + 1) : p.sk;
            qoff = q_buf(q_it) - sQ;
        };
        set_tile();
        float o[NO * 4];
#pragma unroll
        for (int i = 0; i < NO * 4; ++i) o[i] = 0.f;
        float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.f, 0.f};
        float s[NC * 4];
        uint32_t pa[BN / 16][4];
        float alpha_p[2] = {1.f, 1.f};  // RMID: the rescale the next P V needs, applied at its issue point
#if ATTN_WS_DESC_INC
        // Descriptors built once and advanced by constants: the 14-bit start-address field holds addr >> 4 and
        // every shared-memory address of the CTA is below 256 KB, so desc(addr + off) == desc(addr) + off / 16.
        const uint64_t dq0 = wg_desc(sQ + cw * (64 * 128), 16, 1024), dk0 = wg_desc(sK, 16, 1024);
        // V64: 64-byte swizzle (layout type 2), atoms BN * 64 B apart along N, 8 keys x 64 B along K
        const uint64_t dv0 = V64 ? wg_desc64(sV, BN * 64, 512) : wg_desc(sV, BN * 128, 1024);
#if ATTN_WS_DESC32
        // the same sums on the low 32 bits only (no carry leaves the start-address field, as above): the high word
        // (stride byte offset, swizzle) stays a compile-time constant, one 32-bit add per descriptor instead of a
        // 64-bit add and two register moves (run 43's SASS: 12 IADD3 + 12 IMAD.X + 27 MOV + 32 R2UR per d256 tile)
        auto dadd = [](uint64_t d, uint32_t off) -> uint64_t {
            return (d & 0xFFFFFFFF00000000ull) | (uint64_t)((uint32_t)d + off);
        };
#else
        auto dadd = [](uint64_t d, uint32_t off) -> uint64_t { return d + off; };
#endif
        auto issue_s = [&](int stage) {
            wg_fence();
            const uint64_t dk = dadd(dk0, (uint32_t)(stage * (kKV >> 4)));
            // QDB: tile w's Q buffer, one add per issue (qoff is a multiple of 1024: its >> 4 first, so the k-steps'
            // offsets stay constants; (qoff + c) >> 4 cost a shift and an add per k-step in run 65's qdb)
            const uint64_t dq = QN == 2 ? dadd(dq0, qoff >> 4) : dq0;
#pragma unroll
            for (int kk = 0; kk < KD; ++kk)
                WgSS<T, BN>::run(s, dadd(dq, ((kk >> 2) * (BM * 128) + (kk & 3) * 32) >> 4),
                                 dadd(dk, ((kk >> 2) * (BN * 128) + (kk & 3) * 32) >> 4), kk > 0);
            wg_commit();
        };
        auto issue_pv = [&](int stage) {
            wg_fence();
            const uint64_t dv = dadd(dv0, (uint32_t)(stage * (kKV >> 4)));
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk)
                WgRS<T, DO>::run(o, pa[kk], dadd(dv, kk * ((V64 ? 16 * 64 : 16 * 128) >> 4)));
            wg_commit();
        };
#define WS_KBUF(st) (st)
#define WS_VBUF(st) (st)
#else
        auto issue_s = [&](uint32_t kbuf) {
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < KD; ++kk) {
                const uint32_t qa = sQ + qoff + (kk >> 2) * (BM * 128) + cw * (64 * 128) + (kk & 3) * 32;
                const uint32_t kb = kbuf + (kk >> 2) * (BN * 128) + (kk & 3) * 32;
                WgSS<T, BN>::run(s, wg_desc(qa, 16, 1024), wg_desc(kb, 16, 1024), kk > 0);
            }
            wg_commit();
        };
        auto issue_pv = [&](uint32_t vbuf) {
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk)
                WgRS<T, DO>::run(o, pa[kk], V64 ? wg_desc64(vbuf + kk * (16 * 64), BN * 64, 512)
                                                : wg_desc(vbuf + kk * (16 * 128), BN * 128, 1024));
            wg_commit();
        };
#define WS_KBUF(st) (sK + (st) * kKV)
#define WS_VBUF(st) (sV + (st) * kKV)
#endif
        // Masks tile j of s, updates the running max / sum, leaves exp2 values in s; alpha per row.
        // v12 candidate (ATTN_WS_SMSPLIT): in the SASS of v11 ptxas puts the wait for P_{j-1} V_{j-1} at the
        // top of the basic block that follows the optional mask (the block holding max, exp2 and the sums), so
        // the whole softmax ran after the PV: no intra-warpgroup overlap (FA3's loop, without a mask branch,
        // has its max and a third of its exp2 before that wait). With SMSPLIT the complete softmax sits in two
        // branch arms (masked, unmasked) that join before the wait.
        // hook(alpha) runs once alpha is known, before the exp2 (ATTN_WS_RFOLD: the P V wait and the O rescale).
        auto softmax_core = [&](int j, float (&alpha)[2], auto masked, auto&& hook) {
            const int kbase = j * BN;
            if (decltype(masked)::value && (SPLIT || ATTN_WS_PEEL || kbase + BN > mask_from)) {  // PEEL: the tag decides
                const int r0 = w.m0 + rlane;
#pragma unroll
                for (int c = 0; c < NC; ++c)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int row = r0 + ((e >> 1) << 3);
                        const int col = kbase + 8 * c + t2 + (e & 1);
                        const int lim = p.causal ? min(p.sk, row + off + 1) : p.sk;
                        if (col >= lim) s[4 * c + e] = -INFINITY;
                    }
            }
            float mx[2] = {m_r[0], m_r[1]};
            if (ATTN_WS_ILP) {  // two chains per row: half the dependent FMNMX latency
                float mb[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int c = 0; c < NC; c += 2) {
                    mx[0] = fmaxf(mx[0], fmaxf(s[4 * c], s[4 * c + 1]));
                    mx[1] = fmaxf(mx[1], fmaxf(s[4 * c + 2], s[4 * c + 3]));
                    if (c + 1 < NC) {
                        mb[0] = fmaxf(mb[0], fmaxf(s[4 * c + 4], s[4 * c + 5]));
                        mb[1] = fmaxf(mb[1], fmaxf(s[4 * c + 6], s[4 * c + 7]));
                    }
                }
                mx[0] = fmaxf(mx[0], mb[0]);
                mx[1] = fmaxf(mx[1], mb[1]);
            } else {
#pragma unroll
                for (int c = 0; c < NC; ++c) {
                    mx[0] = fmaxf(mx[0], fmaxf(s[4 * c], s[4 * c + 1]));
                    mx[1] = fmaxf(mx[1], fmaxf(s[4 * c + 2], s[4 * c + 3]));
                }
            }
            float ms[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                mx[i] = quad_max(mx[i]);
                // ATTN_WS_THRESH: mx >= m_r; a growth of at most THRESH (log2 units) keeps the reference, so
                // alpha stays 1 and O is not rescaled; o, l and lse stay exact (all relative to the same m_r).
                // -inf - -inf is NaN (not >): an empty row keeps -inf; a first finite max always replaces -inf.
                if (ATTN_WS_THRESH > 0 && !((mx[i] - m_r[i]) * sl2 > (float)ATTN_WS_THRESH)) mx[i] = m_r[i];
                ms[i] = mx[i] == -INFINITY ? 0.f : mx[i] * sl2;
                alpha[i] = mx[i] == m_r[i] ? 1.f : fast_exp2(m_r[i] * sl2 - ms[i]);
                m_r[i] = mx[i];
            }
            hook(alpha);
            float sum[2][2] = {{0.f, 0.f}, {0.f, 0.f}};  // [row][chain]; one chain unless ATTN_WS_ILP
#pragma unroll
            for (int c = 0; c < NC; ++c) {
                const int k = ATTN_WS_ILP ? (c & 1) : 0;
                const bool emu = ATTN_WS_EMU > 0 && c % (ATTN_WS_EMU > 0 ? ATTN_WS_EMU : 1) == ATTN_WS_EMU - 1;  // compile time (unrolled)
                auto ex2 = [emu](float x) { return emu ? emu_exp2(x) : fast_exp2(x); };
                s[4 * c] = ex2(s[4 * c] * sl2 - ms[0]);
                s[4 * c + 1] = ex2(s[4 * c + 1] * sl2 - ms[0]);
                s[4 * c + 2] = ex2(s[4 * c + 2] * sl2 - ms[1]);
                s[4 * c + 3] = ex2(s[4 * c + 3] * sl2 - ms[1]);
                sum[0][k] += s[4 * c] + s[4 * c + 1];
                sum[1][k] += s[4 * c + 2] + s[4 * c + 3];
            }
            l_r[0] = l_r[0] * alpha[0] + (sum[0][0] + sum[0][1]);
            l_r[1] = l_r[1] * alpha[1] + (sum[1][0] + sum[1][1]);
        };
        auto no_hook = [](const float (&)[2]) {};
        // Masks tile j of s (where it reaches past the last key or the causal limit), updates the running
        // max / sum, leaves exp2 values in s; alpha per row.
        auto softmax_h = [&](int j, float (&alpha)[2], auto&& hook) {
            if constexpr (KS) j += w.j0;  // global key tile (masks)
            if (!SPLIT) softmax_core(j, alpha, WsTag<true>{}, hook);
            else if (j * BN + BN > mask_from) softmax_core(j, alpha, WsTag<true>{}, hook);
            else softmax_core(j, alpha, WsTag<false>{}, hook);
        };
        auto softmax = [&](int j, float (&alpha)[2]) { softmax_h(j, alpha, no_hook); };
        auto pack_p = [&]() {
#pragma unroll
            for (int c = 0; c < NC; ++c) {  // A fragment: a0/a2 row g, a1/a3 row g + 8
                pa[c >> 1][(c & 1) * 2 + 0] = Ops<T>::pack(s[4 * c], s[4 * c + 1]);
                pa[c >> 1][(c & 1) * 2 + 1] = Ops<T>::pack(s[4 * c + 2], s[4 * c + 3]);
            }
        };
        auto rescale_o = [&](const float (&alpha)[2]) {
            if (ATTN_WS_LAZY && !__any_sync(0xffffffffu, (alpha[0] != 1.f) | (alpha[1] != 1.f))) return;
#pragma unroll
            for (int c = 0; c < NO; ++c) {
                o[4 * c] *= alpha[0];
                o[4 * c + 1] *= alpha[0];
                o[4 * c + 2] *= alpha[1];
                o[4 * c + 3] *= alpha[1];
            }
        };

        // The consumer leader's arrivals: K's empty barrier of a stage, with Q's empty barrier where `last` (the
        // producer may load the next tile's Q; QB arrives on it after the O store instead), and V's empty barrier.
        // ATTN_WS_PRED: predicated instructions, no branch (a divergent region in the loop makes ptxas put the P V
        // wait right after it).
        auto leader_arrive_k = [&](uint32_t bar_k, bool last) {
#if ATTN_WS_PRED
            mbar_arrive_if(bar_k, leader);
            if (!QB) mbar_arrive_if(q_empty(q_it), leader && last);
#else
            if (leader) {
                mbar_arrive(bar_k);
                if (!QB && last) mbar_arrive(q_empty(q_it));
            }
#endif
        };
        auto leader_arrive_v = [&](uint32_t bar_v) {
#if ATTN_WS_PRED
            mbar_arrive_if(bar_v, leader);
#else
            if (leader) mbar_arrive(bar_v);
#endif
        };

        // issue point 0 of a tile started on its own: S_0 only (trace: boundary mark 5 at tbb where brec holds),
        // issued, then waited for and its softmax (S0FIRST: the O store of the previous tile in between)
        auto first_s_issue = [&](bool brec, int tbb) {
            mbar_wait(WS_FULL_K(kv % ST), (kv / ST) & 1);
            if (PP) named_sync(me, 256);
            issue_s(WS_KBUF(kv % ST));
            if (PP) named_arrive(other, 256);
            trace_bmark<5>(p.trace, brec, tbb);
        };
        auto first_s_finish = [&]() {
            wg_wait<0>();
            reg_fence(s);
            leader_arrive_k(WS_EMPTY_K(kv % ST), w.n_tiles == 1);
            softmax(0, alpha_p);
            pack_p();
        };
        auto first_s = [&](bool brec, int tbb) {
            first_s_issue(brec, tbb);
            first_s_finish();
        };
        first_s(false, 0);
        int j = 1;
        // issue point j of tile w: S_j and P_{j-1} V_{j-1}. ATTN_WS_PEEL: the mask compiled in or out by the tag
        // (the caller knows which key tiles need it), so that the steady loop has no branch between the S wait and
        // the P V wait; else softmax() decides per tile.
        auto issue_point = [&](int j, auto masked) {
            const int gk = kv + j, gv = gk - 1, ks = gk % ST, vs = gv % ST;
            const bool trec = (ATTN_WS_TRACE || ATTN_WS_PVPIN) && p.trace != nullptr && leader && blockIdx.x < kTrCtas && gk < kTrIts;
            const int tb = ((int)(blockIdx.x % kTrCtas) * kTrWgs + cw) * kTrIts * kTrEv + (gk % kTrIts) * kTrEv;
            trace_mark<0>(p.trace, trec, tb);
            mbar_wait(WS_FULL_K(ks), (gk / ST) & 1);
            if (PP) named_sync(me, 256);
            trace_mark<1>(p.trace, trec, tb);
            issue_s(WS_KBUF(ks));
            if (ATTN_WS_RMID) rescale_o(alpha_p);  // o is not in flight: P_{j-2} V_{j-2} was waited for
            mbar_wait(WS_FULL_V(vs), (gv / ST) & 1);
            issue_pv(WS_VBUF(vs));
            if (PP) named_arrive(other, 256);
            trace_mark<2>(p.trace, trec, tb);
            wg_wait<1>();  // S_j done; P_{j-1} V_{j-1} may still run
            trace_mark<3>(p.trace, trec, tb);
            reg_fence(s);
            leader_arrive_k(WS_EMPTY_K(ks), j == w.n_tiles - 1);
            float alpha[2];
            // the P V wait (P_{j-1} V_{j-1} done: o and pa free), the arrival on V's empty barrier
            auto pv_done = [&]() {
                trace_mark<kTrPvWait>(p.trace, trec, tb);
                wg_wait<0>();
                trace_mark<5>(p.trace, trec, tb);
                reg_fence(o);
                reg_fence_u(pa);
                leader_arrive_v(WS_EMPTY_V(vs));
            };
            constexpr bool fold = ATTN_WS_RFOLD && !ATTN_WS_RMID;
            if (fold && ATTN_WS_RFOLD == 1) pv_done();
            auto hook = [&](const float (&a)[2]) {
                if constexpr (fold) {
                    if (ATTN_WS_RFOLD != 1) pv_done();
                    rescale_o(a);
                }
            };
            if constexpr (ATTN_WS_PEEL) {
                int jg = j;  // global key tile (masks)
                if constexpr (KS) jg += w.j0;
                softmax_core(jg, alpha, masked, hook);
            } else {
                softmax_h(j, alpha, hook);
            }
            if (!fold) {
                pv_done();
                if (ATTN_WS_RMID) {
                    alpha_p[0] = alpha[0];
                    alpha_p[1] = alpha[1];
                } else {
                    rescale_o(alpha);
                }
            }
            pack_p();
        };
        while (true) {
            if (j < w.n_tiles) {
#if ATTN_WS_PEEL
                // key tiles (of the unit) below j_mask need no mask for this consumer's rows: softmax_core masks
                // tile jj (global) where jj * BN + BN > mask_from
                int j_mask = min(w.n_tiles, mask_from / BN);
                if constexpr (KS) j_mask = min(w.n_tiles, mask_from / BN - w.j0);
                for (; j < j_mask; ++j) issue_point(j, WsTag<false>{});
                for (; j < w.n_tiles; ++j) issue_point(j, WsTag<true>{});
#else
                issue_point(j, WsTag<true>{});
                ++j;
                continue;
#endif
            }
            // tile w is done but for its last P V
            const int gv = kv + w.n_tiles - 1, vs = gv % ST;
            const bool brec = ATTN_WS_TRACE && p.trace != nullptr && leader && blockIdx.x < kTrCtas && q_it < kTrIts;
            const int tbb = kTrBoundary + ((int)(blockIdx.x % kTrCtas) * kTrWgs + cw) * kTrIts * kTrEv + (q_it % kTrIts) * kTrEv;
            trace_bmark<0>(p.trace, brec, tbb);
            kv += w.n_tiles;
            ++q_it;
            WsUnit<KS> wn;
            int tn = MERGE ? acquire(wn) : total;  // unmerged: the last PV goes first, then the next tile
            if (tn >= total || !MERGE) {  // last tile of this CTA, or no merged boundary (register budget)
                mbar_wait(WS_FULL_V(vs), (gv / ST) & 1);
                if (PP) named_sync(me, 256);
                if (ATTN_WS_RMID) rescale_o(alpha_p);
                issue_pv(WS_VBUF(vs));
                if (PP) named_arrive(other, 256);
                trace_bmark<1>(p.trace, brec, tbb);
                wg_wait<0>();
                trace_bmark<2>(p.trace, brec, tbb);
                reg_fence(o);
                reg_fence_u(pa);
                if (leader) mbar_arrive(WS_EMPTY_V(vs));
                if (VB && leader) mbar_wait(WS_EMPTY_V(vs), (gv / ST) & 1);  // both consumers' last P V done (VB staging)
                if constexpr (S0F) {  // the next tile's S_0 on the tensor core while this tile's O is stored
                    tn = acquire(wn);
                    trace_bmark<4>(p.trace, brec, tbb);
                    if (tn >= total) {
                        store_o(w, o, m_r, l_r);
                        break;
                    }
                    const WsUnit<KS> wo = w;
                    const float mo[2] = {m_r[0], m_r[1]}, lo[2] = {l_r[0], l_r[1]};
                    w = wn;
                    t = tn;
                    set_tile();
                    first_s_issue(brec, tbb);
                    store_o(wo, o, mo, lo);
                    trace_bmark<3>(p.trace, brec, tbb);
#pragma unroll
                    for (int i = 0; i < NO * 4; ++i) o[i] = 0.f;
                    m_r[0] = m_r[1] = -INFINITY;
                    l_r[0] = l_r[1] = 0.f;
                    first_s_finish();
                    j = 1;
                    continue;
                }
                store_o(w, o, m_r, l_r);
                trace_bmark<3>(p.trace, brec, tbb);
                if (!MERGE) tn = acquire(wn);
                trace_bmark<4>(p.trace, brec, tbb);
                if (tn >= total) break;
                w = wn;
                t = tn;
                set_tile();
#pragma unroll
                for (int i = 0; i < NO * 4; ++i) o[i] = 0.f;
                m_r[0] = m_r[1] = -INFINITY;
                l_r[0] = l_r[1] = 0.f;
                first_s(brec, tbb);
                j = 1;
                continue;
            }
            // boundary issue point: S_0 of tile wn and the last P V of tile w
            const WsUnit<KS> wo = w;
            w = wn;
            t = tn;
            set_tile();
            const int s0 = kv % ST;
            mbar_wait(WS_FULL_K(s0), (kv / ST) & 1);
            if (PP) named_sync(me, 256);
            issue_s(WS_KBUF(s0));
            if (ATTN_WS_RMID) rescale_o(alpha_p);
            mbar_wait(WS_FULL_V(vs), (gv / ST) & 1);  // the last V of the previous tile
            issue_pv(WS_VBUF(vs));
            if (PP) named_arrive(other, 256);
            wg_wait<1>();
            reg_fence(s);
            leader_arrive_k(WS_EMPTY_K(s0), w.n_tiles == 1);
            const float mo[2] = {m_r[0], m_r[1]}, lo[2] = {l_r[0], l_r[1]};
            m_r[0] = m_r[1] = -INFINITY;
            l_r[0] = l_r[1] = 0.f;
            softmax(0, alpha_p);  // o is zeroed below: the value of alpha_p does not matter for this tile's P_0 V_0
            wg_wait<0>();
            reg_fence(o);
            reg_fence_u(pa);
            leader_arrive_v(WS_EMPTY_V(vs));
            store_o(wo, o, mo, lo);
#pragma unroll
            for (int i = 0; i < NO * 4; ++i) o[i] = 0.f;
            pack_p();
            j = 1;
        }
    }
    // The consumer before kPpFirst arrives once more than consumer kPpFirst syncs (its first arrival lets
    // kPpFirst start); this sync takes that arrival, so no barrier is left half-arrived when the CTA exits.
    if (PP && cw == kPpFirst) named_sync(me, 256);
    if (TO && leader) bulk_wait0();  // the last O store has finished before the CTA (and its shared memory) goes
#endif
#undef WS_FULL_K
#undef WS_FULL_V
#undef WS_EMPTY_K
#undef WS_EMPTY_V
#undef WS_KBUF
#undef WS_VBUF
}
// ---- host side of the warp-specialized kernel: TMA tensor maps ----
typedef CUresult (*EncodeTiledFn)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                  const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled through the runtime's driver entry-point query (no link against libcuda).
EncodeTiledFn encode_tiled() {
    static EncodeTiledFn fn = nullptr;
    static bool tried = false;
    if (!tried) {
        tried = true;
        void* f = nullptr;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = reinterpret_cast<EncodeTiledFn>(f);
        else
            cudaGetLastError();  // clear a sticky-free error of the query
    }
    return fn;
}

// A 4-d map over [batch, rows, heads, D] (strides in elements) read in boxes of 64 columns x box_rows rows,
// 128-byte swizzle, zero fill out of bounds.
bool make_map(CUtensorMap* map, const void* ptr, bool bf16, int D, int rows, int heads, int batch, long long rs,
              long long hs, long long bs, int box_rows, bool sw64 = false) {
    const EncodeTiledFn fn = encode_tiled();
    if (fn == nullptr || rs <= 0 || hs < 0 || bs < 0) return false;
    if (ATTN_WS_SMALL) {  // a dimension of size 1 is never stepped along: give it a valid stride (a broadcast's is 0)
        if (heads == 1) hs = rs;
        if (batch == 1) bs = rs;
    }
    const cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)rows, (cuuint64_t)heads, (cuuint64_t)batch};
    const cuuint64_t strides[3] = {(cuuint64_t)rs * 2, (cuuint64_t)hs * 2, (cuuint64_t)bs * 2};
    const cuuint32_t box[4] = {sw64 ? 32u : 64u, (cuuint32_t)box_rows, 1, 1};  // sw64: 32 columns = 64 B per row
    const cuuint32_t es[4] = {1, 1, 1, 1};
    return fn(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, const_cast<void*>(ptr),
              dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
              sw64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B,
              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Returns -1 when the tensor maps cannot describe these tensors (the caller falls back to v5's kernels).
// DR < D (ATTN_WS_D96): the tensors have DR columns; the maps say so and the kernel pads them to D (attn_fwd_ws).
template <int D, int BN, int ST, bool PP, int NWG, typename T, int DR = D>
int launch_ws(const KParams& kp, bool bf16, int num_sms, cudaStream_t stream) {
    alignas(64) CUtensorMap mq, mk, mv;
    if (!make_map(&mq, kp.q, bf16, DR, kp.sq, kp.hq, kp.batch, kp.q_rs, kp.q_hs, kp.q_bs, 64 * NWG) ||
        !make_map(&mk, kp.k, bf16, DR, kp.sk, kp.hkv, kp.batch, kp.k_rs, kp.k_hs, kp.k_bs, BN) ||
        !make_map(&mv, kp.v, bf16, DR, kp.sk, kp.hkv, kp.batch, kp.v_rs, kp.v_hs, kp.v_bs, BN,
                  ATTN_WS_D96N == 3 && DR < D))  // the kernel's V64
        return -1;
    constexpr int smem = ws_smem_bytes<D, BN, ST, NWG>();
    static_assert(smem <= 227 * 1024, "shared memory");
    const int m_blocks = (kp.sq + 64 * NWG - 1) / (64 * NWG);
    const long long tiles = (long long)m_blocks * kp.batch * kp.hq;
    KParams kps = kp;
    const int bh_count = kp.batch * kp.hq;
    const long long kv_head_bytes = 4LL * kp.sk * DR / kp.group;  // K + V bytes per query head (bf16 / fp16)
    kps.sec_heads = ATTN_WS_L2MB > 0 ? (int)max(1LL, min((long long)bh_count, (ATTN_WS_L2MB * 1048576LL) / max(1LL, kv_head_bytes)))
                                     : bh_count;
    const bool persist = ATTN_WS_PERSIST && !(D == 256 && kp.causal && !ATTN_WS_PERSIST_C256 && kp.tile_counter == nullptr);
    const long long grid = (persist && tiles > num_sms) ? num_sms : tiles;  // persistent: one CTA per SM
#if ATTN_WS_TMA_O
    // O through shared memory and TMA where the staging area fits and O's strides make a map (box: one
    // consumer's 64 rows); else the kernel without it (store_rows), with the same (unused) map parameter.
    // ATTN_WS_TMA_O_QBUF: where the staging does not fit, in Q's buffer (no more shared memory than without).
    alignas(64) CUtensorMap mo = mq;
    if constexpr (ws_tma_o<D, BN, ST, NWG>() || ws_tma_o_qbuf<D, BN, ST, NWG, DR>() || ws_tma_o_vbuf<D, BN, ST, NWG, DR>()) {
        if (make_map(&mo, kp.o, bf16, DR, kp.sq, kp.hq, kp.batch, kp.o_rs, kp.o_hs, kp.o_bs, 64)) {
            constexpr bool vb = ws_tma_o_vbuf<D, BN, ST, NWG, DR>();
            constexpr bool qb = !ws_tma_o<D, BN, ST, NWG>() && !vb;
            constexpr int smem_o = ws_smem_bytes<D, BN, ST, NWG, !qb && !vb>();
            static_assert(smem_o <= 227 * 1024, "shared memory");
            auto kern_o = attn_fwd_ws<D, BN, ST, PP, NWG, T, true, qb, false, DR, vb>;
            if (cudaFuncSetAttribute(kern_o, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_o) != cudaSuccess) return 3;
            kern_o<<<(unsigned)grid, 128 * (NWG + 1), smem_o, stream>>>(mq, mk, mv, kps, m_blocks, mo);
            return cudaGetLastError() == cudaSuccess ? 0 : 3;
        }
    }
#endif
    auto kern = attn_fwd_ws<D, BN, ST, PP, NWG, T, false, false, false, DR>;
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) return 3;
#if ATTN_WS_TMA_O
    kern<<<(unsigned)grid, 128 * (NWG + 1), smem, stream>>>(mq, mk, mv, kps, m_blocks, mo);
#else
    kern<<<(unsigned)grid, 128 * (NWG + 1), smem, stream>>>(mq, mk, mv, kps, m_blocks);
#endif
    return cudaGetLastError() == cudaSuccess ? 0 : 3;
}

// The d128 kernel's configuration (causal: ATTN_WS_BN128; not causal: ATTN_WS_BN128N_TMAO with ATTN_WS_TMA_O, else
// ATTN_WS_BN128N; ATTN_WS_BN176_FROM: 176 from that seqlen_k on), on DR real columns (96: ATTN_WS_D96, the padding
// zero-filled by TMA).
template <typename T, int DR>
int launch_ws_d128(const KParams& kp, bool bf16, int num_sms, cudaStream_t stream) {
    if constexpr (ATTN_WS_NWG128 == 3 && DR == 128)
        return launch_ws<128, ATTN_WS_BN128W3, ATTN_WS_ST128W3, true, 3, T, DR>(kp, bf16, num_sms, stream);
    if (kp.causal) return launch_ws<128, ATTN_WS_BN128, ATTN_WS_ST128, ATTN_WS_PP128 != 0, 2, T, DR>(kp, bf16, num_sms, stream);
    if constexpr (ATTN_WS_BN176_FROM > 0 && ATTN_WS_TMA_O != 0 && DR == 128)  // long key ranges: FA3's 128 x 176 tile
        if (kp.sk >= ATTN_WS_BN176_FROM)
            return launch_ws<128, 176, ATTN_WS_ST128, ATTN_WS_PP128 != 0, 2, T, DR>(kp, bf16, num_sms, stream);
    return launch_ws<128, ATTN_WS_TMA_O ? ATTN_WS_BN128N_TMAO : ATTN_WS_BN128N, ATTN_WS_ST128, ATTN_WS_PP128 != 0, 2, T, DR>(
        kp, bf16, num_sms, stream);
}

template <typename T>
int dispatch_ws(const KParams& kp, int D, bool bf16, int num_sms, cudaStream_t stream) {
    switch (D) {
        case 64: return launch_ws<64, ATTN_WS_BN64, ATTN_WS_ST64, ATTN_WS_PP64 != 0, ATTN_WS_NWG64, T>(kp, bf16, num_sms, stream);
        case 128: return launch_ws_d128<T, 128>(kp, bf16, num_sms, stream);
        case 256: return launch_ws<256, ATTN_WS_BN256, ATTN_WS_ST256, ATTN_WS_PP256 != 0, 2, T>(kp, bf16, num_sms, stream);
#if ATTN_WS_D192
        case 192: return launch_ws<192, ATTN_WS_BN192, 2, true, 2, T>(kp, bf16, num_sms, stream);
#endif
#if ATTN_WS_D96
        case 96:  // on the d128 kernel (a third more MMA than needed unless ATTN_WS_D96N)
            if constexpr (ATTN_WS_NWG96 == 3) return launch_ws<128, ATTN_WS_BN96, ATTN_WS_ST128, true, 3, T, 96>(kp, bf16, num_sms, stream);
            return launch_ws_d128<T, 96>(kp, bf16, num_sms, stream);
#endif
    }
    return -1;
}

// The warp-specialized kernel takes what v5 gave the wgmma kernel (prefill filling >= 1 wave of 128-row
// CTAs, no GQA packing, no split) and head_dim 64 too.
int ws_num_splits(const attn_fwd_params* p, const Plan& pl);
bool use_ws(const attn_fwd_params* p, const Plan& pl) {
    if (!ATTN_WS || !pl.fast || pl.G != 1 || !hopper_device()) return false;
    const int D = p->head_dim;
    if (D != 128 && D != 256 && !(D == 64 && ATTN_WS_D64) && !(D == 192 && ATTN_WS_D192) && !(D == 96 && ATTN_WS_D96))
        return false;
    const int num_sms = p->num_sms > 0 ? p->num_sms : 132;
    const long long ctas = (long long)((p->seqlen_q + 127) / 128) * p->batch * p->num_heads_q;
    if (ctas >= num_sms) return pl.num_splits == 1;
    // ATTN_WS_SMALL: below a wave, one CTA per row tile where the ws split-KV leaves the work unsplit (its cost model
    // chose S = 1, or no split applies: d96); v5's kernels (the mma plan's own split-KV) otherwise
#if ATTN_WS_SPLIT
    return ATTN_WS_SMALL != 0 && p->seqlen_q > 16 && ws_num_splits(p, pl) == 1;
#else
    return ATTN_WS_SMALL != 0 && p->seqlen_q > 16;
#endif
}

#if ATTN_WS_SPLIT
// ---- ATTN_WS_SPLIT: split-KV on the warp-specialized kernel ----
// Where the ws kernel's row tiles fill less than a wave (chunked prefill: b2 sq128 h32 = 64 tiles of 128 rows on
// 132 SMs), each tile's key range is cut into S parts and the kernel runs non-persistent on tiles * S work units
// (one per CTA, no dynamic tile counter), each writing fp32 partials to the workspace; attn_combine merges them.
// Rows per CTA and key-tile width of the split kernels (as dispatch_ws_split launches them).
void ws_split_shape(int D, bool causal, int* bm, int* bn) {
    *bm = D == 64 ? 64 * ATTN_WS_NWG64 : 128;
    *bn = D == 64 ? ATTN_WS_BN64
                  : D == 128 ? (causal ? ATTN_WS_BN128 : ATTN_WS_SPLIT_BN128N) : D == 192 ? ATTN_WS_BN192 : ATTN_WS_BN256;
}

// Number of key splits S for the ws kernel (1: no split-KV on it; the other paths take the work as before).
// Cost model in key-tile times (c0: a unit's prologue / epilogue; cc: the combine launch): the launch takes
// ceil(units / SMs) waves of the mean unit cost but at least the longest unit; S keeps >= 4 key tiles per split.
int ws_num_splits(const attn_fwd_params* p, const Plan& pl) {
    // seqlen_q <= 16 (decode, also without GQA packing) stays on the decode paths
    if (!ATTN_WS || !pl.fast || pl.G != 1 || p->seqlen_q <= 16 || p->seqlen_k <= 0 || !(p->softmax_scale > 0.f)) return 1;
    const int D = p->head_dim;
    if (D != 128 && D != 256 && !(D == 64 && ATTN_WS_D64) && !(D == 192 && ATTN_WS_D192)) return 1;
    const int num_sms = p->num_sms > 0 ? p->num_sms : 132;
    const long long ctas = (long long)((p->seqlen_q + 127) / 128) * p->batch * p->num_heads_q;
    if (ctas >= num_sms || !hopper_device()) return 1;  // >= 1 wave: the unsplit ws kernel (use_ws)
    if (ATTN_WS_SPLIT_FORCE > 0) return ATTN_WS_SPLIT_FORCE;  // test knob (any S: splits without keys included)
    int bm = 128, bn = 128;
    ws_split_shape(D, p->causal != 0, &bm, &bn);
    const int m_blocks = (p->seqlen_q + bm - 1) / bm;
    const long long bh = (long long)p->batch * p->num_heads_q, tiles = (long long)m_blocks * bh;
    long long sum = 0;  // key tiles over all row tiles
    int nmax = 0;
    for (int mb = 0; mb < m_blocks; ++mb) {
        long long n_end = p->seqlen_k;
        if (p->causal) n_end = std::min(n_end, (long long)(mb + 1) * bm + p->seqlen_k - p->seqlen_q);
        const int nt = n_end > 0 ? (int)((n_end + bn - 1) / bn) : 0;
        sum += nt;
        nmax = std::max(nmax, nt);
    }
    sum *= bh;
    const double c0 = 1.5, cc = 1.0;
    auto cost = [&](int S) {
        const long long units = tiles * S;
        const double mean = (double)sum / (double)units + c0;
        const double longest = (double)((nmax + S - 1) / S) + c0;
        return std::max((double)((units + num_sms - 1) / num_sms) * mean, longest) + (S > 1 ? cc : 0.0);
    };
    int best = 1;
    double best_cost = cost(1);
    for (int S = 2; S <= 64 && 4 * S <= nmax; ++S) {
        const double c = cost(S);
        if (c < best_cost) {
            best = S;
            best_cost = c;
        }
    }
    return best;
}

template <int D, int BN, int ST, bool PP, int NWG, typename T>
int launch_ws_split(const KParams& kp, bool bf16, cudaStream_t stream) {
    alignas(64) CUtensorMap mq, mk, mv;
    if (!make_map(&mq, kp.q, bf16, D, kp.sq, kp.hq, kp.batch, kp.q_rs, kp.q_hs, kp.q_bs, 64 * NWG) ||
        !make_map(&mk, kp.k, bf16, D, kp.sk, kp.hkv, kp.batch, kp.k_rs, kp.k_hs, kp.k_bs, BN) ||
        !make_map(&mv, kp.v, bf16, D, kp.sk, kp.hkv, kp.batch, kp.v_rs, kp.v_hs, kp.v_bs, BN))
        return -1;
    constexpr int smem = ws_smem_bytes<D, BN, ST, NWG>();
    static_assert(smem <= 227 * 1024, "shared memory");
    const int m_blocks = (kp.sq + 64 * NWG - 1) / (64 * NWG);
    const long long units = (long long)m_blocks * kp.batch * kp.hq * kp.num_splits;
    KParams kps = kp;
    kps.tile_counter = nullptr;  // non-persistent: one unit per CTA
    const int bh_count = kp.batch * kp.hq;
    const long long kv_head_bytes = 4LL * kp.sk * D / kp.group;
    kps.sec_heads = ATTN_WS_L2MB > 0 ? (int)max(1LL, min((long long)bh_count, (ATTN_WS_L2MB * 1048576LL) / max(1LL, kv_head_bytes)))
                                     : bh_count;
    auto kern = attn_fwd_ws<D, BN, ST, PP, NWG, T, false, false, true>;
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) return 3;
#if ATTN_WS_TMA_O
    kern<<<(unsigned)units, 128 * (NWG + 1), smem, stream>>>(mq, mk, mv, kps, m_blocks, mq);  // tmO unused (KS)
#else
    kern<<<(unsigned)units, 128 * (NWG + 1), smem, stream>>>(mq, mk, mv, kps, m_blocks);
#endif
    if (cudaGetLastError() != cudaSuccess) return 3;
    const long long rows = (long long)kp.batch * kp.hq * kp.sq;
    attn_combine<T><<<(unsigned)((rows + 3) / 4), 128, 0, stream>>>(kp, D);
    return cudaGetLastError() == cudaSuccess ? 0 : 3;
}

// The shapes of ws_split_shape; -1: no tensor map for these strides (or no kernel for D).
template <typename T>
int dispatch_ws_split(const KParams& kp, int D, bool bf16, cudaStream_t stream) {
    switch (D) {
        case 64: return launch_ws_split<64, ATTN_WS_BN64, ATTN_WS_ST64, ATTN_WS_PP64 != 0, ATTN_WS_NWG64, T>(kp, bf16, stream);
        case 128:
            if (kp.causal) return launch_ws_split<128, ATTN_WS_BN128, ATTN_WS_ST128, ATTN_WS_PP128 != 0, 2, T>(kp, bf16, stream);
            return launch_ws_split<128, ATTN_WS_SPLIT_BN128N, ATTN_WS_ST128, ATTN_WS_PP128 != 0, 2, T>(kp, bf16, stream);
        case 256: return launch_ws_split<256, ATTN_WS_BN256, ATTN_WS_ST256, ATTN_WS_PP256 != 0, 2, T>(kp, bf16, stream);
#if ATTN_WS_D192
        case 192: return launch_ws_split<192, ATTN_WS_BN192, 2, true, 2, T>(kp, bf16, stream);
#endif
    }
    return -1;
}
#endif  // ATTN_WS_SPLIT

template <typename T>
int dispatch(const KParams& kp, const Plan& pl, int D, cudaStream_t stream) {
    // BM = 128: 4 warps x 32 rows (d <= 128; d128 as 2 x 32-key sub-tiles per 64-key tile, v2) or
    // 8 warps x 16 rows (d >= 192: the 32-row O accumulators do not fit). BM = 64: 4 warps x 16 rows.
    if (pl.bm == 128) {
        switch (D) {
            case 64: return launch_mma<64, 4, 2, 1, T>(kp, pl, stream);
            case 96: return launch_mma<96, 4, 2, 1, T>(kp, pl, stream);
            case 128: return launch_mma<128, 4, 2, ATTN_D128_KSUB, T>(kp, pl, stream);
            case 192: return launch_mma<192, 8, 1, 1, T>(kp, pl, stream);
            case 256: return launch_mma<256, 8, 1, 1, T>(kp, pl, stream);
        }
    } else {
        switch (D) {
            case 64: return launch_mma<64, 4, 1, 1, T>(kp, pl, stream);
            case 96: return launch_mma<96, 4, 1, 1, T>(kp, pl, stream);
            case 128: return launch_mma<128, 4, 1, 1, T>(kp, pl, stream);
            case 192: return launch_mma<192, 4, 1, 1, T>(kp, pl, stream);
            case 256: return launch_mma<256, 4, 1, 1, T>(kp, pl, stream);
        }
    }
    return 1;
}

}  // namespace

namespace {
// The split-KV partials in the workspace (the layout split_workspace_bytes sizes and attn_combine reads): o_part
// fp32 [num_splits, batch, heads_q, seqlen_q, head_dim] from the first 256-byte boundary, then lse_part fp32
// [num_splits, batch, heads_q, seqlen_q].
void set_partials(KParams& kp, const attn_fwd_params* p, int num_splits) {
    const size_t rows = (size_t)num_splits * p->batch * p->num_heads_q * p->seqlen_q;
    const uintptr_t base = (reinterpret_cast<uintptr_t>(p->workspace) + 255u) & ~uintptr_t(255u);
    kp.o_part = reinterpret_cast<float*>(base);
    kp.lse_part = kp.o_part + rows * (size_t)p->head_dim;
}
}  // namespace

extern "C" size_t attn_fwd_workspace_bytes(const attn_fwd_params* p) {
    if (p == nullptr || p->num_heads_kv <= 0 || p->num_heads_q % p->num_heads_kv != 0 || p->seqlen_q <= 0)
        return 0;
    const Plan pl = make_plan(p, true);
#if ATTN_DECODE
    if (pl.dec) return split_workspace_bytes(p, pl);
#endif
    size_t bytes = (ATTN_WS_DYN && p->causal && use_ws(p, pl)) ? 256 : split_workspace_bytes(p, pl);  // 256: the dynamic tile counter
    if (ATTN_WS_SMALL) bytes = std::max(bytes, split_workspace_bytes(p, pl));  // v5's kernels: the fallback without a map
#if ATTN_WS_SPLIT
    // the ws kernel's split-KV partials; room for the mma plan's too (its fallback when no tensor map fits)
    Plan pw = pl;
    pw.num_splits = ws_num_splits(p, pl);
    bytes = std::max(bytes, split_workspace_bytes(p, pw));
#endif
#if ATTN_WS_TRACE
    bytes = ((bytes + 255) & ~size_t(255)) + kTraceBytes;  // the trace at the workspace's end (attn_fwd)
#endif
    return bytes;
}

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (p == nullptr || p->abi_version != ATTN_ABI_VERSION) return 1;
    if (p->dtype != ATTN_DTYPE_BF16 && p->dtype != ATTN_DTYPE_FP16) return 1;
    if (p->batch <= 0 || p->seqlen_q <= 0 || p->num_heads_q <= 0 || p->num_heads_kv <= 0) return 0;
    if (p->num_heads_q % p->num_heads_kv != 0 || p->seqlen_k < 0) return 1;
    if (p->head_dim <= 0 || p->head_dim > 256) return 1;

    // Split-KV only when the harness provided the workspace this plan asks for.
    Plan pl = make_plan(p, true);
    const size_t need = split_workspace_bytes(p, pl);
    if (need > 0 && (p->workspace == nullptr || p->workspace_bytes < need)) pl = make_plan(p, false);

    KParams kp{};
    kp.q = p->q;
    kp.k = p->k;
    kp.v = p->v;
    kp.o = p->o;
    kp.lse = p->lse;
    kp.q_bs = p->q_batch_stride; kp.q_rs = p->q_row_stride; kp.q_hs = p->q_head_stride;
    kp.k_bs = p->k_batch_stride; kp.k_rs = p->k_row_stride; kp.k_hs = p->k_head_stride;
    kp.v_bs = p->v_batch_stride; kp.v_rs = p->v_row_stride; kp.v_hs = p->v_head_stride;
    kp.o_bs = p->o_batch_stride; kp.o_rs = p->o_row_stride; kp.o_hs = p->o_head_stride;
    kp.batch = p->batch;
    kp.sq = p->seqlen_q;
    kp.sk = p->seqlen_k;
    kp.hq = p->num_heads_q;
    kp.hkv = p->num_heads_kv;
    kp.group = p->num_heads_q / p->num_heads_kv;
    if (ATTN_WS_SMALL && kp.hkv > 1 && kp.k_hs == 0 && kp.v_hs == 0) {  // one kv head's storage shared by all: read it as
        kp.hkv = 1;                                                     // one head (every kernel maps h / group to 0)
        kp.group = p->num_heads_q;
    }
    kp.G = pl.G;
    kp.R = pl.R;
    kp.num_hb = pl.num_hb;
    kp.causal = p->causal ? 1 : 0;
    kp.num_splits = pl.num_splits;
    kp.tiles_per_split = pl.tiles_per_split;
    kp.scale_log2 = p->softmax_scale * kLog2e;
    if (pl.num_splits > 1) set_partials(kp, p, pl.num_splits);

    const bool bf16 = p->dtype == ATTN_DTYPE_BF16;
    if (!pl.fast || p->seqlen_k == 0 || !(p->softmax_scale > 0.f)) {
        const long long rows = (long long)p->batch * p->num_heads_q * p->seqlen_q;
        const unsigned blocks = (unsigned)((rows + 3) / 4);
        if (bf16)
            attn_fallback<__nv_bfloat16><<<blocks, 128, 0, stream>>>(kp, p->head_dim, p->softmax_scale);
        else
            attn_fallback<__half><<<blocks, 128, 0, stream>>>(kp, p->head_dim, p->softmax_scale);
        return cudaGetLastError() == cudaSuccess ? 0 : 3;
    }
#if ATTN_DECODE
    if (pl.dec) return bf16 ? launch_dec<__nv_bfloat16>(kp, pl, stream) : launch_dec<__half>(kp, pl, stream);
#endif
#if ATTN_WS_SPLIT
    {
        Plan pw = pl;
        pw.num_splits = ws_num_splits(p, pl);
        const size_t need_w = split_workspace_bytes(p, pw);
        if (pw.num_splits > 1 && p->workspace != nullptr && p->workspace_bytes >= need_w) {
            KParams kw = kp;
            kw.num_splits = pw.num_splits;
            kw.tiles_per_split = 0;  // unused: the ws kernel splits each tile's own key range (ws_unit)
            set_partials(kw, p, pw.num_splits);
            const int rc = bf16 ? dispatch_ws_split<__nv_bfloat16>(kw, p->head_dim, true, stream)
                                : dispatch_ws_split<__half>(kw, p->head_dim, false, stream);
            if (rc >= 0) return rc;  // -1: no tensor map for these strides -> the kernels below
        }
    }
#endif
    if (use_ws(p, pl)) {
        if (ATTN_WS_DYN && p->causal && p->workspace != nullptr && p->workspace_bytes >= 4) {
            kp.tile_counter = static_cast<int*>(p->workspace);
            if (cudaMemsetAsync(kp.tile_counter, 0, sizeof(int), stream) != cudaSuccess) return 3;
        }
#if ATTN_WS_TRACE
        if (p->workspace != nullptr && p->workspace_bytes >= kTraceBytes + (kp.tile_counter != nullptr ? 256 : 0)) {
            kp.trace = reinterpret_cast<unsigned long long*>(static_cast<char*>(p->workspace) +
                                                             ((p->workspace_bytes - kTraceBytes) & ~size_t(7)));
            if (cudaMemsetAsync(kp.trace, 0, kTraceBytes, stream) != cudaSuccess) return 3;
        }
#endif
        const int sms = p->num_sms > 0 ? p->num_sms : 132;
        const int rc = bf16 ? dispatch_ws<__nv_bfloat16>(kp, p->head_dim, true, sms, stream)
                            : dispatch_ws<__half>(kp, p->head_dim, false, sms, stream);
        if (rc >= 0) return rc;  // -1: no tensor map for these strides -> v5's kernels below
    }
    if (use_wgmma(p, pl))
        return bf16 ? dispatch_wgmma<__nv_bfloat16>(kp, p->head_dim, stream) : dispatch_wgmma<__half>(kp, p->head_dim, stream);
    return bf16 ? dispatch<__nv_bfloat16>(kp, pl, p->head_dim, stream) : dispatch<__half>(kp, pl, p->head_dim, stream);
}
