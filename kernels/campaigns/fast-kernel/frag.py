# Fragment-level emulation (PTX ISA semantics) of one warp's S = Q K^T and O += P V in attn_fast.cu.
import numpy as np

rng = np.random.default_rng(0)
def ldmatrix_x4(smem, lane_addr, trans):
    # smem: 1-D array of 16-bit elements; lane_addr[l]: element index of the row start given by lane l.
    # matrix m uses rows addressed by lanes 8m..8m+7; thread l receives (row l//4, cols 2(l%4), +1),
    # with .trans the element at (row 2(l%4)+e, col l//4) of the stored matrix.
    regs = np.zeros((32, 4, 2))
    for m in range(4):
        rows = [smem[lane_addr[8*m + r]: lane_addr[8*m + r] + 8] for r in range(8)]
        M = np.array(rows)  # 8x8 stored matrix
        for l in range(32):
            g, t = l // 4, l % 4
            if not trans: regs[l, m] = M[g, 2*t:2*t+2]
            else: regs[l, m] = [M[2*t, g], M[2*t+1, g]]
    return regs
def mma(C, A, B):
    # C [32][4], A [32][4][2], B [32][2][2] per PTX m16n8k16 layouts -> C += A(16x16) @ B(16x8)
    Am = np.zeros((16, 16)); Bm = np.zeros((16, 8)); Cm = np.zeros((16, 8))
    for l in range(32):
        g, t = l // 4, l % 4
        for e in range(2):
            Am[g, 2*t+e] = A[l][0][e]; Am[g+8, 2*t+e] = A[l][1][e]
            Am[g, 2*t+8+e] = A[l][2][e]; Am[g+8, 2*t+8+e] = A[l][3][e]
            Bm[2*t+e, g] = B[l][0][e]; Bm[2*t+8+e, g] = B[l][1][e]
            Cm[g, 2*t+e] = C[l][e]; Cm[g+8, 2*t+e] = C[l][2+e]
    Dm = Cm + Am @ Bm
    out = np.zeros((32, 4))
    for l in range(32):
        g, t = l // 4, l % 4
        out[l] = [Dm[g, 2*t], Dm[g, 2*t+1], Dm[g+8, 2*t], Dm[g+8, 2*t+1]]
    return out
def check(D, MI, BN=64, warp=1):
    LDS = D + 8; WM = 16*MI; BM = WM*(warp+1)
    Q = rng.standard_normal((BM, D)); K = rng.standard_normal((BN, D)); V = rng.standard_normal((BN, D))
    sQ = np.zeros(BM*LDS); sK = np.zeros(BN*LDS); sV = np.zeros(BN*LDS)
    for r in range(BM): sQ[r*LDS:r*LDS+D] = Q[r]
    for r in range(BN): sK[r*LDS:r*LDS+D] = K[r]; sV[r*LDS:r*LDS+D] = V[r]
    lanes = np.arange(32)
    sQ_warp = (warp*WM + (lanes & 15))*LDS + (lanes >> 4)*8
    k_lane_off = ((lanes & 7) + (lanes >> 4)*8)*LDS + ((lanes >> 3) & 1)*8
    v_lane_off = (lanes & 15)*LDS + (lanes >> 4)*8
    NS, KD, NO = BN//8, D//16, D//8
    sc = np.zeros((MI, NS, 32, 4))
    for kk in range(KD):
        a = [ldmatrix_x4(sQ, sQ_warp + mi*16*LDS + kk*16, False) for mi in range(MI)]
        for np_ in range(NS//2):
            b = ldmatrix_x4(sK, k_lane_off + np_*16*LDS + kk*16, False)
            for mi in range(MI):
                sc[mi, 2*np_] = mma(sc[mi, 2*np_], a[mi], b[:, 0:2])
                sc[mi, 2*np_+1] = mma(sc[mi, 2*np_+1], a[mi], b[:, 2:4])
    # check S
    S_ref = Q[warp*WM:warp*WM+WM] @ K.T
    for mi in range(MI):
        for n in range(NS):
            for l in range(32):
                g, t = l//4, l % 4
                r0 = mi*16 + g; c = n*8 + 2*t
                assert np.allclose(sc[mi, n, l], [S_ref[r0, c], S_ref[r0, c+1], S_ref[r0+8, c], S_ref[r0+8, c+1]])
    # P = S (any values), O = P V via the A-repacking
    o = np.zeros((MI, NO, 32, 4))
    for kk in range(BN//16):
        a = []
        for mi in range(MI):
            A = np.zeros((32, 4, 2))
            A[:, 0] = sc[mi, 2*kk][:, 0:2]; A[:, 1] = sc[mi, 2*kk][:, 2:4]
            A[:, 2] = sc[mi, 2*kk+1][:, 0:2]; A[:, 3] = sc[mi, 2*kk+1][:, 2:4]
            a.append(A)
        for dp in range(D//16):
            b = ldmatrix_x4(sV, v_lane_off + kk*16*LDS + dp*16, True)
            for mi in range(MI):
                o[mi, 2*dp] = mma(o[mi, 2*dp], a[mi], b[:, 0:2])
                o[mi, 2*dp+1] = mma(o[mi, 2*dp+1], a[mi], b[:, 2:4])
    O_ref = S_ref @ V
    # epilogue staging: element (row mi*16+g+8rr, col n*8+2t) <- o[mi][n][2rr], o[mi][n][2rr+1]
    O = np.zeros((WM, D))
    for mi in range(MI):
        for n in range(NO):
            for l in range(32):
                g, t = l//4, l % 4
                for rr in range(2):
                    O[mi*16+g+rr*8, n*8+2*t:n*8+2*t+2] = o[mi, n, l, 2*rr:2*rr+2]
    assert np.allclose(O, O_ref), np.abs(O-O_ref).max()
    print('ok', D, MI)
for D, MI in [(64, 2), (96, 2), (128, 1), (64, 1), (192, 1), (256, 1)]:
    check(D, MI)
