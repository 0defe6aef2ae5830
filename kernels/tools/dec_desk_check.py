"""CPU desk check of the ATTN_DECODE kernel (attn_dec in kernels/attn_fast.cu); no GPU needed.

    python kernels/tools/dec_desk_check.py                      # default knobs
    python kernels/tools/dec_desk_check.py -DATTN_DEC_NW=4 -DATTN_DEC_ST=2

1. Plans: builds a host program that includes attn_fast.cu with -DATTN_DECODE=1 (plus the given -D flags) and
   prints, for a list of shapes, the plan make_plan gives (decode or not, splits, 32-key tiles per split, NW, ST).
2. Index math: emulates attn_dec on random data at the level of its shared memory and loop structure: each
   lane's cp.async chunks into the per-warp ring (rows past seqlen_k zero-filled, stage reuse asserted), tile
   ownership (warp w: tiles w, w + NW, ...), the mask condition and row limits (causal bottom-right, padding rows),
   the online softmax in log2 units, the warp merge (m * scale_log2, l), the fp32 partials and attn_combine's
   math; compares O and lse with a float64 reference (exact in float64: errors ~1e-15).
3. Fragments: emulates ldmatrix(.trans).x4 and mma.m16n8k16 per the PTX ISA fragment layouts with attn_dec's
   address expressions (sQ_lane, k_lane_off, v_lane_off, stage offsets) and its P packing: S = Q K^T and
   O = P V for MI 1 and 2, and that every (row, column) of the merge buffer has exactly one writer.
"""
# ruff: noqa: B023  (the per-lane helper closures are called inside the loop iteration that defines them)
from __future__ import annotations

import itertools
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

KERNELS = Path(__file__).resolve().parents[1]
BN, D, LDS = 32, 128, 136
SHAPES = [  # batch, seqlen_q, seqlen_k, heads_q, heads_kv, causal, workspace given
    (1, 1, 37, 32, 8, 0, 1), (2, 4, 300, 32, 8, 1, 1), (1, 4, 1000, 64, 8, 1, 1), (2, 1, 4133, 64, 8, 0, 1),
    (2, 3, 2, 8, 2, 1, 1), (1, 5, 70, 8, 8, 1, 1), (1, 16, 100, 16, 8, 1, 1), (1, 4, 33, 8, 1, 1, 1),
    (3, 1, 65, 4, 1, 0, 1), (1, 4, 3000, 32, 8, 1, 0), (1, 2, 2100, 16, 8, 1, 1), (1, 1, 1, 32, 8, 0, 1),
    (2, 4, 3, 32, 8, 1, 1), (3, 4, 1000, 16, 4, 1, 1), (96, 1, 1000, 8, 1, 0, 1), (4, 1, 5000, 4, 4, 0, 1),
    (8, 4, 4100, 64, 8, 1, 1), (2, 4, 500, 16, 1, 1, 1),
]
# forced (b, sq, sk, hq, hkv, causal, NW, ST, splits, tiles per split) the model would not pick: splits of one tile,
# so rows see no key in a whole split (lse -inf partials) or a warp sees none (idle or fully masked)
FORCED = [(1, 4, 257, 32, 8, True, 2, 3, 5, 2), (1, 4, 257, 64, 8, True, 2, 3, 9, 1), (2, 4, 258, 32, 8, True, 2, 3, 3, 4),
          (1, 16, 33, 16, 8, True, 2, 3, 2, 1), (1, 4, 200, 32, 8, True, 4, 2, 2, 4)]
