"""The fp32 reference and the correctness checks, on real CPU tensors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from harness.checks import bits_equal, count_poison, error_report, judge, poison_, tolerances
from harness.reference import attention_reference


def _sdpa64(q, k, v, causal: bool):
    """Independent float64 attention via torch SDPA with an explicit bottom-right mask."""
    _, sq, hq, _ = q.shape
    sk, hk = k.shape[1], k.shape[2]
    qq = q.double().permute(0, 2, 1, 3)
    kk = k.double().repeat_interleave(hq // hk, 2).permute(0, 2, 1, 3)
    vv = v.double().repeat_interleave(hq // hk, 2).permute(0, 2, 1, 3)
    mask = torch.ones(sq, sk, dtype=torch.bool)
    if causal:
        mask = torch.ones(sq, sk, dtype=torch.bool).tril(diagonal=sk - sq)
    return F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask).permute(0, 2, 1, 3)


@pytest.mark.parametrize(("sq", "sk", "hq", "hk", "causal"), [(37, 50, 8, 2, True), (50, 37, 4, 4, False),
                                                               (64, 64, 4, 1, True), (1, 33, 2, 2, True)])
def test_reference_matches_float64_sdpa(sq, sk, hq, hk, causal) -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, sq, hq, 64, generator=g)
    k = torch.randn(2, sk, hk, 64, generator=g)
    v = torch.randn(2, sk, hk, 64, generator=g)
    o, lse = attention_reference(q, k, v, causal=causal, chunk_q=16, chunk_heads=3)
    assert o.shape == (2, sq, hq, 64) and lse.shape == (2, hq, sq)
    assert (o.double() - _sdpa64(q, k, v, causal)).abs().max() < 1e-5
    # lse = log sum exp(scale * q.k) over visible keys, checked directly in float64 for one row
    kk = k[0, :, 0 // (hq // hk)].double()
    s = (q[0, sq - 1, 0].double() @ kk.T) / math.sqrt(64)
    assert abs(lse[0, 0, sq - 1].item() - torch.logsumexp(s, 0).item()) < 1e-4


@pytest.mark.parametrize("dv", [32, 256])
def test_reference_takes_v_with_its_own_head_dim(dv: int) -> None:
    """FlashAttention-3's tests use head_dim_v != head_dim (peer-test answers those calls with the reference)."""
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 19, 4, 64, generator=g), torch.randn(2, 23, 2, 64, generator=g)
    v = torch.randn(2, 23, 2, dv, generator=g)
    o, lse = attention_reference(q, k, v, causal=True, chunk_q=8)
    assert o.shape == (2, 19, 4, dv) and lse.shape == (2, 4, 19)
    assert (o.double() - _sdpa64(q, k, v, True)).abs().max() < 1e-5
    with pytest.raises(ValueError, match="incompatible shapes"):
        attention_reference(q, k, v[:, :-1])


def test_reference_rows_without_keys_are_zero_and_inf() -> None:
    q, k, v = torch.randn(1, 9, 2, 64), torch.randn(1, 4, 2, 64), torch.randn(1, 4, 2, 64)
    o, lse = attention_reference(q, k, v, causal=True)  # rows 0..4 see no key (j <= i - 5)
    assert torch.isposinf(lse[:, :, :5]).all() and torch.isfinite(lse[:, :, 5:]).all()
    assert (o[:, :5] == 0).all()


def test_reference_survives_logits_that_overflow_exp() -> None:
    q, k, v = 6 * torch.randn(1, 32, 2, 128), 6 * torch.randn(1, 32, 2, 128), torch.randn(1, 32, 2, 128)
    o, lse = attention_reference(q, k, v)
    assert torch.isfinite(o).all() and torch.isfinite(lse).all()
    assert lse.max() > 88  # exp(88) overflows fp32: a softmax without max-subtraction would break
    assert (o.double() - _sdpa64(q, k, v, False)).abs().max() < 1e-4


