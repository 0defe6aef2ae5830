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
    b, sq, hq, d = q.shape
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
