/*
 * attn_original.cu — the ORIGINAL attention forward kernel every attnq campaign measures against.
 *
 * A plain FlashAttention-2-style forward pass, written to be read and trusted rather than to be fast:
 *   - one thread block (4 warps, 128 threads) computes BM = 64 query rows of one (batch, head);
 *   - the Q tile lives in shared memory for the whole block; the block walks the keys in tiles of
 *     BN = 64 rows, loading K and V tiles to shared memory (guarded, zero-padded);
 *   - warp w owns query rows [16w, 16w + 16) of the tile for every phase, so the phases of one key
 *     tile need only __syncwarp(); __syncthreads() guards the shared K/V tiles alone;
 *   - S = Q K^T through WMMA (16x16x16, bf16/fp16 in, fp32 accumulate) into an fp32 smem tile;
 *   - a scalar online softmax per row (scale, mask, running max m_i and sum l_i, rescale of the fp32
 *     O accumulator kept in smem, P written in the element type);
 *   - O += P V through WMMA (the fp32 O tile is loaded from / stored back to smem);
 *   - key tiles entirely above the causal diagonal are skipped.
 * Nothing here is Hopper-only (no TMA, no wgmma); it builds for sm_80 and later.
 *
 * Semantics are those of kernels/attn_abi.h: bottom-right causal (query i sees key j iff
 * j <= i + seqlen_k - seqlen_q), lse = ln(sum_j exp(softmax_scale * q.k_j)), a row that sees no key
 * gets o = 0 and lse = +INFINITY.
 *
 * Return codes of attn_fwd: 0 launched; 1 unsupported dtype or head_dim; 2 invalid parameters;
 * 3 the CUDA runtime refused the launch (or the shared-memory attribute).
 */
#include "attn_abi.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <math.h>