def _reference_before_issue3(q, k, v, *, softmax_scale=None, causal=False, chunk_q=1024, chunk_heads=None):
    """harness.reference.attention_reference as it was before issue #3 (logsumexp, exp(s - lse), a full
    causal mask per chunk): an independent fp32 oracle for the rewrite. Copied verbatim but for names."""
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    group = hq // hk
    o = torch.empty((b, sq, hq, d), dtype=torch.float32, device=q.device)
    lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
    if chunk_heads is None:
        budget = (1 << 30) // 4
        chunk_heads = max(1, min(hq, budget // max(1, b * chunk_q * max(sk, 1))))
    offset = sk - sq
    for h0 in range(0, hq, chunk_heads):
        h1 = min(hq, h0 + chunk_heads)
        kv_idx = torch.arange(h0, h1, device=q.device) // group
        kh = k.index_select(2, kv_idx).float().permute(0, 2, 3, 1)
        vh = v.index_select(2, kv_idx).float().permute(0, 2, 1, 3)
        for i0 in range(0, sq, chunk_q):
            i1 = min(sq, i0 + chunk_q)
            qh = q[:, i0:i1, h0:h1].float().permute(0, 2, 1, 3)
            s = torch.matmul(qh, kh) * scale
            if causal:
                rows = torch.arange(i0, i1, device=q.device).unsqueeze(1)
                cols = torch.arange(sk, device=q.device).unsqueeze(0)
                s.masked_fill_(cols > rows + offset, float("-inf"))
            row_lse = torch.logsumexp(s, dim=-1)
            p = torch.exp(s - row_lse.unsqueeze(-1))
            empty = torch.isneginf(row_lse)
            p = torch.where(empty.unsqueeze(-1), torch.zeros_like(p), p)
            o[:, i0:i1, h0:h1] = torch.matmul(p, vh).permute(0, 2, 1, 3)
            lse[:, h0:h1, i0:i1] = torch.where(empty, torch.full_like(row_lse, float("inf")), row_lse)
    return o, lse


def _attention64(q, k, v, scale: float, causal: bool):
    """The definition in float64, written out with no chunking: ``(o, lse, max |logit|)``."""
    sq, hq = q.shape[1], q.shape[2]
    sk, hk = k.shape[1], k.shape[2]
    idx = torch.arange(hq) // (hq // hk)
    qq = q.double().permute(0, 2, 1, 3)
    kk, vv = (t.double()[:, :, idx].permute(0, 2, 1, 3) for t in (k, v))
    s = (qq @ kk.transpose(-1, -2)) * scale  # [b, hq, sq, sk]
    if causal:
        visible = torch.arange(sk).unsqueeze(0) <= torch.arange(sq).unsqueeze(1) + (sk - sq)
        s = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # -inf where a row sees no key (also for sk == 0)
    empty = torch.isneginf(lse)
    p = torch.where(empty.unsqueeze(-1), 0.0, torch.exp(s - lse.unsqueeze(-1)))
    finite = s[torch.isfinite(s)]
    smax = float(finite.abs().max()) if finite.numel() else 0.0
    return (p @ vv).permute(0, 2, 1, 3), torch.where(empty, float("inf"), lse), smax


def _strided(t: torch.Tensor) -> torch.Tensor:
    """The same values as a non-contiguous view: head_dim padded by 8 (as the worker's strided draws)."""
    full = torch.full((*t.shape[:3], t.shape[3] + 8), float("nan"), dtype=t.dtype)
    full[..., : t.shape[3]] = t
    return full[..., : t.shape[3]]


# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal, chunk_q, chunk_heads, q layout, dtype)
_EDGE_CASES = [
    (2, 37, 20, 4, 2, 32, True, 8, 3, "dense", torch.float32),  # sq > sk causal: the first 17 rows see no key
    (2, 37, 20, 4, 2, 32, True, 1024, None, "dense", torch.float32),  # ... in one chunk
    (1, 9, 1, 2, 1, 16, True, 4, None, "dense", torch.float32),  # sk = 1, causal: 8 empty rows, MQA
    (2, 20, 45, 8, 1, 64, True, 7, 3, "dense", torch.float32),  # sq < sk causal, MQA, ragged chunks
    (1, 64, 64, 6, 2, 64, True, 16, 4, "strided", torch.float32),  # square causal, strided q, GQA
    (2, 40, 33, 4, 4, 128, False, 16, None, "strided", torch.bfloat16),  # non-causal, strided bf16 q
    (1, 50, 50, 4, 2, 64, True, 1024, None, "transposed", torch.float16),  # q as a [b, h, s, d] transpose
    (2, 1, 33, 2, 2, 64, True, 1024, None, "dense", torch.float32),  # seqlen_q = 1 (decode-like)
    (2, 1, 33, 2, 2, 64, False, 1024, None, "dense", torch.bfloat16),
    (1, 1, 1, 2, 2, 64, True, 1024, None, "dense", torch.float32),  # seqlen 1
    (1, 5, 0, 2, 1, 16, False, 1024, None, "dense", torch.float32),  # seqlen_k = 0: every row empty
    (1, 5, 0, 2, 1, 16, True, 2, None, "dense", torch.float32),
    (1, 0, 7, 2, 2, 16, True, 1024, None, "dense", torch.float32),  # seqlen_q = 0: empty outputs
    (3, 130, 129, 2, 1, 96, True, 32, 1, "dense", torch.float32),  # sq = sk + 1: one empty row, many chunks
]


@pytest.mark.parametrize("logit_scale", [1.0, 6.0])
@pytest.mark.parametrize(("b", "sq", "sk", "hq", "hk", "d", "causal", "chunk_q", "chunk_heads", "layout", "dtype"),
                         _EDGE_CASES)
def test_reference_matches_float64_and_the_previous_reference(b, sq, sk, hq, hk, d, causal, chunk_q, chunk_heads,
                                                              layout, dtype, logit_scale) -> None:
    """The in-place reference of issue #3 against the float64 definition and the reference it replaced,
    on edge shapes and on large logits (q, k ~ 6 N(0,1): exp overflows fp32 without max subtraction)."""
    g = torch.Generator().manual_seed(sq * 1000 + sk)
    q = (logit_scale * torch.randn(b, sq, hq, d, generator=g)).to(dtype)
    k = (logit_scale * torch.randn(b, sk, hk, d, generator=g)).to(dtype)
    v = torch.randn(b, sk, hk, d, generator=g).to(dtype)
    if layout == "strided":
        q = _strided(q)
    elif layout == "transposed":
        q = q.transpose(1, 2).contiguous().transpose(1, 2)
    assert layout == "dense" or not q.is_contiguous()
    scale = 0.7 / math.sqrt(d)  # a non-default softmax_scale
    q_before = q.clone()
    o, lse = attention_reference(q, k, v, softmax_scale=scale, causal=causal, chunk_q=chunk_q, chunk_heads=chunk_heads)
    assert o.shape == (b, sq, hq, d) and lse.shape == (b, hq, sq)
    assert o.dtype == lse.dtype == torch.float32
    assert bits_equal(q, q_before)  # the scale is folded into a copy, never into the caller's q
    o64, lse64, smax = _attention64(q, k, v, scale, causal)
    o_old, lse_old = _reference_before_issue3(q, k, v, softmax_scale=scale, causal=causal, chunk_q=chunk_q,
                                              chunk_heads=chunk_heads)
    # empty rows: exactly o = 0 and lse = +inf, on the same rows as the definition and the old reference
    empty = torch.isposinf(lse64)
    assert torch.equal(torch.isposinf(lse), empty) and torch.equal(torch.isposinf(lse_old), empty)
    assert torch.isfinite(lse[~empty]).all() and torch.isfinite(o).all()
    assert (o.permute(0, 2, 1, 3)[empty] == 0).all()
    if causal and sq > sk:
        assert empty[:, :, : sq - sk].all() and not empty[:, :, sq - sk:].any()
    # fp32 level: the logits' rounding dominates, so the bound is ~8 fp32 ulps (2^-23) of the largest logit
    tol = 1e-6 * max(1.0, smax)
    err_o = float((o.double() - o64).abs().max()) if o.numel() else 0.0
    err_lse = float((lse.double() - lse64)[~empty].abs().max()) if (~empty).any() else 0.0
    assert err_o <= tol and err_lse <= tol, (err_o, err_lse, tol)
    # no less precise than the reference it replaced (up to a few ulps of the largest logit)
    err_o_old = float((o_old.double() - o64).abs().max()) if o.numel() else 0.0
    err_lse_old = float((lse_old.double() - lse64)[~empty].abs().max()) if (~empty).any() else 0.0
    assert err_o <= 2 * err_o_old + 3e-7 * max(1.0, smax), (err_o, err_o_old)
    assert err_lse <= 2 * err_lse_old + 3e-7 * max(1.0, smax), (err_lse, err_lse_old)
    if (~empty).any():  # and close to it directly
        assert float((o - o_old).abs().max()) <= tol and float((lse - lse_old)[~empty].abs().max()) <= tol


def test_reference_leaves_fp32_inputs_untouched_and_is_deterministic() -> None:
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 70, 4, 64, generator=g) for _ in range(3))
    copies = [t.clone() for t in (q, k, v)]
    first = attention_reference(q, k, v, softmax_scale=0.3, causal=True, chunk_q=16)
    second = attention_reference(q, k, v, softmax_scale=0.3, causal=True, chunk_q=16)
    assert all(bits_equal(a, b) for a, b in zip((q, k, v), copies, strict=True))
    assert bits_equal(first[0], second[0]) and bits_equal(first[1], second[1])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_poison_is_detected_and_distinct_from_computed_nan(dtype) -> None:
    t = poison_(torch.empty(100, dtype=dtype))
    assert count_poison(t) == 100 and torch.isnan(t).all()
    t[:40] = torch.zeros(40, dtype=dtype) / 0  # a NaN the kernel computed is not poison
    t[40:50] = 1.0
    assert count_poison(t) == 50
    assert bits_equal(t, t.clone()) and not bits_equal(t, poison_(t.clone()))