HOST = r"""
#include "attn_fast.cu"
#include <cstdio>
int main() {
    int c[7];
    while (scanf("%d %d %d %d %d %d %d", &c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6]) == 7) {
        attn_fwd_params p{}; p.abi_version = 1; p.batch = c[0]; p.seqlen_q = c[1]; p.seqlen_k = c[2];
        p.num_heads_q = c[3]; p.num_heads_kv = c[4]; p.head_dim = 128; p.causal = c[5]; p.num_sms = 132;
        p.q_row_stride = c[3] * 128; p.q_head_stride = 128; p.q_batch_stride = (int64_t)c[1] * c[3] * 128;
        p.k_row_stride = c[4] * 128; p.k_head_stride = 128; p.k_batch_stride = (int64_t)c[2] * c[4] * 128;
        p.v_row_stride = p.k_row_stride; p.v_head_stride = 128; p.v_batch_stride = p.k_batch_stride;
        p.o_row_stride = p.q_row_stride; p.o_head_stride = 128; p.o_batch_stride = p.q_batch_stride;
        Plan pl = make_plan(&p, c[6] != 0);
        printf("%d %d %d %d %d %d %d %d %d %d %d %zu\n", c[0], c[1], c[2], c[3], c[4], c[5], (int)pl.dec,
               pl.num_splits, pl.tiles_per_split, ATTN_DEC_NW, ATTN_DEC_ST, attn_fwd_workspace_bytes(&p));
    }
}
"""


def plans(flags: list[str]) -> list[tuple[int, ...]]:
    """Plans from the real make_plan: rows (b, sq, sk, hq, hkv, causal, dec, splits, tps, NW, ST, ws_bytes)."""
    tmp = Path(tempfile.mkdtemp())
    (tmp / "plan.cu").write_text(HOST)
    exe = tmp / "plan"
    subprocess.run(["nvcc", "-std=c++17", "-DATTN_DECODE=1", *flags, f"-I{KERNELS}", "-gencode=arch=compute_90a,code=sm_90a",
                    "-o", str(exe), str(tmp / "plan.cu")], check=True)
    out = subprocess.run([str(exe)], input="\n".join(" ".join(map(str, s)) for s in SHAPES), capture_output=True,
                         text=True, check=True).stdout
    return [tuple(int(x) for x in ln.split()) for ln in out.splitlines()]