namespace {

using namespace nvcuda;

constexpr int kBM = 64;                     // query rows per block
constexpr int kBN = 64;                     // key rows per key tile
constexpr int kWarps = 4;                   // each warp owns 16 query rows
constexpr int kThreads = kWarps * 32;
constexpr int kWarpRows = kBM / kWarps;     // 16 = one WMMA tile of rows
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

static_assert(kWarpRows == 16, "each warp owns exactly one 16-row WMMA tile of queries");
static_assert(kBN == 64, "the softmax gives each lane the two columns lane and lane + 32");

/* Shared-memory layout for head dim D (all pitches padded to spread banks; every WMMA pointer used
 * below stays 32-byte aligned because each pitch times 16 rows and each 16-column step is a
 * multiple of 32 bytes). */
template <typename T, int D>
struct Smem {
    static constexpr int kLdX = D + 8;       // elements: pitch of the Q, K and V tiles
    static constexpr int kLdS = kBN + 4;     // floats:   pitch of the S tile
    static constexpr int kLdP = kBN + 8;     // elements: pitch of the P tile
    static constexpr int kLdO = D + 4;       // floats:   pitch of the O accumulator
    static constexpr size_t kQ = 0;
    static constexpr size_t kK = kQ + sizeof(T) * kBM * kLdX;
    static constexpr size_t kV = kK + sizeof(T) * kBN * kLdX;
    static constexpr size_t kS = kV + sizeof(T) * kBN * kLdX;
    static constexpr size_t kP = kS + sizeof(float) * kBM * kLdS;
    static constexpr size_t kO = kP + sizeof(T) * kBM * kLdP;
    static constexpr size_t kM = kO + sizeof(float) * kBM * kLdO;  // running max per row (log2 units)
    static constexpr size_t kL = kM + sizeof(float) * kBM;           // running sum per row
    static constexpr size_t kBytes = kL + sizeof(float) * kBM;
    static_assert(kK % 32 == 0 && kV % 32 == 0 && kS % 32 == 0 && kP % 32 == 0 && kO % 32 == 0,
                  "WMMA needs 32-byte aligned tiles");
    static_assert(kBytes <= 227 * 1024, "shared memory exceeds the 227 KB per-block limit");
};

/* What the kernel needs from attn_fwd_params, with the pointers offset-free and typed. */
template <typename T>
struct KernelArgs {
    const T* q;
    const T* k;
    const T* v;
    T* o;
    float* lse;
    int64_t q_batch_stride, q_row_stride, q_head_stride;
    int64_t k_batch_stride, k_row_stride, k_head_stride;
    int64_t v_batch_stride, v_row_stride, v_head_stride;
    int64_t o_batch_stride, o_row_stride, o_head_stride;
    int seqlen_q, seqlen_k, num_heads_q, group;  // group = num_heads_q / num_heads_kv
    float scale_log2;                           // softmax_scale * log2(e): scores in log2 units
    int causal;
    int vec16;  // 1 when every pointer is 16-byte aligned and every stride a multiple of 8 elements
};

__device__ __forceinline__ void store_elem(__half* dst, float x) { *dst = __float2half_rn(x); }
__device__ __forceinline__ void store_elem(__nv_bfloat16* dst, float x) { *dst = __float2bfloat16_rn(x); }

__device__ __forceinline__ float warp_max(float x) {
    for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
    return x;
}

__device__ __forceinline__ float warp_sum(float x) {
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

/* Copy rows [row0, row0 + ROWS) of a [rows, D] global matrix (row pitch `row_stride` elements,
 * contiguous columns) into smem (pitch LD). Rows >= nrows are written as zeros, so padded query
 * rows give zero scores and padded V rows add nothing (their P is 0, and 0 * 0 is 0, never NaN). */
template <typename T, int D, int ROWS, int LD>
__device__ __forceinline__ void load_rows(T* dst, const T* src, int64_t row_stride, int row0, int nrows,
                                          int vec16) {
    constexpr int kChunks = D / 8;  // 8 elements = 16 bytes per chunk
    for (int idx = threadIdx.x; idx < ROWS * kChunks; idx += kThreads) {
        const int r = idx / kChunks;
        const int c = (idx % kChunks) * 8;
        const int gr = row0 + r;
        T* d = dst + r * LD + c;
        if (gr < nrows) {
            const T* s = src + static_cast<int64_t>(gr) * row_stride + c;
            if (vec16) {
                *reinterpret_cast<uint4*>(d) = __ldg(reinterpret_cast<const uint4*>(s));
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) d[e] = s[e];
            }
        } else {
            *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) attn_fwd_kernel(const KernelArgs<T> a) {
    using L = Smem<T, D>;
    extern __shared__ __align__(128) unsigned char smem[];
    T* Qs = reinterpret_cast<T*>(smem + L::kQ);
    T* Ks = reinterpret_cast<T*>(smem + L::kK);
    T* Vs = reinterpret_cast<T*>(smem + L::kV);
    float* Ss = reinterpret_cast<float*>(smem + L::kS);
    T* Ps = reinterpret_cast<T*>(smem + L::kP);
    float* Os = reinterpret_cast<float*>(smem + L::kO);
    float* Ms = reinterpret_cast<float*>(smem + L::kM);
    float* Ls = reinterpret_cast<float*>(smem + L::kL);

    // Launch the longest (last, under causal) query tiles first: better load balance, same result.
    const int m_block = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);
    const int h = blockIdx.y;
    const int b = blockIdx.z;
    const int h_kv = h / a.group;  // GQA/MQA: query head h reads kv head h / (Hq / Hkv)
    const int m0 = m_block * kBM;
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int wr0 = warp * kWarpRows;       // first tile row this warp owns
    const int causal_offset = a.seqlen_k - a.seqlen_q;  // query i sees key j iff j <= i + offset

    const T* q = a.q + b * a.q_batch_stride + h * a.q_head_stride;
    const T* k = a.k + b * a.k_batch_stride + h_kv * a.k_head_stride;
    const T* v = a.v + b * a.v_batch_stride + h_kv * a.v_head_stride;

    // ---- prologue: Q tile, O = 0, m = -inf, l = 0 ------------------------------------------------
    load_rows<T, D, kBM, L::kLdX>(Qs, q, a.q_row_stride, m0, a.seqlen_q, a.vec16);
    for (int idx = threadIdx.x; idx < kBM * L::kLdO; idx += kThreads) Os[idx] = 0.0f;
    for (int idx = threadIdx.x; idx < kBM; idx += kThreads) {
        Ms[idx] = -INFINITY;
        Ls[idx] = 0.0f;
    }

    // Keys this block can see: all of them, or under causal up to the diagonal of its last valid row.
    int key_end = a.seqlen_k;
    if (a.causal) {
        const int last_row = min(m0 + kBM, a.seqlen_q) - 1;
        key_end = min(a.seqlen_k, last_row + causal_offset + 1);  // may be <= 0: no key at all
    }
    __syncthreads();

    // ---- main loop over key tiles -------------------------------------------------------------
    // Invariant after the tile starting at n0 (for each row i of this block, keys j < n0 + BN seen):
    //   Ms[i] = max over visible seen j of s2_ij        (s2 = scale*log2(e)*q.k; -inf if none yet)
    //   Ls[i] = sum over visible seen j of 2^(s2_ij - Ms[i])   (0 if none yet)
    //   Os[i] = sum over visible seen j of 2^(s2_ij - Ms[i]) * v_j   (unnormalized, fp32)
    for (int n0 = 0; n0 < key_end; n0 += kBN) {
        load_rows<T, D, kBN, L::kLdX>(Ks, k, a.k_row_stride, n0, a.seqlen_k, a.vec16);
        load_rows<T, D, kBN, L::kLdX>(Vs, v, a.v_row_stride, n0, a.seqlen_k, a.vec16);
        __syncthreads();  // K/V tiles complete (and, on the first tile, Q / O / m / l initialized)

        // S[wr0 : wr0+16, 0:BN] = Q[wr0 : wr0+16, :] K^T  (raw dot products, fp32)
        {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kBN / 16];
#pragma unroll
            for (int f = 0; f < kBN / 16; ++f) wmma::fill_fragment(acc[f], 0.0f);
#pragma unroll
            for (int k0 = 0; k0 < D; k0 += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> qa;
                wmma::load_matrix_sync(qa, Qs + wr0 * L::kLdX + k0, L::kLdX);
#pragma unroll
                for (int f = 0; f < kBN / 16; ++f) {
                    // K^T as a col-major (D x BN) matrix: element (d, n) sits at Ks[n * ldX + d].
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kb;
                    wmma::load_matrix_sync(kb, Ks + (f * 16) * L::kLdX + k0, L::kLdX);
                    wmma::mma_sync(acc[f], qa, kb, acc[f]);
                }
            }
#pragma unroll
            for (int f = 0; f < kBN / 16; ++f)
                wmma::store_matrix_sync(Ss + wr0 * L::kLdS + f * 16, acc[f], L::kLdS, wmma::mem_row_major);
        }
        __syncwarp();  // S rows of this warp visible to all its lanes

        // Online softmax, one row at a time; lane owns columns c0 = lane and c1 = lane + 32.
        const bool need_mask = (n0 + kBN > a.seqlen_k) || (a.causal && n0 + kBN - 1 > m0 + causal_offset);
        for (int r = 0; r < kWarpRows; ++r) {
            const int row = wr0 + r;
            const int i = m0 + row;  // query index (may be >= seqlen_q for padding rows: never stored)
            float s0 = Ss[row * L::kLdS + lane] * a.scale_log2;
            float s1 = Ss[row * L::kLdS + lane + 32] * a.scale_log2;
            if (need_mask) {
                const int j0 = n0 + lane;
                const int j1 = n0 + lane + 32;
                if (j0 >= a.seqlen_k || (a.causal && j0 > i + causal_offset)) s0 = -INFINITY;
                if (j1 >= a.seqlen_k || (a.causal && j1 > i + causal_offset)) s1 = -INFINITY;
            }
            const float m_old = Ms[row];
            const float l_old = Ls[row];
            const float m_new = fmaxf(m_old, warp_max(fmaxf(s0, s1)));
            // A row that has seen no visible key yet keeps m = -inf; subtract 0 then so that
            // exp2(-inf - m) = 0 instead of exp2(-inf + inf) = NaN.
            const float m_use = (m_new == -INFINITY) ? 0.0f : m_new;
            const float p0 = exp2f(s0 - m_use);
            const float p1 = exp2f(s1 - m_use);
            const float alpha = exp2f(m_old - m_use);  // rescale of the old l and O; 0 when m_old = -inf
            const float l_new = l_old * alpha + warp_sum(p0 + p1);
            store_elem(Ps + row * L::kLdP + lane, p0);
            store_elem(Ps + row * L::kLdP + lane + 32, p1);
            if (alpha != 1.0f) {
                float* orow = Os + row * L::kLdO;
                for (int c = lane; c < D; c += 32) orow[c] *= alpha;
            }
            // Every lane read Ms/Ls[row] before the warp-wide shuffles above; only now update them.
            if (lane == 0) {
                Ms[row] = m_new;
                Ls[row] = l_new;
            }
        }
        __syncwarp();  // P rows and rescaled O rows visible to the whole warp before the WMMA loads

        // O[wr0 : wr0+16, :] += P[wr0 : wr0+16, 0:BN] V[0:BN, :]
        {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> pa[kBN / 16];
#pragma unroll
            for (int f = 0; f < kBN / 16; ++f) wmma::load_matrix_sync(pa[f], Ps + wr0 * L::kLdP + f * 16, L::kLdP);
#pragma unroll 2
            for (int d0 = 0; d0 < D; d0 += 16) {
                wmma::fragment<wmma::accumulator, 16, 16, 16, float> oacc;
                float* otile = Os + wr0 * L::kLdO + d0;
                wmma::load_matrix_sync(oacc, otile, L::kLdO, wmma::mem_row_major);
#pragma unroll
                for (int f = 0; f < kBN / 16; ++f) {
                    // V as a row-major (BN x D) matrix: element (n, d) sits at Vs[n * ldX + d].
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vb;
                    wmma::load_matrix_sync(vb, Vs + (f * 16) * L::kLdX + d0, L::kLdX);
                    wmma::mma_sync(oacc, pa[f], vb, oacc);
                }
                wmma::store_matrix_sync(otile, oacc, L::kLdO, wmma::mem_row_major);
            }
        }
        __syncthreads();  // every warp is done with Ks/Vs before the next tile overwrites them
    }
    // Visibility: the block-wide __syncthreads() that ends each tile (or, with no key tile at all,
    // the one after the prologue) orders every O/m/l write before the reads below.

    // ---- epilogue: o = O / l, lse = m*ln2 + ln(l); a row with l == 0 saw no key ----------------
    // Any visible key makes l >= 1 (the max key contributes 2^0), so l == 0 iff the row is empty.
    T* o = a.o + b * a.o_batch_stride + h * a.o_head_stride;
    constexpr int kChunks = D / 8;
    for (int idx = lane; idx < kWarpRows * kChunks; idx += 32) {
        const int row = wr0 + idx / kChunks;
        const int c = (idx % kChunks) * 8;
        const int i = m0 + row;
        if (i >= a.seqlen_q) continue;
        const float l = Ls[row];
        const float inv_l = (l > 0.0f) ? 1.0f / l : 0.0f;
        const float* orow = Os + row * L::kLdO + c;
        T* dst = o + static_cast<int64_t>(i) * a.o_row_stride + c;
        if (a.vec16) {
            union {
                uint4 u;
                T e[8];
            } pack;
#pragma unroll
            for (int e = 0; e < 8; ++e) store_elem(&pack.e[e], orow[e] * inv_l);
            *reinterpret_cast<uint4*>(dst) = pack.u;
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) store_elem(dst + e, orow[e] * inv_l);
        }
    }
    if (lane < kWarpRows) {
        const int row = wr0 + lane;
        const int i = m0 + row;
        if (i < a.seqlen_q) {
            const float l = Ls[row];
            const float lse = (l > 0.0f) ? Ms[row] * kLn2 + logf(l) : INFINITY;
            a.lse[(static_cast<int64_t>(b) * a.num_heads_q + h) * a.seqlen_q + i] = lse;
        }
    }
}

