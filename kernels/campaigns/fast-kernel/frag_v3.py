# Lane-level emulation (PTX ISA semantics) of one warp of attn_fast_v3.cu's main loop (copied from the v2
# desk check /tmp/emu2/frag_v2.py; frag.py is the v1 desk check's PTX ldmatrix/mma layout model).
# v3 additions: rule='v3' (alpha = 1 when the max did not grow, skip iff every alpha of the warp == 1) vs
# rule='v2' (alpha = ex2(m_old*sl2 - ms) always, skip iff no max grew); resid = the FFMA contraction
# residual that the real kernel adds to the alpha argument when m_old and mx are finite (float64 alone never
# shows it: m*sl2 - fl(m*sl2) is 0 here, which is why the v2 desk check passed).
# Same emulation otherwise:
# KSUB sub-tiles per 64-key tile, S = Q K^T with K ldmatrix at key offset c0, mask, online softmax with
# P packed as pf[mi][n>>1][(n&1)*2+rr] = pack(e0,e1), O += P V with V ldmatrix.trans at key offset c0,
# epilogue normalisation and lse.  Compared with a float64 softmax(QK^T*scale [+causal mask]) V.
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from frag import ldmatrix_x4, mma  # PTX layouts (checked by the v1 desk check)

rng = np.random.default_rng(1)