def emulate(b, sq, sk, hq, hkv, causal, NW, ST, num_splits, tps, rng):
    """attn_dec + combine on random data; returns (max |o - ref|, max |lse - ref|) over finite lse."""
    group = hq // hkv
    G, R, num_hb = group, group * sq, hq // group
    MI = 1 if R <= 16 else 2
    RP = 16 * MI
    q = rng.standard_normal((b, sq, hq, D))
    k = rng.standard_normal((b, sk, hkv, D))
    v = rng.standard_normal((b, sk, hkv, D))
    scale = D ** -0.5
    sl2 = scale * 1.4426950408889634
    n_wt = (sk + BN - 1) // BN
    assert num_splits == (n_wt + tps - 1) // tps
    off = sk - sq
    partial = num_splits > 1
    o_part = np.full((num_splits, b, hq, sq, D), np.nan)
    lse_part = np.full((num_splits, b, hq, sq), np.nan)
    o_fin = np.full((b, sq, hq, D), np.nan)
    lse_fin = np.full((b, hq, sq), np.nan)
    for bh, split in itertools.product(range(b * num_hb), range(num_splits)):
        bb, hb = divmod(bh, num_hb)
        kvh = (hb * G) // group
        t_beg = split * tps
        t_cnt = min(tps, n_wt - t_beg)
        mask_from = min(sk, off + 1) if causal else sk
        sQ = np.zeros((RP, D))
        for row in range(R):
            sQ[row] = q[bb, row % sq, hb * G + row // sq]

        def row_limit(r):
            rc = r if r < R else R - 1
            return min(sk, rc % sq + off + 1) if causal else sk
        sM, sL, Ow = np.zeros((NW, 32)), np.zeros((NW, 32)), np.zeros((NW, RP, D))
        for warp in range(NW):
            my_n = (t_cnt - warp + NW - 1) // NW if t_cnt > warp else 0
            ring = np.full((ST, 2, BN, D), np.nan)
            held = {}

            def load_tile(j, stage):
                n0 = (t_beg + warp + j * NW) * BN
                for lane in range(32):
                    ch, r0 = lane & 15, lane >> 4
                    for jj in range(BN // 2):
                        key, row = n0 + r0 + 2 * jj, r0 + 2 * jj
                        for kv, src in ((0, k), (1, v)):
                            ring[stage, kv, row, ch * 8:ch * 8 + 8] = src[bb, key, kvh, ch * 8:ch * 8 + 8] if key < sk else 0.0
                held[j] = stage
            for s in range(ST - 1):
                if s < my_n:
                    load_tile(s, s)
            m_run, l_run, o = np.full(RP, -np.inf), np.zeros(RP), np.zeros((RP, D))
            rd, wr = 0, ST - 1
            for it in range(my_n):
                if it + ST - 1 < my_n:
                    assert wr != rd, "prefetch into the stage being read"
                    load_tile(it + ST - 1, wr)
                wr = 0 if wr + 1 == ST else wr + 1
                assert held[it] == rd, "tile it is not in the read stage"
                n0 = (t_beg + warp + it * NW) * BN
                Kt, Vt = ring[rd, 0], ring[rd, 1]
                assert not np.isnan(Kt).any() and not np.isnan(Vt).any()
                rd = 0 if rd + 1 == ST else rd + 1
                S = sQ @ Kt.T
                lims = np.array([row_limit(r) for r in range(RP)])
                if n0 + BN > mask_from:
                    S[np.arange(n0, n0 + BN)[None, :] >= lims[:, None]] = -np.inf
                else:
                    assert (n0 + BN <= lims).all(), "mask skipped on a tile that needs it"
                for r in range(RP):
                    mx = max(m_run[r], S[r].max())
                    ms = 0.0 if mx == -np.inf else mx * sl2
                    alpha = 1.0 if mx == m_run[r] else 2.0 ** (m_run[r] * sl2 - ms)
                    m_run[r] = mx
                    e = 2.0 ** (S[r] * sl2 - ms)
                    l_run[r] = l_run[r] * alpha + e.sum()
                    o[r] = o[r] * alpha + e @ Vt
            sM[warp, :RP] = np.where(m_run == -np.inf, -np.inf, m_run * sl2)
            sL[warp, :RP] = l_run
            Ow[warp] = o

        def row_ml(row):
            M = sM[:, row].max()
            L = sum(2.0 ** (sM[w, row] - M) * sL[w, row] for w in range(NW) if sM[w, row] != -np.inf) if M != -np.inf else 0.0
            return M, L
        sO = np.zeros((NW, RP, D))
        for warp, row in itertools.product(range(NW), range(RP)):
            M, L = row_ml(row)
            mw = sM[warp, row]
            sO[warp, row] = Ow[warp, row] * (0.0 if (mw == -np.inf or not L > 0) else 2.0 ** (mw - M) / L)
        for row in range(R):
            acc = sO[:, row].sum(0)
            h, i = hb * G + row // sq, row % sq
            M, L = row_ml(row)
            lse = (M + math.log2(L)) * math.log(2) if L > 0 else (-np.inf if partial else np.inf)
            if partial:
                assert np.isnan(lse_part[split, bb, h, i]), "row written twice"
                o_part[split, bb, h, i], lse_part[split, bb, h, i] = acc, lse
            else:
                assert np.isnan(lse_fin[bb, h, i]), "row written twice"
                o_fin[bb, i, h], lse_fin[bb, h, i] = acc, lse
    if partial:  # attn_combine / attn_combine_dec
        for bb, h, i in itertools.product(range(b), range(hq), range(sq)):
            ls = lse_part[:, bb, h, i]
            mx = ls.max()
            ssum = np.exp(ls - mx).sum() if mx != -np.inf else 0.0
            lse = np.inf if not ssum > 0 else mx + math.log(ssum)
            lse_fin[bb, h, i] = lse
            acc = np.zeros(D)
            if ssum > 0:
                for sp in range(num_splits):
                    acc += (0.0 if ls[sp] == -np.inf else math.exp(ls[sp] - lse)) * o_part[sp, bb, h, i]
            o_fin[bb, i, h] = acc
    assert not np.isnan(o_fin).any() and not np.isnan(lse_fin).any(), "unwritten output"
    ref_o, ref_l = np.zeros_like(o_fin), np.zeros_like(lse_fin)
    for bb, h, i in itertools.product(range(b), range(hq), range(sq)):
        lim = min(sk, i + sk - sq + 1) if causal else sk
        if lim <= 0:
            ref_l[bb, h, i] = np.inf
            continue
        s = scale * (k[bb, :lim, h // group] @ q[bb, i, h])
        p = np.exp(s - s.max())
        ref_l[bb, h, i] = s.max() + math.log(p.sum())
        ref_o[bb, i, h] = (p / p.sum()) @ v[bb, :lim, h // group]
    fin = np.isfinite(ref_l)
    assert (np.isfinite(lse_fin) == fin).all(), "lse finiteness"
    return float(np.abs(o_fin - ref_o).max()), float(np.abs(lse_fin[fin] - ref_l[fin]).max()) if fin.any() else 0.0


def ldm_x4(smem, addr, trans=False):
    """ldmatrix .x4: lane l gives row l % 8 of matrix l // 8; returns regs[t][i] = (lo, hi) of matrix i."""
    mats = [np.array([smem[addr(8 * i + r): addr(8 * i + r) + 8] for r in range(8)]) for i in range(4)]
    mats = [m.T if trans else m for m in mats]
    return [[(m[t // 4, 2 * (t % 4)], m[t // 4, 2 * (t % 4) + 1]) for m in mats] for t in range(32)]


def mma(c, a, b0, b1):
    """mma.m16n8k16 row.col: A regs a0 (g, 2t4), a1 (g+8, 2t4), a2 (g, 8+2t4), a3 (g+8, 8+2t4); B b0 (k 2t4, n g),
    b1 (k 8+2t4, n g); C c0 c1 (g, 2t4..), c2 c3 (g+8, 2t4..)."""
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for t in range(32):
        g, t4 = divmod(t, 4)
        A[g, 2 * t4:2 * t4 + 2], A[g + 8, 2 * t4:2 * t4 + 2] = a[t][0], a[t][1]
        A[g, 8 + 2 * t4:10 + 2 * t4], A[g + 8, 8 + 2 * t4:10 + 2 * t4] = a[t][2], a[t][3]
        B[2 * t4:2 * t4 + 2, g], B[8 + 2 * t4:10 + 2 * t4, g] = b0[t], b1[t]
    C = A @ B
    for t in range(32):
        g, t4 = divmod(t, 4)
        c[t][0] += C[g, 2 * t4]; c[t][1] += C[g, 2 * t4 + 1]; c[t][2] += C[g + 8, 2 * t4]; c[t][3] += C[g + 8, 2 * t4 + 1]


def fragments(rng) -> None:
    for MI in (1, 2):
        RP, ST, NW, warp, rd = 16 * MI, 3, 2, 1, 2
        NS, KD, NO = BN // 8, D // 16, D // 8
        Q, K, V = (rng.standard_normal((n, D)) for n in (RP, BN, BN))
        sQ, sKV = np.full(RP * LDS, np.nan), np.full(NW * ST * 2 * BN * LDS, np.nan)
        st = warp * ST * 2 * BN * LDS + rd * 2 * BN * LDS
        for r in range(RP):
            sQ[r * LDS:r * LDS + D] = Q[r]
        for r in range(BN):
            sKV[st + r * LDS:st + r * LDS + D] = K[r]
            sKV[st + (BN + r) * LDS:st + (BN + r) * LDS + D] = V[r]
        sQ_lane = lambda l: (l & 15) * LDS + (l >> 4) * 8                          # noqa: E731
        k_lane_off = lambda l: ((l & 7) + (l >> 4) * 8) * LDS + ((l >> 3) & 1) * 8  # noqa: E731
        v_lane_off = lambda l: (l & 15) * LDS + (l >> 4) * 8                        # noqa: E731
        sc = [[[[0.0] * 4 for _ in range(32)] for _ in range(NS)] for _ in range(MI)]
        for kk in range(KD):
            a = [ldm_x4(sQ, lambda l, mi=mi: sQ_lane(l) + mi * 16 * LDS + kk * 16) for mi in range(MI)]
            for np_ in range(NS // 2):
                bb = ldm_x4(sKV, lambda l: st + k_lane_off(l) + np_ * 16 * LDS + kk * 16)
                for mi in range(MI):
                    mma(sc[mi][2 * np_], a[mi], [x[0] for x in bb], [x[1] for x in bb])
                    mma(sc[mi][2 * np_ + 1], a[mi], [x[2] for x in bb], [x[3] for x in bb])
        S = np.zeros((RP, BN))
        for mi, n, t in itertools.product(range(MI), range(NS), range(32)):
            g, t4 = divmod(t, 4)
            S[mi * 16 + g, n * 8 + 2 * t4:n * 8 + 2 * t4 + 2] = sc[mi][n][t][0:2]
            S[mi * 16 + g + 8, n * 8 + 2 * t4:n * 8 + 2 * t4 + 2] = sc[mi][n][t][2:4]
        assert np.allclose(S, Q @ K.T), f"S fragments (MI {MI})"
        pf = [[[[None] * 4 for _ in range(32)] for _ in range(BN // 16)] for _ in range(MI)]
        for mi, n, t, rr in itertools.product(range(MI), range(NS), range(32), range(2)):
            pf[mi][n >> 1][t][(n & 1) * 2 + rr] = (sc[mi][n][t][2 * rr], sc[mi][n][t][2 * rr + 1])  # P := S
        o = [[[[0.0] * 4 for _ in range(32)] for _ in range(NO)] for _ in range(MI)]
        for kk in range(BN // 16):
            for dp in range(D // 16):
                bb = ldm_x4(sKV, lambda l: st + BN * LDS + v_lane_off(l) + kk * 16 * LDS + dp * 16, trans=True)
                for mi in range(MI):
                    mma(o[mi][2 * dp], pf[mi][kk], [x[0] for x in bb], [x[1] for x in bb])
                    mma(o[mi][2 * dp + 1], pf[mi][kk], [x[2] for x in bb], [x[3] for x in bb])
        O = np.zeros((RP, D))
        cover = np.zeros((RP, D), int)
        for mi, n, t in itertools.product(range(MI), range(NO), range(32)):
            g, t4 = divmod(t, 4)
            for rr in range(2):
                O[mi * 16 + g + 8 * rr, n * 8 + 2 * t4:n * 8 + 2 * t4 + 2] = o[mi][n][t][2 * rr:2 * rr + 2]
                cover[mi * 16 + g + 8 * rr, n * 8 + 2 * t4:n * 8 + 2 * t4 + 2] += 1
        assert np.allclose(O, S @ V), f"O fragments (MI {MI})"
        assert (cover == 1).all(), "merge buffer: one writer per element"
        print(f"fragments MI={MI}: S = Q K^T, O = P V, merge-buffer ownership OK", flush=True)


def main() -> None:
    flags = [a for a in sys.argv[1:] if a.startswith("-D")]
    rng = np.random.default_rng(0)
    fragments(rng)
    bad = 0
    for (b, sq, sk, hq, hkv, causal, dec, ns, tps, nw, st, ws) in plans(flags):
        tag = f"b{b} sq{sq} sk{sk} h{hq}x{hkv} {'causal' if causal else 'full'}: splits {ns} x {tps} tiles, NW {nw} ST {st}, ws {ws} B"
        if not dec:
            print(f"{tag}: not on attn_dec (R = {hq // hkv * sq})", flush=True)
            continue
        eo, el = emulate(b, sq, sk, hq, hkv, bool(causal), nw, st, ns, tps, rng)
        ok = eo < 1e-9 and el < 1e-9
        bad += not ok
        print(f"{tag}: max|o-ref| {eo:.1e} max|lse-ref| {el:.1e} {'OK' if ok else 'BAD'}", flush=True)
    for (b, sq, sk, hq, hkv, causal, nw, st, ns, tps) in FORCED:
        eo, el = emulate(b, sq, sk, hq, hkv, causal, nw, st, ns, tps, rng)
        ok = eo < 1e-9 and el < 1e-9
        bad += not ok
        print(f"forced b{b} sq{sq} sk{sk} h{hq}x{hkv} causal={causal}: splits {ns} x {tps} tiles, NW {nw} ST {st}: "
              f"max|o-ref| {eo:.1e} max|lse-ref| {el:.1e} {'OK' if ok else 'BAD'}", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
