"""CPU emulation of the online-softmax arithmetic of attn_fast v1 / v2 / v3 and attn_original (issue 7).

Development evidence for kernels/campaigns/fast-kernel/README.md, not part of the harness. Emulates, in
float32 with the kernels' operation order (numpy; fp32 FMA = float64 product/sum rounded once to fp32, exact
here because the operands are fp32), one head of the harness's ``large_logits`` draw (q, k ~ 6 N(0,1) in
fp16/bf16, v ~ N(0,1), softmax_scale = factor / sqrt(d)) for ``rows`` query rows over ``seqlen_k`` keys:

* original: s2 = fl(s * sl2), m in log2 units, alpha = exp2(m_old - m_new) (0 exactly when equal), 64-key tiles.
* v1: raw-score max, ms = fl(m * sl2), alpha = ex2(FFMA(m_old, sl2, -ms)) (ptxas contracts the PTX
  ``mul.f32; sub.f32`` into one FFMA, so the argument is the rounding residual of m_old * sl2, not 0, when the
  max did not grow), l *= alpha and o *= alpha always (consistent).
* v2: same alpha, l *= alpha always, but o *= alpha only when some row of the warp got a larger max
  (``__any_sync(mx != m_old)``): l and o drift apart by alpha^N.
* v2_nofma: v2 without the FFMA contraction (alpha argument fl(m_old*sl2) - fl(mx*sl2) = 0 when equal):
  what the v2 desk check (float64) effectively verified.
* v3: alpha = 1 exactly when the max did not grow (select), o rescale skipped iff every alpha of the warp is
  exactly 1.0f: skipping is then bit-identical to multiplying.

P is rounded to the dtype before PV (all versions); o accumulates in fp32; out = o / l rounded to the dtype.
Usage: ``python emulate_lazy_rescale.py [--seqlen 16384] [--d 128] [--rows 256] [--dtype fp16]``.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

F32 = np.float32


def f32(x: np.ndarray) -> np.ndarray:
    """Round float64 values to fp32 (one rounding)."""
    return np.asarray(x, dtype=np.float64).astype(F32)


def to_dtype(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round to fp16 / bf16 (RNE) and return as float64."""
    t = torch.from_numpy(np.asarray(x, dtype=np.float32))
    t = t.to(torch.float16 if dtype == "fp16" else torch.bfloat16)
    return t.to(torch.float64).numpy()


def ex2(x: np.ndarray) -> np.ndarray:
    """ex2.approx.ftz.f32 stand-in: exp2 rounded to fp32 (ex2(+-0) = 1 exactly, as the PTX ISA specifies)."""
    return f32(np.exp2(np.asarray(x, dtype=np.float64)))