def run(D, MI, KSUB, sq, sk, causal, warp=1, bad=None, BN=64, lazy=None, rule='v3', resid=0.0, seed=None,
        nwarps=None, skip=False):
    global rng
    if seed is not None:  # same inputs for the lazy / eager comparison
        rng = np.random.default_rng(seed)
    lazy = KSUB > 1 if lazy is None else lazy  # v3: lazy on the sub-tiled d128 shape only
    LDS = D + 8; WM = 16 * MI; BM = WM * (warp + 1 if nwarps is None else nwarps)
    SUBN = BN // KSUB; NS = SUBN // 8; KD = D // 16; NO = D // 8
    scale = D ** -0.5; sl2 = scale * np.log2(np.e)
    Q = rng.standard_normal((sq, D)); K = rng.standard_normal((sk, D)); V = rng.standard_normal((sk, D))
    m0 = 0; off = sk - sq; R = sq
    lanes = np.arange(32); g = lanes >> 2; t4 = lanes & 3
    sQ = np.zeros(BM * LDS)
    for r in range(min(BM, sq)): sQ[r * LDS:r * LDS + D] = Q[r]
    sQ_warp = (warp * WM + (lanes & 15)) * LDS + (lanes >> 4) * 8
    k_lane_off = ((lanes & 7) + (lanes >> 4) * 8) * LDS + ((lanes >> 3) & 1) * 8
    v_lane_off = (lanes & 15) * LDS + (lanes >> 4) * 8
    if bad == 'pf': pass
    def row_limit(mi, rr):
        r = m0 + warp * WM + mi * 16 + g + rr * 8
        rc = np.where(r < R, r, R - 1)
        return np.minimum(sk, rc % sq + off + 1) if causal else np.full(32, sk)
    r_hi = min(m0 + BM, R) - 1
    i_min, i_max = m0 % sq, r_hi % sq
    n_end = min(sk, i_max + off + 1) if causal else sk
    mask_from = min(sk, i_min + off + 1) if causal else sk
    o_acc = np.zeros((MI, NO, 32, 4)); m_run = np.full((MI, 2, 32), -np.inf); l_run = np.zeros((MI, 2, 32))
    n_tiles = (n_end + BN - 1) // BN
    # v3 causal warp skip: largest key limit over the warp's rows (the kernel's shuffle max over 32 lanes)
    warp_lim = max(int(row_limit(mi, rr).max()) for mi in range(MI) for rr in range(2)) if causal else sk
    run.skipped = 0
    for it in range(n_tiles):
        n0 = it * BN
        sK = np.zeros(BN * LDS); sV = np.zeros(BN * LDS)
        for r in range(BN):
            if n0 + r < sk: sK[r * LDS:r * LDS + D] = K[n0 + r]; sV[r * LDS:r * LDS + D] = V[n0 + r]
        for hs in range(KSUB):
            c0 = hs * SUBN
            if skip and n0 + c0 >= warp_lim:
                run.skipped += 1
                continue
            sc = np.zeros((MI, NS, 32, 4))
            for kk in range(KD):
                a = [ldmatrix_x4(sQ, sQ_warp + mi * 16 * LDS + kk * 16, False) for mi in range(MI)]
                for np_ in range(NS // 2):
                    cc = c0 if bad != 'c0k' else 0
                    b = ldmatrix_x4(sK, k_lane_off + (cc + np_ * 16) * LDS + kk * 16, False)
                    for mi in range(MI):
                        sc[mi, 2 * np_] = mma(sc[mi, 2 * np_], a[mi], b[:, 0:2])
                        sc[mi, 2 * np_ + 1] = mma(sc[mi, 2 * np_ + 1], a[mi], b[:, 2:4])
            if n0 + c0 + SUBN > mask_from:
                for mi in range(MI):
                    lim0, lim1 = row_limit(mi, 0), row_limit(mi, 1)
                    for n in range(NS):
                        col = n0 + c0 + n * 8 + 2 * t4
                        sc[mi, n, col >= lim0, 0] = -np.inf; sc[mi, n, col + 1 >= lim0, 1] = -np.inf
                        sc[mi, n, col >= lim1, 2] = -np.inf; sc[mi, n, col + 1 >= lim1, 3] = -np.inf
            pf = np.zeros((MI, SUBN // 16, 32, 4, 2)); alpha_v = np.zeros((MI, 2, 32)); grew = np.zeros(32, bool)
            for mi in range(MI):
                for rr in range(2):
                    mx = m_run[mi, rr].copy()
                    for n in range(NS): mx = np.maximum(mx, np.maximum(sc[mi, n, :, 2 * rr], sc[mi, n, :, 2 * rr + 1]))
                    mx = mx.reshape(8, 4).max(1).repeat(4)  # quad_max (lanes 4g..4g+3)
                    ms = np.where(mx == -np.inf, 0.0, mx * sl2)
                    with np.errstate(invalid='ignore'):
                        arg = m_run[mi, rr] * sl2 - ms
                        arg = np.where(np.isfinite(m_run[mi, rr]) & np.isfinite(mx), arg + resid, arg)
                        alpha = np.exp2(arg)
                    if rule == 'v3':
                        alpha = np.where(mx == m_run[mi, rr], 1.0, alpha)
                        grew |= alpha != 1.0
                    else:
                        grew |= mx != m_run[mi, rr]
                    alpha_v[mi, rr] = alpha
                    m_run[mi, rr] = mx
                    rs = np.zeros(32)
                    for n in range(NS):
                        e0 = np.exp2(sc[mi, n, :, 2 * rr] * sl2 - ms); e1 = np.exp2(sc[mi, n, :, 2 * rr + 1] * sl2 - ms)
                        rs += e0 + e1
                        slot = (n & 1) * 2 + rr if bad != 'pf' else (n & 1) + 2 * rr
                        pf[mi, n >> 1, :, slot, 0] = e0; pf[mi, n >> 1, :, slot, 1] = e1
                    l_run[mi, rr] = l_run[mi, rr] * alpha + rs
                    if not lazy:
                        for n in range(NO): o_acc[mi, n, :, 2 * rr] *= alpha; o_acc[mi, n, :, 2 * rr + 1] *= alpha
            if lazy and (grew.any() if bad != 'lazy' else False):  # __any_sync over the warp
                for mi in range(MI):
                    for rr in range(2):
                        for n in range(NO): o_acc[mi, n, :, 2 * rr] *= alpha_v[mi, rr]; o_acc[mi, n, :, 2 * rr + 1] *= alpha_v[mi, rr]
            for kk in range(SUBN // 16):
                for dp in range(D // 16):
                    cc = c0 if bad != 'c0v' else 0
                    b = ldmatrix_x4(sV, v_lane_off + (cc + kk * 16) * LDS + dp * 16, True)
                    for mi in range(MI):
                        o_acc[mi, 2 * dp] = mma(o_acc[mi, 2 * dp], pf[mi, kk], b[:, 0:2])
                        o_acc[mi, 2 * dp + 1] = mma(o_acc[mi, 2 * dp + 1], pf[mi, kk], b[:, 2:4])
    # epilogue
    O = np.zeros((WM, D)); lse = np.zeros(WM)
    for mi in range(MI):
        for rr in range(2):
            l = l_run[mi, rr].reshape(8, 4).sum(1).repeat(4)
            inv = np.where(l > 0, 1 / np.where(l > 0, l, 1), 0.0)
            lv = np.where(l > 0, (m_run[mi, rr] * sl2 + np.log2(np.where(l > 0, l, 1))) * np.log(2), np.inf)
            for n in range(NO):
                for ln in range(32):
                    row = mi * 16 + g[ln] + rr * 8
                    O[row, n * 8 + 2 * t4[ln]:n * 8 + 2 * t4[ln] + 2] = o_acc[mi, n, ln, 2 * rr:2 * rr + 2] * inv[ln]
                    lse[row] = lv[ln]
    run.last_O = O.copy()
    # reference for the warp's rows
    rows = np.arange(warp * WM, warp * WM + WM)
    ok = True
    for j, i in enumerate(rows):
        if i >= sq: continue
        s = Q[i] @ K.T * scale
        if causal: s[np.arange(sk) > i + off] = -np.inf
        if np.all(s == -np.inf):
            ok &= np.all(O[j] == 0) and lse[j] == np.inf; continue
        m = s.max(); p = np.exp(s - m); ref = p @ V / p.sum(); ref_lse = m + np.log(p.sum())
        ok &= np.allclose(O[j], ref, atol=1e-9) and abs(lse[j] - ref_lse) < 1e-9
    return ok

cases = [(128, 2, 2, 200, 200, False), (128, 2, 2, 200, 200, True), (128, 2, 2, 77, 300, True),
         (128, 2, 2, 150, 40, True), (128, 2, 1, 130, 190, True), (64, 2, 1, 100, 170, True),
         (256, 1, 1, 64, 100, True), (96, 2, 1, 90, 129, True), (128, 2, 2, 64, 17, False)]
for c in cases:
    r = run(*c); print('ok' if r else 'FAIL', c); assert r
for c in [(128, 2, 1, 130, 190, True), (64, 2, 1, 100, 170, False)]:
    r = run(*c, lazy=True); print('ok lazy' if r else 'FAIL lazy', c); assert r
# causal sq > sk (rows with no key keep m = -inf: v3 gives them alpha = 1, never a forced rescale), lazy on
# the 8 x 16 shapes too (ATTN_LAZY_WIDE=1), and the FFMA residual: v3 exact, v2 drifts (the GPU failure).
# With a residual, eager (v1) and lazy results carry the same small error (the old sums are rebased by
# 2^(r_old) once per max growth); the lazy skip must not add to it: v3 lazy == v3 eager bit for bit,
# v2 lazy != v2 eager (its l got alpha^N that o never saw).
for c in [(128, 2, 2, 150, 40, True), (128, 2, 2, 64, 1000, False), (128, 2, 2, 300, 1000, True),
          (256, 1, 1, 64, 700, True)]:
    outs = {}
    for rule in ('v3', 'v2'):
        for lz in (True, False):
            run(*c, lazy=lz, resid=1e-6, rule=rule, seed=7); outs[rule, lz] = run.last_O
    d3 = np.abs(outs['v3', True] - outs['v3', False]).max(); d2 = np.abs(outs['v2', True] - outs['v2', False]).max()
    print(f'FFMA residual 1e-6 {c}: max|lazy - eager| v3 {d3:.3g} (must be 0), v2 {d2:.3g}')
    assert d3 == 0.0
    if c[4] >= 700:
        assert d2 > 1e-7
# Causal warp skip: a warp that is not the block's last skips the sub-tiles past its rows' key limits;
# results must be bit-identical to processing them (and match the float64 reference).
for c, w, nw in [((128, 2, 2, 128, 128, True), 1, 4), ((128, 2, 2, 128, 128, True), 0, 4),
                 ((128, 2, 2, 100, 300, True), 0, 4), ((64, 2, 1, 128, 128, True), 1, 4),
                 ((256, 1, 1, 128, 128, True), 2, 8), ((128, 2, 2, 140, 40, True), 1, 4),
                 ((128, 2, 2, 128, 128, False), 1, 4)]:
    outs = []
    for sk_ in (False, True):
        ok = run(*c, warp=w, nwarps=nw, skip=sk_, seed=11); outs.append(run.last_O); assert ok, (c, w, sk_)
    print(f'causal warp skip {c} warp {w}/{nw}: {run.skipped} sub-tiles skipped, bit-identical: '
          f'{np.array_equal(outs[0], outs[1])}')
    assert np.array_equal(outs[0], outs[1])
    assert run.skipped > 0 or not c[5] or c[3] > c[4]
for bad in ['pf', 'c0k', 'c0v', 'lazy']:
    r = run(128, 2, 2, 100, 200, True, bad=bad); print('mutant', bad, 'detected' if not r else 'NOT DETECTED'); assert not r
print('all good')