template <typename T, int D>
int launch(const attn_fwd_params* p, int vec16, cudaStream_t stream) {
    KernelArgs<T> a;
    a.q = static_cast<const T*>(p->q);
    a.k = static_cast<const T*>(p->k);
    a.v = static_cast<const T*>(p->v);
    a.o = static_cast<T*>(p->o);
    a.lse = p->lse;
    a.q_batch_stride = p->q_batch_stride;
    a.q_row_stride = p->q_row_stride;
    a.q_head_stride = p->q_head_stride;
    a.k_batch_stride = p->k_batch_stride;
    a.k_row_stride = p->k_row_stride;
    a.k_head_stride = p->k_head_stride;
    a.v_batch_stride = p->v_batch_stride;
    a.v_row_stride = p->v_row_stride;
    a.v_head_stride = p->v_head_stride;
    a.o_batch_stride = p->o_batch_stride;
    a.o_row_stride = p->o_row_stride;
    a.o_head_stride = p->o_head_stride;
    a.seqlen_q = p->seqlen_q;
    a.seqlen_k = p->seqlen_k;
    a.num_heads_q = p->num_heads_q;
    a.group = p->num_heads_q / p->num_heads_kv;
    a.scale_log2 = p->softmax_scale * kLog2e;
    a.causal = p->causal ? 1 : 0;
    a.vec16 = vec16;

    constexpr size_t kSmem = Smem<T, D>::kBytes;
    if (cudaFuncSetAttribute(attn_fwd_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(kSmem)) != cudaSuccess) {
        return 3;
    }
    const dim3 grid(static_cast<unsigned>((p->seqlen_q + kBM - 1) / kBM), static_cast<unsigned>(p->num_heads_q),
                    static_cast<unsigned>(p->batch));
    attn_fwd_kernel<T, D><<<grid, kThreads, kSmem, stream>>>(a);
    return cudaGetLastError() == cudaSuccess ? 0 : 3;
}