def emulate(variant: str, s: np.ndarray, v: np.ndarray, sl2: F32, sub: int, warp_rows: int,
            dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """One kernel's online softmax over the raw fp32 scores ``s [rows, sk]`` and ``v [sk, d]`` (float64 holding
    dtype values), key sub-tiles of ``sub`` keys, lazy skip decided per ``warp_rows`` rows.
    Returns (out [rows, d] as dtype values in float64, number of o rescales skipped per row)."""
    rows, sk = s.shape
    d = v.shape[1]
    m = np.full(rows, -np.inf, dtype=F32)
    l = np.zeros(rows, dtype=F32)
    o = np.zeros((rows, d), dtype=F32)
    skipped = np.zeros(rows, dtype=np.int64)
    sl2_64 = np.float64(sl2)
    for c0 in range(0, sk, sub):
        st = s[:, c0:c0 + sub]
        if variant == "original":
            s2 = f32(st.astype(np.float64) * sl2_64)
            mx = np.maximum(m, s2.max(axis=1))
            mu = np.where(mx == -np.inf, F32(0), mx)
            p = ex2(s2.astype(np.float64) - mu[:, None])  # exp2f(s2 - m): exact difference of fp32 values
            alpha = ex2(m.astype(np.float64) - mu)  # m_old - m_new: 0 when equal -> exactly 1
        else:
            mx = np.maximum(m, st.max(axis=1))
            ms = np.where(mx == -np.inf, F32(0), f32(mx.astype(np.float64) * sl2_64))
            # FFMA(m_old, sl2, -ms): exact product, one rounding (the fp32 operands make float64 exact here)
            if variant == "v2_nofma":  # what v2 meant: fl(m_old * sl2) - fl(mx * sl2), 0 when equal
                arg = f32(f32(m.astype(np.float64) * sl2_64).astype(np.float64) - ms.astype(np.float64))
            else:
                arg = f32(m.astype(np.float64) * sl2_64 - ms.astype(np.float64))
            alpha = ex2(arg)
            if variant == "v3":
                alpha = np.where(mx == m, F32(1), alpha)
            p = ex2(f32(st.astype(np.float64) * sl2_64 - ms[:, None].astype(np.float64)))
        rs = f32(p.astype(np.float64).sum(axis=1))
        l = f32(l.astype(np.float64) * alpha + rs)
        if variant in ("original", "v1"):
            o = f32(o.astype(np.float64) * alpha[:, None])
        else:
            if variant in ("v2", "v2_nofma"):
                row_flag = mx != m
            else:  # v3: rescale iff some alpha of the warp is not exactly 1
                row_flag = alpha != F32(1)
            warp_flag = row_flag.reshape(-1, warp_rows).any(axis=1).repeat(warp_rows)
            o = np.where(warp_flag[:, None], f32(o.astype(np.float64) * alpha[:, None]), o)
            skipped += (~warp_flag) & (alpha != F32(1))
        m = mx
        pq = to_dtype(p, dtype)
        o = f32(o.astype(np.float64) + pq @ v[c0:c0 + sub])
    out = to_dtype(f32(o.astype(np.float64) / l[:, None].astype(np.float64)), dtype)
    return out, skipped


def main() -> None:
    """Run the emulation and print max errors, tolerance (harness rule) and the l/o drift per variant."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqlen", type=int, default=16384)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--dtype", default="fp16")
    ap.add_argument("--scale-factor", type=float, default=1.0)
    ap.add_argument("--kind", default="large_logits")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    # harness/worker.py fill_inputs: large_logits q, k ~ 6 N(0,1); shifted q, k ~ N(0,1) + 1
    mult = 6.0 if a.kind == "large_logits" else 1.0
    shift = 1.0 if a.kind == "shifted" else 0.0
    q = to_dtype(to_dtype(rng.standard_normal((a.rows, a.d)), a.dtype) * mult + shift, a.dtype)
    k = to_dtype(to_dtype(rng.standard_normal((a.seqlen, a.d)), a.dtype) * mult + shift, a.dtype)
    v = to_dtype(rng.standard_normal((a.seqlen, a.d)), a.dtype)
    scale = a.scale_factor / np.sqrt(a.d)
    sl2 = F32(scale * np.log2(np.e))
    s = f32(q @ k.T)  # mma: fp32 accumulation of exact fp16 products (order effects ignored)
    z = (q @ k.T) * scale
    z -= z.max(axis=1, keepdims=True)
    w = np.exp(z)
    ref = (w @ v) / w.sum(axis=1, keepdims=True)
    scale_o = max(1.0, float(np.abs(ref).max()))
    # v1 d128: 8 warps x 16 rows, 64-key tiles; v2 d128: 4 warps x 32 rows, 32-key sub-tiles; d256: 8 x 16, 64 keys
    sub, warp_rows = (32, 32) if a.d == 128 else (64, 16)
    res = {"original": emulate("original", s, v, sl2, 64, 16, a.dtype)}
    res["v1"] = emulate("v1", s, v, sl2, 64, 16, a.dtype)
    res["v2"] = emulate("v2", s, v, sl2, sub, warp_rows, a.dtype)
    res["v2_nofma"] = emulate("v2_nofma", s, v, sl2, sub, warp_rows, a.dtype)
    res["v3"] = emulate("v3", s, v, sl2, sub, warp_rows, a.dtype)
    err_orig = float(np.abs(res["original"][0] - ref).max())
    tol = 2 * err_orig + 1e-4 * scale_o
    print(f"{a.kind} {a.dtype} d{a.d} sk{a.seqlen} rows{a.rows} scale_factor {a.scale_factor}: "
          f"max|ref| {scale_o:.3f}, tol_o (2 x original + floor) {tol:.5f}")
    for name, (out, skipped) in res.items():
        err = float(np.abs(out - ref).max())
        big = np.abs(ref) > 0.5
        row_ratio = np.array([np.median(out[i][big[i]] / ref[i][big[i]]) for i in range(ref.shape[0]) if big[i].any()])
        drift = float(np.abs(row_ratio - 1).max()) if row_ratio.size else 0.0
        print(f"  {name:8s} max|o - ref| {err:.5f} {'FAIL' if err > tol else 'pass'}  max_row |median(o/ref) - 1| "
              f"{drift:.2e}  "
              f"o rescales skipped with alpha != 1: mean {skipped.mean():.1f}, max {skipped.max()}")
    # the per-step residual: e = m*sl2 - fl(m*sl2) for the final max of each row
    mfin = s.max(axis=1).astype(np.float64)
    e = mfin * np.float64(sl2) - f32(mfin * np.float64(sl2)).astype(np.float64)
    print(f"  |m*sl2| median {np.median(np.abs(mfin * float(sl2))):.1f}; residual e = m*sl2 - fl(m*sl2): "
          f"max |e| {np.abs(e).max():.3g} (ulp/2 of m*sl2), per skipped step l/o drifts by 2^e - 1 ~ e*ln2")


if __name__ == "__main__":
    main()