def _case(dtype=torch.bfloat16):
    q, k, v = torch.randn(2, 40, 4, 64), torch.randn(2, 40, 4, 64), torch.randn(2, 40, 4, 64)
    o_ref, lse_ref = attention_reference(q, k, v, causal=True)
    return o_ref, lse_ref


def test_flash_attention_rule_accepts_rounding_and_rejects_a_bug() -> None:
    o_ref, lse_ref = _case()
    orig = error_report(o_ref.bfloat16(), lse_ref, o_ref, lse_ref)  # the original: rounding error only
    tol_o, tol_lse = tolerances(orig, o_ref, lse_ref)
    assert tol_o >= 2 * orig.max_abs_err_o
    same = error_report(o_ref.bfloat16(), lse_ref, o_ref, lse_ref)
    assert judge(same, tol_o, tol_lse, torch.bfloat16) is None
    buggy = o_ref.clone()
    buggy[0, 7, 1, 3] += 0.05  # one wrong element
    kind, check, msg = judge(error_report(buggy.bfloat16(), lse_ref, o_ref, lse_ref), tol_o, tol_lse, torch.bfloat16)
    assert (kind, check) == ("wrong_output", "reference_tolerance") and "max|o - ref|" in msg
    lse_bad = lse_ref + 1e-2
    assert judge(error_report(o_ref.bfloat16(), lse_bad, o_ref, lse_ref), tol_o, tol_lse, torch.bfloat16)[0] == "wrong_output"