template <typename T>
int dispatch_head_dim(const attn_fwd_params* p, int vec16, cudaStream_t stream) {
    switch (p->head_dim) {
        case 64: return launch<T, 64>(p, vec16, stream);
        case 96: return launch<T, 96>(p, vec16, stream);
        case 128: return launch<T, 128>(p, vec16, stream);
        case 192: return launch<T, 192>(p, vec16, stream);
        case 256: return launch<T, 256>(p, vec16, stream);
        default: return 1;  // unsupported head_dim
    }
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

}  // namespace

extern "C" size_t attn_fwd_workspace_bytes(const attn_fwd_params* p) {
    (void)p;
    return 0;  // the original kernel needs no scratch memory
}

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (p == nullptr || p->abi_version != ATTN_ABI_VERSION) return 2;
    if (p->dtype != ATTN_DTYPE_BF16 && p->dtype != ATTN_DTYPE_FP16) return 1;
    if (p->head_dim != 64 && p->head_dim != 96 && p->head_dim != 128 && p->head_dim != 192 && p->head_dim != 256)
        return 1;
    if (p->batch < 0 || p->seqlen_q < 0 || p->seqlen_k < 0 || p->num_heads_q < 1 || p->num_heads_kv < 1 ||
        p->num_heads_q % p->num_heads_kv != 0 || p->num_heads_q > 65535 || p->batch > 65535)
        return 2;
    if (p->batch == 0 || p->seqlen_q == 0) return 0;  // nothing to write
    if (p->q == nullptr || p->o == nullptr || p->lse == nullptr) return 2;
    if (p->seqlen_k > 0 && (p->k == nullptr || p->v == nullptr)) return 2;

    // 16-byte vector loads/stores need aligned bases and strides that are multiples of 8 elements.
    const int64_t strides[12] = {p->q_batch_stride, p->q_row_stride, p->q_head_stride,
                                 p->k_batch_stride, p->k_row_stride, p->k_head_stride,
                                 p->v_batch_stride, p->v_row_stride, p->v_head_stride,
                                 p->o_batch_stride, p->o_row_stride, p->o_head_stride};
    int vec16 = aligned16(p->q) && aligned16(p->k) && aligned16(p->v) && aligned16(p->o);
    for (int s = 0; s < 12; ++s) vec16 = vec16 && (strides[s] % 8 == 0);

    if (p->dtype == ATTN_DTYPE_BF16) return dispatch_head_dim<__nv_bfloat16>(p, vec16, stream);
    return dispatch_head_dim<__half>(p, vec16, stream);
}