def test_precision_drop_fails_even_when_the_original_is_rough() -> None:
    o_ref, lse_ref = _case()
    orig = error_report(o_ref.bfloat16(), lse_ref, o_ref, lse_ref)
    tol_o, tol_lse = tolerances(orig, o_ref, lse_ref)
    coarse = (o_ref * 16).round() / 16  # ~4 mantissa bits: below what bf16 allows
    assert judge(error_report(coarse.bfloat16(), lse_ref, o_ref, lse_ref), tol_o, tol_lse, torch.bfloat16) is not None


def test_nan_and_inf_rows_are_named() -> None:
    o_ref, lse_ref = _case()
    orig = error_report(o_ref.bfloat16(), lse_ref, o_ref, lse_ref)
    tol_o, tol_lse = tolerances(orig, o_ref, lse_ref)
    o = o_ref.bfloat16()
    o[1, 3] = float("nan")
    assert judge(error_report(o, lse_ref, o_ref, lse_ref), tol_o, tol_lse, torch.bfloat16)[1] == "finite_output"
    lse = lse_ref.clone()
    lse[0, 0, 0] = float("inf")  # claims a row sees no key, but it does
    assert "lse = +inf" in judge(error_report(o_ref.bfloat16(), lse, o_ref, lse_ref), tol_o, tol_lse, torch.bfloat16)[2]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_timed_bound_allows_one_ulp_between_correct_kernels_but_not_a_replay(dtype) -> None:
    from harness.checks import timed_bound_o, ulp_at

    assert ulp_at(0.75, torch.bfloat16) == 2.0**-8 and ulp_at(1.5, torch.float16) == 2.0**-10
    o_ref, lse_ref = _case()
    orig = error_report(o_ref.to(dtype), lse_ref, o_ref, lse_ref)
    tol_o, _ = tolerances(orig, o_ref, lse_ref)
    bound = timed_bound_o(tol_o, orig.max_abs_err_o, max(2 * float(o_ref.abs().max()), 1.0), dtype)
    # two correct kernels on fresh inputs: fp32 results a hair apart, each rounded to the dtype on its own
    fresh = torch.randn(2, 40, 4, 64) * 0.9
    a = fresh.to(dtype)
    b = (fresh + ulp_at(0.9, dtype) * 0.5001 * torch.sign(fresh)).to(dtype)  # lands on the next value sometimes
    assert (a.float() - b.float()).abs().max() > 0  # they do differ
    assert (a.float() - b.float()).abs().max() <= bound
    # a replay of the previous sample's output is far outside the bound
    stale = torch.randn(2, 40, 4, 64).to(dtype)
    assert (a.float() - stale.float()).abs().max() > 10 * bound
